//! Checkpoint loading: the HF layout (one file or shards with an index, the tied table under
//! either name or both), Sesame's layout through the inverse mapping (bit for bit equal), the q/k
//! row permutation, and one named error per failure.

use std::path::Path;

use chorus_core::checkpoint::{write_tensors, Dtype, TensorData};
use chorus_core::HostTensor;
use chorus_csm::load::{load_csm_model, Layout};
use chorus_csm::random::{random_weights, RandomOptions};
use chorus_csm::sesame::{
    half_to_interleaved, hf_to_sesame, interleaved_to_half, rope_rows, sesame_to_hf,
};
use chorus_csm::weights::{tensor_specs, CsmWeights, AUDIO_EMBED, DEPTH_AUDIO_EMBED};
use chorus_csm::CsmConfig;

/// A fresh directory under the system temp dir, removed when the test ends.
fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-csm-{test}-"))
        .tempdir()
        .unwrap()
}

fn small() -> (CsmConfig, CsmWeights) {
    let c = CsmConfig::random_small();
    let w = random_weights(&c, RandomOptions::default()).unwrap();
    (c, w)
}

/// Every HF tensor of `w` (the tied table under the backbone name only).
fn hf_tensors(c: &CsmConfig, w: &CsmWeights) -> Vec<(String, HostTensor)> {
    tensor_specs(c)
        .into_iter()
        .map(|s| (s.name.clone(), w.get(&s.name).unwrap().clone()))
        .collect()
}

fn write(path: &Path, tensors: &[(String, HostTensor)]) {
    let data: Vec<(String, TensorData)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), TensorData::Float(t, Dtype::F32)))
        .collect();
    write_tensors(path, &data, &[]).unwrap();
}

fn write_config(dir: &Path) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/csm/config.json"
    ))
    .unwrap();
    std::fs::write(dir.join("config.json"), text).unwrap();
}

fn assert_same(a: &CsmWeights, b: &CsmWeights, c: &CsmConfig) {
    for s in tensor_specs(c) {
        let (x, y) = (a.get(&s.name).unwrap(), b.get(&s.name).unwrap());
        assert_eq!(x.shape, y.shape, "{}", s.name);
        let bits = |t: &HostTensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(x), bits(y), "{}", s.name);
    }
}

fn load_err(spec: &Path) -> String {
    load_csm_model(spec.to_str().unwrap())
        .expect_err("the checkpoint must be refused")
        .to_string()
}

#[test]
fn q_k_permutation_moves_interleaved_pairs_to_halves() {
    // 2 heads of width 4, 1 column: row value = its index.
    let t = HostTensor::new(vec![8, 1], (0..8).map(|x| x as f32).collect()).unwrap();
    let half = interleaved_to_half(&t, 2, 4).unwrap();
    // Within a head, new row r * 2 + j = old row 2j + r: [0, 2, 1, 3] per head.
    assert_eq!(half.data, vec![0., 2., 1., 3., 4., 6., 5., 7.]);
    assert_eq!(half_to_interleaved(&half, 2, 4).unwrap(), t);
    assert!(interleaved_to_half(&t, 3, 4).is_err());
    let c = CsmConfig::csm_1b();
    assert_eq!(
        rope_rows(&c, "backbone_model.layers.3.self_attn.q_proj.weight"),
        Some((32, 64))
    );
    assert_eq!(
        rope_rows(&c, "backbone_model.layers.3.self_attn.k_proj.weight"),
        Some((8, 64))
    );
    assert_eq!(
        rope_rows(&c, "depth_decoder.model.layers.0.self_attn.q_proj.weight"),
        Some((8, 128))
    );
    assert_eq!(
        rope_rows(&c, "depth_decoder.model.layers.0.self_attn.k_proj.weight"),
        Some((2, 128))
    );
    assert_eq!(
        rope_rows(&c, "depth_decoder.model.layers.0.self_attn.v_proj.weight"),
        None
    );
}

#[test]
fn sesame_names_map_to_hf_names_and_back() {
    let c = CsmConfig::csm_1b();
    for s in tensor_specs(&c) {
        let ses = hf_to_sesame(&s.name).unwrap_or_else(|| panic!("{} has no Sesame name", s.name));
        assert_eq!(sesame_to_hf(&ses).as_deref(), Some(s.name.as_str()));
    }
    assert_eq!(
        hf_to_sesame("backbone_model.layers.7.mlp.gate_proj.weight").unwrap(),
        "backbone.layers.7.mlp.w1.weight"
    );
    assert_eq!(
        hf_to_sesame("depth_decoder.model.layers.1.mlp.down_proj.weight").unwrap(),
        "decoder.layers.1.mlp.w2.weight"
    );
    assert_eq!(
        hf_to_sesame("depth_decoder.codebooks_head.weight").unwrap(),
        "audio_head"
    );
    assert_eq!(hf_to_sesame(DEPTH_AUDIO_EMBED), None);
    assert_eq!(sesame_to_hf("backbone.layers.x.attn.q_proj.weight"), None);
}

