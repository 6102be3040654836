//! Checkpoint loading: Kyutai's layout and transformers' (converted here with the conversion
//! script's arithmetic) both load to the seeded weights bit for bit, from a directory or explicit
//! files, with or without a config; one named error per failure.

mod common;

use std::path::Path;

use chorus_core::HostTensor;
use chorus_stt::load::{load_stt_model, Layout};
use chorus_stt::random::{random_weights, RANDOM_STT_SEED};
use chorus_stt::{SttConfig, SttWeights};
use common::{hf_json, hf_tensors, kyutai_json, kyutai_tensors, temp_dir, write, write_json};

fn bits(t: &HostTensor) -> Vec<u32> {
    t.data.iter().map(|v| v.to_bits()).collect()
}

fn assert_same(a: &SttWeights, b: &SttWeights) {
    assert_eq!(bits(&a.audio_emb), bits(&b.audio_emb), "audio tables");
    assert_eq!(bits(&a.text_emb), bits(&b.text_emb), "text table");
    for (l, (x, y)) in a.layers.iter().zip(&b.layers).enumerate() {
        for (name, p, q) in [
            ("norm1", &x.norm1, &y.norm1),
            ("in_proj", &x.in_proj, &y.in_proj),
            ("out_proj", &x.out_proj, &y.out_proj),
            ("norm2", &x.norm2, &y.norm2),
            ("linear_in", &x.linear_in, &y.linear_in),
            ("linear_out", &x.linear_out, &y.linear_out),
        ] {
            assert_eq!(p.shape, q.shape, "layer {l} {name}");
            assert_eq!(bits(p), bits(q), "layer {l} {name}");
        }
    }
    assert_eq!(bits(&a.out_norm), bits(&b.out_norm));
    assert_eq!(bits(&a.text_linear), bits(&b.text_linear));
}

fn small() -> SttConfig {
    SttConfig::random_small()
}

fn err(spec: &Path) -> String {
    load_stt_model(&spec.display().to_string())
        .unwrap_err()
        .to_string()
}

#[test]
fn kyutai_layout_loads_to_the_seeded_weights() {
    let c = small();
    let d_tmp = temp_dir("kyutai");
    let d = d_tmp.path();
    write(&d.join("model.safetensors"), &kyutai_tensors(&c));
    write_json(&d.join("config.json"), &kyutai_json(&c));
    let m = load_stt_model(&d.display().to_string()).unwrap();
    assert_eq!(m.layout, Layout::Kyutai);
    assert_eq!(m.config, c);
    assert_same(&m.weights, &random_weights(&c, RANDOM_STT_SEED).unwrap());
    assert_eq!(m.weights.extra_heads.len(), 4);
    // Explicit files, the config found beside the weights.
    let spec = d.join("model.safetensors").display().to_string();
    assert_eq!(load_stt_model(&spec).unwrap().config, c);
}

#[test]
fn transformers_layout_loads_to_the_same_weights() {
    // transformers has no VAD heads: the same model without them.
    let c = SttConfig {
        extra_heads: 0,
        ..small()
    };
    let d_tmp = temp_dir("hf");
    let d = d_tmp.path();
    write(&d.join("model.safetensors"), &hf_tensors(&c));
    write_json(&d.join("config.json"), &hf_json(&c));
    let m = load_stt_model(&d.display().to_string()).unwrap();
    assert_eq!(m.layout, Layout::HuggingFace);
    assert_same(&m.weights, &random_weights(&c, RANDOM_STT_SEED).unwrap());
}

#[test]
fn a_checkpoint_without_config_is_told_from_its_text_table() {
    let d_tmp = temp_dir("noconfig");
    let d = d_tmp.path();
    write(&d.join("model.safetensors"), &kyutai_tensors(&small()));
    let e = err(d);
    assert!(e.contains("no config.json") && e.contains("41 rows"), "{e}");
}

