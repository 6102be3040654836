//! Checkpoint loading: the upstream file layout from a directory or explicit files, f32 and bf16,
//! q/k/v and gate/up fused at load, the LM head cut to its audio rows, and one named error per
//! kind of broken input.

mod common;

use common::tiny;
use std::path::Path;

use chorus_core::checkpoint::{write_safetensors, write_tensors, Dtype, TensorData, TensorSource};
use chorus_core::HostTensor;
use chorus_music::config::{AUDIO_CODE_OFFSET, AUDIO_END_TOKEN, SEMANTIC_VOCAB};
use chorus_music::load::{
    load_music_model, random_model, DEPTH_CONFIG, DEPTH_WEIGHTS, LM_CONFIG, LM_WEIGHTS,
};
use chorus_music::random::{RandomSource, RANDOM_MUSIC_SEED};
use chorus_music::weights::{depth_tensor_specs, lm_tensor_specs};
use chorus_music::Qwen3Config;

const LM_JSON: &str = r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":32,"intermediate_size":64,
"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,"vocab_size":200000,
"rms_norm_eps":1e-6,"rope_parameters":{"rope_theta":1000000,"rope_type":"default"},"max_position_embeddings":10240,
"tie_word_embeddings":false,"attention_bias":false,"use_sliding_window":false,"sliding_window":null,"hidden_act":"silu",
"max_window_layers":28,"dtype":"bfloat16","bos_token_id":null,"eos_token_id":null}"#;
const DEPTH_JSON: &str = r#"{"hidden_size":32,"num_layers":1,"num_attention_heads":2,"intermediate_size":48,
"audio_vocab_size":1024,"num_codebooks":8,"max_position_embeddings":16}"#;

/// Writes both checkpoints of the tiny model into `dir` (LM in `lm_dtype`, depth in f32).
fn write_model(dir: &Path, lm_dtype: Dtype, skip: Option<&str>, reshape: Option<&str>) {
    let (lm, depth) = tiny();
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, 1.0);
    let tensors = |specs: Vec<chorus_music::weights::Spec>| -> Vec<(String, HostTensor)> {
        specs
            .into_iter()
            .filter(|s| Some(s.name.as_str()) != skip)
            .map(|s| {
                let mut t = src.load(&s.name).unwrap();
                if Some(s.name.as_str()) == reshape {
                    let n = t.shape.iter().product::<usize>();
                    t.shape = vec![n];
                }
                (s.name, t)
            })
            .collect()
    };
    write_safetensors(
        &dir.join(LM_WEIGHTS),
        &tensors(lm_tensor_specs(&lm)),
        lm_dtype,
    )
    .unwrap();
    write_safetensors(
        &dir.join(DEPTH_WEIGHTS),
        &tensors(depth_tensor_specs(&depth)),
        Dtype::F32,
    )
    .unwrap();
    std::fs::write(dir.join(LM_CONFIG), LM_JSON).unwrap();
    std::fs::write(dir.join(DEPTH_CONFIG), DEPTH_JSON).unwrap();
}

fn tmp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chorus-music-ckpt-{name}-"))
        .tempdir()
        .unwrap()
}

/// The weights of a dense linear.
fn dense(l: &chorus_lm::HostLinear) -> &[f32] {
    &l.dense().expect("a dense linear").data
}

fn bf16_round(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect()
}

#[test]
fn a_directory_and_explicit_files_load_to_the_random_weights_they_hold() {
    let dir_tmp = tmp("ok");
    let dir = dir_tmp.path();
    write_model(dir, Dtype::BF16, None, None);
    let (lm, depth) = tiny();
    let want = random_model(lm.clone(), depth.clone(), 1.0).unwrap();
    for spec in [
        dir.display().to_string(),
        format!(
            "{},{}",
            dir.join(LM_WEIGHTS).display(),
            dir.join(DEPTH_WEIGHTS).display()
        ),
    ] {
        let got = load_music_model(&spec).unwrap();
        // The json's 10240 is read as is; the RoPE table is sized for the longest song anyway.
        assert_eq!(
            got.lm_config,
            Qwen3Config {
                max_position_embeddings: 10240,
                ..lm.clone()
            },
            "config json read"
        );
        assert_eq!(got.depth_config, depth);
        assert!(!got.random);
        // LM stored in bf16: equal to the random weights rounded to bf16; fused q/k/v in order.
        assert_eq!(got.lm.layers[0].qkv.shape(), [64, 32]);
        assert_eq!(
            dense(&got.lm.layers[0].qkv),
            bf16_round(dense(&want.lm.layers[0].qkv))
        );
        assert_eq!(
            dense(&got.lm.layers[0].gate_up),
            bf16_round(dense(&want.lm.layers[0].gate_up))
        );
        assert_eq!(
            got.lm.embed_tokens.data,
            bf16_round(&want.lm.embed_tokens.data)
        );
        // The audio head: code rows then END, read from the file's row ranges.
        assert_eq!(got.lm.audio_head.shape, vec![SEMANTIC_VOCAB + 1, 32]);
        assert_eq!(got.lm.audio_head.data, bf16_round(&want.lm.audio_head.data));
        // Depth stored in f32: exact.
        assert_eq!(
            dense(&got.depth.layers[0].qkv),
            dense(&want.depth.layers[0].qkv)
        );
        assert_eq!(got.depth.audio_heads.len(), 7);
        assert_eq!(
            dense(&got.depth.audio_heads[6]),
            dense(&want.depth.audio_heads[6])
        );
    }
    // The head rows of the random source are the rows a full draw gives.
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, 1.0);
    let full = src.load("lm_head.weight").unwrap();
    let h = 32;
    assert_eq!(
        want.lm.audio_head.data[..h],
        full.data[AUDIO_CODE_OFFSET * h..(AUDIO_CODE_OFFSET + 1) * h]
    );
    assert_eq!(
        want.lm.audio_head.data[SEMANTIC_VOCAB * h..],
        full.data[AUDIO_END_TOKEN * h..(AUDIO_END_TOKEN + 1) * h]
    );
}