#[test]
fn sesame_layout_loads_to_the_hf_weights_bit_for_bit() {
    let (c, w) = small();
    let dir_tmp = temp_dir("sesame");
    let dir = dir_tmp.path();
    let sesame: Vec<(String, HostTensor)> = hf_tensors(&c, &w)
        .into_iter()
        .map(|(name, t)| {
            let t = match rope_rows(&c, &name) {
                Some((heads, d)) => half_to_interleaved(&t, heads, d).unwrap(),
                None => t,
            };
            (hf_to_sesame(&name).unwrap(), t)
        })
        .collect();
    write(&dir.join("model.safetensors"), &sesame);
    std::fs::write(
        dir.join("config.json"),
        r#"{"args": {"audio_num_codebooks": 8, "audio_vocab_size": 11, "backbone_flavor": "llama-1B",
            "decoder_flavor": "llama-100M", "text_vocab_size": 100}}"#,
    )
    .unwrap();
    // Sesame's config carries no ids: csm-1b's do not fit an 11-class audio vocabulary.
    let e = load_err(dir);
    assert!(
        e.contains("codebook_pad_token_id 2050 is outside the audio vocabulary of 11"),
        "{e}"
    );
    std::fs::write(
        dir.join("config.json"),
        r#"{"audio_num_codebooks": 32, "audio_vocab_size": 2051, "backbone_flavor": "llama-1B",
            "decoder_flavor": "llama-100M", "text_vocab_size": 128256}"#,
    )
    .unwrap();
    // csm-1b's shapes: the small weights are refused by name and both shapes.
    let e = load_err(dir);
    assert!(e.contains("has shape") && e.contains("expected"), "{e}");
    write_config(dir);
    let m = load_csm_model(dir.to_str().unwrap()).unwrap();
    assert_eq!(m.layout, Layout::Sesame);
    assert_same(&m.weights, &w, &c);
    // The q rows really moved: the stored Sesame tensor differs from the HF one.
    let q = "backbone_model.layers.0.self_attn.q_proj.weight";
    assert_ne!(
        sesame
            .iter()
            .find(|(n, _)| n == &hf_to_sesame(q).unwrap())
            .unwrap()
            .1
            .data,
        w.get(q).unwrap().data
    );
}

#[test]
fn hf_layout_loads_from_one_file_or_shards_with_either_table_name() {
    let (c, w) = small();
    let mut tensors = hf_tensors(&c, &w);
    let dir_tmp = temp_dir("hf");
    let dir = dir_tmp.path();
    write_config(dir);
    // The codec's tensors are ignored.
    tensors.push((
        "codec_model.decoder.layers.0.conv.weight".into(),
        HostTensor::zeros(vec![2, 2]),
    ));
    write(&dir.join("model.safetensors"), &tensors);
    let m = load_csm_model(dir.to_str().unwrap()).unwrap();
    assert_eq!(m.layout, Layout::HuggingFace);
    assert_same(&m.weights, &w, &c);

    // Both names of the tied table, stored equal; then only the depth decoder's.
    let table = w.get(AUDIO_EMBED).unwrap().clone();
    let mut both = tensors.clone();
    both.push((DEPTH_AUDIO_EMBED.into(), table.clone()));
    write(&dir.join("model.safetensors"), &both);
    assert_same(
        &load_csm_model(dir.to_str().unwrap()).unwrap().weights,
        &w,
        &c,
    );
    let mut differ = both.clone();
    differ.last_mut().unwrap().1.data[3 * c.backbone.hidden_size] += 1.0;
    write(&dir.join("model.safetensors"), &differ);
    let e = load_err(dir);
    assert!(e.contains("copies differ at row 3"), "{e}");
    let depth_only: Vec<_> = both
        .iter()
        .filter(|(n, _)| n != AUDIO_EMBED)
        .cloned()
        .collect();
    write(&dir.join("model.safetensors"), &depth_only);
    assert_same(
        &load_csm_model(dir.to_str().unwrap()).unwrap().weights,
        &w,
        &c,
    );

    // Two shards and an index.
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let (a, b) = tensors.split_at(tensors.len() / 2);
    write(&dir.join("model-00001-of-00002.safetensors"), a);
    write(&dir.join("model-00002-of-00002.safetensors"), b);
    let map: serde_json::Map<String, serde_json::Value> = a
        .iter()
        .map(|(n, _)| (n.clone(), "model-00001-of-00002.safetensors".into()))
        .chain(
            b.iter()
                .map(|(n, _)| (n.clone(), "model-00002-of-00002.safetensors".into())),
        )
        .collect();
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    assert_same(
        &load_csm_model(dir.to_str().unwrap()).unwrap().weights,
        &w,
        &c,
    );
    // Explicit files: the two shards and the config.
    let spec = format!(
        "{},{},{}",
        dir.join("model-00001-of-00002.safetensors").display(),
        dir.join("model-00002-of-00002.safetensors").display(),
        dir.join("config.json").display()
    );
    assert_same(&load_csm_model(&spec).unwrap().weights, &w, &c);
    // An index that puts a tensor in the wrong shard.
    let mut wrong = index.clone();
    wrong["weight_map"][&a[0].0] = "model-00002-of-00002.safetensors".into();
    std::fs::write(dir.join("model.safetensors.index.json"), wrong.to_string()).unwrap();
    let e = load_err(dir);
    assert!(e.contains(&a[0].0) && e.contains("the index puts"), "{e}");
}

