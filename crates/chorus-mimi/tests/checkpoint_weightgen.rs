//! The Rust weight generator reproduces `tools/fixtures/weightgen.py` bit for bit, checked
//! against the golden file that `tools/fixtures/make_golden.py` writes.

use chorus_core::HostTensor;
use chorus_mimi::checkpoint::hf_encoder::encoder_tensor_specs;
use chorus_mimi::checkpoint::hf_layout::decoder_tensor_specs;
use chorus_mimi::checkpoint::kyutai_layout::KyutaiView;
use chorus_mimi::checkpoint::source::{MemorySource, TensorSource};
use chorus_mimi::checkpoint::Layout;
use chorus_mimi::random::{init_for, random_tensor, random_tensors, uniform, RANDOM_MODEL_SEED};
use chorus_mimi::MimiConfig;
use serde_json::Value;

const GOLDEN: &str = include_str!("../../../tests/fixtures/weightgen_golden.json");

fn golden() -> Value {
    serde_json::from_str(GOLDEN).unwrap()
}

fn check(entry: &Value, name: &str, t: &HostTensor) {
    let shape: Vec<usize> = serde_json::from_value(entry["shape"].clone()).unwrap();
    assert_eq!(t.shape, shape, "{name}");
    let first: Vec<u32> = serde_json::from_value(entry["first_bits"].clone()).unwrap();
    let ours: Vec<u32> = t
        .data
        .iter()
        .take(first.len())
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(ours, first, "{name}: first values");
    let sum: u64 = t.data.iter().map(|x| u64::from(x.to_bits())).sum();
    assert_eq!(sum, entry["bit_sum"].as_u64().unwrap(), "{name}: bit sum");
}

#[test]
fn golden_seed_is_the_model_seed() {
    assert_eq!(golden()["seed"].as_u64().unwrap(), RANDOM_MODEL_SEED);
}

#[test]
fn full_size_tensors_match_numpy() {
    let g = golden();
    let c = MimiConfig::default();
    let specs = decoder_tensor_specs(&c);
    let entries = g["full"].as_array().unwrap();
    assert!(!entries.is_empty());
    for entry in entries {
        let name = entry["name"].as_str().unwrap();
        let spec = specs.iter().find(|s| s.name == name).unwrap();
        let t = random_tensor(
            RANDOM_MODEL_SEED,
            name,
            spec.shape.clone(),
            init_for(&c, name, &spec.shape),
        );
        check(entry, name, &t);
    }
}

#[test]
fn every_small_tensor_matches_numpy_in_both_layouts() {
    let g = golden();
    let c: MimiConfig = serde_json::from_value(g["small_config"].clone()).unwrap();
    c.validate().unwrap();
    for (key, layout) in [("hf", Layout::HuggingFace), ("kyutai", Layout::Kyutai)] {
        let ours = random_tensors(&c, RANDOM_MODEL_SEED, layout);
        // The decoder side first, then the encoder side.
        let theirs: Vec<&Value> = g["small"][key]
            .as_array()
            .unwrap()
            .iter()
            .chain(g["encoder_small"][key].as_array().unwrap())
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{key}");
        for ((name, t), entry) in ours.iter().zip(theirs) {
            assert_eq!(name, entry["name"].as_str().unwrap(), "{key}");
            check(entry, name, t);
        }
    }
}

#[test]
fn full_size_encoder_tensors_match_numpy() {
    let g = golden();
    let c = MimiConfig::default();
    let specs = encoder_tensor_specs(&c);
    let entries = g["encoder_full"].as_array().unwrap();
    assert!(!entries.is_empty());
    for entry in entries {
        let name = entry["name"].as_str().unwrap();
        let shape: Vec<usize> = serde_json::from_value(entry["shape"].clone()).unwrap();
        // A Kyutai-layout name (the fused in_proj) draws with the init of its HF q_proj.
        let hf = match name.strip_suffix("in_proj_weight") {
            Some(stem) => format!(
                "{}q_proj.weight",
                stem.replace("encoder_transformer.transformer.", "encoder_transformer.")
            ),
            None => name.to_string(),
        };
        let spec = specs.iter().find(|s| s.name == hf).unwrap();
        let t = random_tensor(
            RANDOM_MODEL_SEED,
            name,
            shape,
            init_for(&c, &hf, &spec.shape),
        );
        check(entry, name, &t);
    }
}

#[test]
fn draws_depend_on_seed_and_name_and_cover_the_range() {
    let a = uniform(1, "x", 4096);
    assert_ne!(a, uniform(2, "x", 4096));
    assert_ne!(a, uniform(1, "y", 4096));
    assert_eq!(a, uniform(1, "x", 4096));
    assert!(a.iter().all(|&v| (-1.0..1.0).contains(&v)));
    let mean = a.iter().sum::<f32>() / a.len() as f32;
    assert!(mean.abs() < 0.05, "mean {mean}");
    assert!(a.iter().any(|&v| v < -0.99) && a.iter().any(|&v| v > 0.99));
}

#[test]
fn kyutai_view_matches_the_fixture_scripts_conversion() {
    let g = golden();
    let c: MimiConfig = serde_json::from_value(g["small_config"].clone()).unwrap();
    let raw = random_tensors(&c, RANDOM_MODEL_SEED, Layout::Kyutai);
    let view = KyutaiView::new(MemorySource::new("kyutai", raw), c.num_attention_heads);
    let theirs = g["small"]["kyutai_as_hf"].as_array().unwrap();
    assert_eq!(theirs.len(), decoder_tensor_specs(&c).len());
    let encoder = g["encoder_small"]["kyutai_as_hf"].as_array().unwrap();
    assert_eq!(encoder.len(), encoder_tensor_specs(&c).len());
    for entry in theirs.iter().chain(encoder) {
        let name = entry["name"].as_str().unwrap();
        check(entry, name, &view.load(name).unwrap());
    }
}