#[test]
fn every_bad_checkpoint_gets_a_named_error() {
    let c = small();
    let good = kyutai_tensors(&c);
    let case = |name: &str, tensors: Vec<(String, HostTensor)>, config: serde_json::Value| {
        let d_tmp = temp_dir(name);
        let d = d_tmp.path();
        write(&d.join("model.safetensors"), &tensors);
        write_json(&d.join("config.json"), &config);
        err(d)
    };
    let without =
        |drop: &str| -> Vec<_> { good.iter().filter(|(n, _)| n != drop).cloned().collect() };
    let e = case("missing", without("text_linear.weight"), kyutai_json(&c));
    assert!(e.contains("text_linear.weight"), "{e}");
    let mut wrong = good.clone();
    let at = wrong.iter().position(|(n, _)| n == "emb.3.weight").unwrap();
    wrong[at].1 = HostTensor::new(vec![2048, 64], vec![0.0; 2048 * 64]).unwrap();
    let e = case("shape", wrong, kyutai_json(&c));
    assert!(
        e.contains("emb.3.weight") && e.contains("2049, 64") && e.contains("2048, 64"),
        "{e}"
    );
    // One layer fewer in the config than in the checkpoint.
    let mut fewer = kyutai_json(&c);
    fewer["num_layers"] = 1.into();
    let e = case("extra", good.clone(), fewer);
    assert!(
        e.contains("no place for") && e.contains("transformer.layers.1."),
        "{e}"
    );
    // A 2.6B-style config (no VAD heads) over a checkpoint that has them.
    let mut no_vad = kyutai_json(&c);
    no_vad["extra_heads_num_heads"] = 0.into();
    let e = case("vad", good.clone(), no_vad);
    assert!(e.contains("extra_heads.0.weight"), "{e}");
    let e = case(
        "unknown",
        vec![(
            "decoder.weight".into(),
            HostTensor::new(vec![2], vec![0.0; 2]).unwrap(),
        )],
        kyutai_json(&c),
    );
    assert!(
        e.contains("not a Kyutai STT checkpoint") && e.contains("decoder.weight"),
        "{e}"
    );
    let mut mixed = good.clone();
    mixed.push((
        "model.layers.0.mlp.fc1.weight".into(),
        HostTensor::new(vec![1], vec![0.0]).unwrap(),
    ));
    let e = case("mixed", mixed, kyutai_json(&c));
    assert!(e.contains("mixes"), "{e}");
    // transformers' layout: a missing projection is named under its own name.
    let hc = SttConfig {
        extra_heads: 0,
        ..c.clone()
    };
    let hf: Vec<_> = hf_tensors(&hc)
        .into_iter()
        .filter(|(n, _)| n != "model.layers.1.self_attn.k_proj.linear.weight")
        .collect();
    let e = case("hf-missing", hf, hf_json(&hc));
    assert!(
        e.contains("model.layers.1.self_attn.k_proj.linear.weight"),
        "{e}"
    );
    let e = err(Path::new("/nonexistent/stt/dir"));
    assert!(e.contains("no such file"), "{e}");
}

/// A SentencePiece model of `n` pieces (`▁w{i}`, the first four control).
fn sp_model(n: usize) -> Vec<u8> {
    use prost::Message;
    use sentencepiece_model::{ModelProto, SentencePiece, Type};
    let pieces = (0..n)
        .map(|i| SentencePiece {
            piece: Some(format!("\u{2581}w{i}")),
            score: Some(0.0),
            r#type: Some(if i < 4 { Type::Control } else { Type::Normal } as i32),
        })
        .collect();
    ModelProto {
        pieces,
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn the_tokenizer_the_config_names_is_found_beside_the_weights() {
    let c = small();
    let d_tmp = temp_dir("tokenizer");
    let d = d_tmp.path();
    write(&d.join("model.safetensors"), &kyutai_tensors(&c));
    let mut cfg = kyutai_json(&c);
    cfg["tokenizer_name"] = "tokenizer_test_40.model".into();
    write_json(&d.join("config.json"), &cfg);
    std::fs::write(d.join("tokenizer_test_40.model"), sp_model(40)).unwrap();
    let m = load_stt_model(&d.display().to_string()).unwrap();
    let tok = m.tokenizer.expect("the named tokenizer");
    assert_eq!(tok.decode(&[5, 0, 6]).unwrap(), "w5 w6");
    // A tokenizer of another vocabulary is refused by name.
    std::fs::write(d.join("tokenizer_test_40.model"), sp_model(39)).unwrap();
    let e = err(d);
    assert!(
        e.contains("tokenizer_test_40.model") && e.contains("39 pieces"),
        "{e}"
    );
}

#[test]
fn the_transformers_view_names_exactly_transformers_tensors() {
    // The oracle wrote the LM tensors of transformers' own model of this config.
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stt_small.json");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let theirs: std::collections::BTreeMap<String, Vec<usize>> =
        serde_json::from_value(meta["transformers_lm_tensors"].clone()).unwrap();
    let ours: std::collections::BTreeMap<String, Vec<usize>> =
        chorus_stt::hf::hf_specs(&small()).into_iter().collect();
    assert_eq!(ours, theirs);
}