#[test]
fn every_bad_checkpoint_gets_a_named_error() {
    let (c, w) = small();
    let good = hf_tensors(&c, &w);
    let dir_tmp = temp_dir("bad");
    let dir = dir_tmp.path();
    write_config(dir);
    let path = dir.join("model.safetensors");
    let q = "backbone_model.layers.1.self_attn.q_proj.weight";

    let missing: Vec<_> = good.iter().filter(|(n, _)| n != q).cloned().collect();
    write(&path, &missing);
    let e = load_err(dir);
    assert!(e.contains(q) && e.contains("missing"), "{e}");

    let mut shaped = good.clone();
    let t = shaped.iter_mut().find(|(n, _)| n == q).unwrap();
    t.1 = HostTensor::zeros(vec![64, 32]);
    write(&path, &shaped);
    let e = load_err(dir);
    assert!(
        e.contains(q) && e.contains("[64, 32]") && e.contains("[64, 64]"),
        "{e}"
    );

    let mut data: Vec<(String, TensorData)> = good
        .iter()
        .filter(|(n, _)| n != q)
        .map(|(n, t)| (n.clone(), TensorData::Float(t, Dtype::F32)))
        .collect();
    let ints = vec![0i32; 64 * 64];
    data.push((
        q.into(),
        TensorData::I32 {
            shape: vec![64, 64],
            data: &ints,
        },
    ));
    write_tensors(&path, &data, &[]).unwrap();
    let e = load_err(dir);
    assert!(e.contains(q) && e.contains("dtype I32"), "{e}");

    let mut extra = good.clone();
    extra.push((
        "backbone_model.layers.2.mlp.up_proj.weight".into(),
        HostTensor::zeros(vec![128, 64]),
    ));
    write(&path, &extra);
    let e = load_err(dir);
    assert!(e.contains("no place for") && e.contains("layers.2"), "{e}");

    write(
        &path,
        &[("encoder.weight".into(), HostTensor::zeros(vec![2]))],
    );
    let e = load_err(dir);
    assert!(
        e.contains("not a CSM checkpoint") && e.contains("encoder.weight"),
        "{e}"
    );

    std::fs::remove_file(&path).unwrap();
    std::fs::write(dir.join("ckpt.pt"), b"pickle").unwrap();
    let e = load_err(dir);
    assert!(e.contains("pickled") && e.contains("save_file"), "{e}");

    let e = load_csm_model("/no/such/dir/here").unwrap_err().to_string();
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn an_offline_hub_spec_names_the_fix() {
    // A cache that does not hold the repo and no network: the error says how to pass local files.
    let cache_tmp = temp_dir("hub-cache");
    let cache = cache_tmp.path();
    std::env::set_var("HF_HUB_CACHE", cache);
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let e = load_csm_model("sesame/csm-1b").unwrap_err().to_string();
    assert!(
        e.contains("HF_HUB_OFFLINE") && e.contains("--model DIR"),
        "{e}"
    );
}