#[test]
fn a_missing_tensor_is_named() {
    let dir_tmp = tmp("missing");
    let dir = dir_tmp.path();
    write_model(
        dir,
        Dtype::F32,
        Some("model.layers.0.self_attn.k_norm.weight"),
        None,
    );
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.layers.0.self_attn.k_norm.weight") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn a_wrong_shape_names_the_tensor_and_both_shapes() {
    let dir_tmp = tmp("shape");
    let dir = dir_tmp.path();
    write_model(dir, Dtype::F32, None, Some("layers.0.attn.to_k.weight"));
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("layers.0.attn.to_k.weight") && e.contains("[1024]") && e.contains("[32, 32]"),
        "{e}"
    );
}

#[test]
fn a_wrong_dtype_is_named() {
    let dir_tmp = tmp("dtype");
    let dir = dir_tmp.path();
    write_model(dir, Dtype::F32, None, None);
    // Rewrite the depth file with `norm.weight` stored as I32.
    let (lm, depth) = tiny();
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, 1.0);
    let floats: Vec<(String, HostTensor)> = depth_tensor_specs(&depth)
        .into_iter()
        .filter(|s| s.name != "norm.weight")
        .map(|s| (s.name.clone(), src.load(&s.name).unwrap()))
        .collect();
    let ints = vec![1i32; 32];
    let mut entries: Vec<(String, TensorData<'_>)> = floats
        .iter()
        .map(|(n, t)| (n.clone(), TensorData::Float(t, Dtype::F32)))
        .collect();
    entries.push((
        "norm.weight".into(),
        TensorData::I32 {
            shape: vec![32],
            data: &ints,
        },
    ));
    write_tensors(&dir.join(DEPTH_WEIGHTS), &entries, &[]).unwrap();
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("norm.weight") && e.contains("I32"), "{e}");
}

#[test]
fn a_malformed_or_unsupported_config_is_named() {
    let dir_tmp = tmp("config");
    let dir = dir_tmp.path();
    write_model(dir, Dtype::F32, None, None);
    std::fs::write(dir.join(LM_CONFIG), "{\"hidden_size\": 32,").unwrap();
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains(LM_CONFIG) && e.contains("malformed"), "{e}");
    std::fs::write(
        dir.join(LM_CONFIG),
        LM_JSON.replace(
            "\"use_sliding_window\":false",
            "\"use_sliding_window\":true",
        ),
    )
    .unwrap();
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("use_sliding_window"), "{e}");
    std::fs::write(dir.join(LM_CONFIG), LM_JSON).unwrap();
    std::fs::write(
        dir.join(DEPTH_CONFIG),
        DEPTH_JSON.replace("\"hidden_size\":32", "\"hidden_size\":64"),
    )
    .unwrap();
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden_size 64 differs from the LM's 32"), "{e}");
}

#[test]
fn missing_files_and_specs_are_named() {
    let dir_tmp = tmp("empty");
    let dir = dir_tmp.path();
    let e = load_music_model(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains(LM_WEIGHTS), "{e}");
    let e = load_music_model("/no/such/lm.safetensors,/no/such/depth.safetensors")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/no/such/lm.safetensors"), "{e}");
    // A hub spec offline names the variable and how to pass local files.
    std::env::set_var("HF_HUB_OFFLINE", "1");
    std::env::set_var("HF_HUB_CACHE", dir);
    let e = load_music_model("DeepBeepMeep/TTS/MiniMaxMusic3-Qwen3")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("HF_HUB_OFFLINE") && e.contains("--model DIR"),
        "{e}"
    );
}

#[test]
fn random_weights_match_the_python_generator_golden_values() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/music/weights_golden.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tensors = golden["tensors"].as_array().unwrap();
    assert!(tensors.len() >= 3);
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let rows = t["rows"].as_array().unwrap();
        let (r0, r1) = (
            rows[0].as_u64().unwrap() as usize,
            rows[1].as_u64().unwrap() as usize,
        );
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let cols: usize = shape[1..].iter().product();
        let init = chorus_music::random::init_for(name, &shape);
        let data = chorus_music::random::draw_rows(RANDOM_MUSIC_SEED, name, r0..r1, cols, init);
        let bits: Vec<u64> = t["first_bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        for (i, &b) in bits.iter().enumerate() {
            assert_eq!(u64::from(data[i].to_bits()), b, "{name}[{i}]");
        }
        let bit_sum: u64 = data.iter().map(|x| u64::from(x.to_bits())).sum();
        assert_eq!(bit_sum, t["bit_sum"].as_u64().unwrap(), "{name} bit sum");
    }
}
