//! The seeded random models: every tensor of the list, drawn once, deterministic; the EOS-code
//! gain touches exactly the heads' code-0 row and columns.

use chorus_core::rng::{uniform, Init};
use chorus_csm::random::{init_for, random_weights, RandomOptions, RANDOM_CSM_SEED};
use chorus_csm::weights::{
    tensor_specs, Role, AUDIO_EMBED, CODEBOOKS_HEAD, DEPTH_AUDIO_EMBED, LM_HEAD,
};
use chorus_csm::{load_csm_model, CsmConfig, Layout};

#[test]
fn random_small_loads_every_tensor_with_its_shape() {
    let m = load_csm_model("random-small").unwrap();
    assert_eq!(m.layout, Layout::Random);
    assert_eq!(m.config, CsmConfig::random_small());
    for s in tensor_specs(&m.config) {
        let t = m.weights.get(&s.name).unwrap();
        assert_eq!(t.shape, s.shape, "{}", s.name);
        assert!(t.data.iter().all(|x| x.is_finite()), "{}", s.name);
    }
    // The tied table answers to both names and is one tensor.
    assert!(std::ptr::eq(
        m.weights.get(AUDIO_EMBED).unwrap(),
        m.weights.get(DEPTH_AUDIO_EMBED).unwrap()
    ));
    assert!(m
        .weights
        .get("backbone_model.layers.2.mlp.up_proj.weight")
        .is_err());
    assert!(m.tokenizer.as_ref().unwrap().is_byte_fallback());
}

#[test]
fn each_tensor_is_its_named_uniform_stream_under_its_role() {
    let c = CsmConfig::random_small();
    let w = random_weights(&c, RandomOptions::default()).unwrap();
    for s in tensor_specs(&c) {
        let n: usize = s.shape.iter().product();
        let Init { scale, offset } = init_for(s.role, &s.shape);
        let expected: Vec<u32> = uniform(RANDOM_CSM_SEED, &s.name, n)
            .into_iter()
            .map(|u| (u * scale + offset).to_bits())
            .collect();
        let got: Vec<u32> = w
            .get(&s.name)
            .unwrap()
            .data
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(got, expected, "{}", s.name);
    }
    let head = init_for(Role::Head, &[c.num_codebooks - 1, c.depth.hidden_size, 11]);
    assert_eq!(
        head.scale,
        (2.0 * (3.0f64 / 32.0).sqrt()) as f32,
        "fan-in of codebooks_head is its axis 1"
    );
}

#[test]
fn zero_gain_scales_only_the_code_0_logit_weights() {
    let c = CsmConfig::random_small();
    let plain = random_weights(&c, RandomOptions::default()).unwrap();
    let gains: Vec<f32> = (0..c.num_codebooks).map(|l| l as f32 - 2.5).collect();
    let tweaked = random_weights(
        &c,
        RandomOptions {
            zero_gains: gains.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    let (h, v) = (c.backbone.hidden_size, c.audio_vocab_size);
    for (i, (a, b)) in plain
        .lm_head
        .data
        .iter()
        .zip(&tweaked.lm_head.data)
        .enumerate()
    {
        let expected = if i / h == 0 { a * gains[0] } else { *a };
        assert_eq!(b.to_bits(), expected.to_bits(), "{LM_HEAD}[{i}]");
    }
    for (i, (a, b)) in plain
        .codebooks_head
        .data
        .iter()
        .zip(&tweaked.codebooks_head.data)
        .enumerate()
    {
        let level = i / (c.depth.hidden_size * v) + 1;
        let expected = if i % v == 0 { a * gains[level] } else { *a };
        assert_eq!(b.to_bits(), expected.to_bits(), "{CODEBOOKS_HEAD}[{i}]");
    }
    assert_eq!(plain.text_embeddings, tweaked.text_embeddings);
    let wrong = RandomOptions {
        zero_gains: vec![2.0; 3],
        ..Default::default()
    };
    assert!(random_weights(&c, wrong)
        .unwrap_err()
        .to_string()
        .contains("3 zero gains for 8 codebooks"));
}

/// `tests/fixtures/csm/weights_golden.json`, written by `tools/fixtures/csm_weights.py`.
fn golden() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/csm/weights_golden.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn random_weights_match_the_python_generator_bit_for_bit() {
    use chorus_csm::random::RandomSource;
    let doc = golden();
    assert_eq!(doc["seed"].as_u64().unwrap(), RANDOM_CSM_SEED);
    let entries = doc["tensors"].as_array().unwrap();
    assert!(entries.len() >= 10);
    for e in entries {
        let config = match e["config"].as_str().unwrap() {
            "random-small" => CsmConfig::random_small(),
            "random" => CsmConfig::csm_1b(),
            other => panic!("unknown config {other}"),
        };
        let name = e["name"].as_str().unwrap();
        let rows: Vec<usize> = serde_json::from_value(e["rows"].clone()).unwrap();
        let shape: Vec<usize> = serde_json::from_value(e["shape"].clone()).unwrap();
        let opts = RandomOptions {
            zero_gains: serde_json::from_value(e["zero_gains"].clone()).unwrap(),
            ..Default::default()
        };
        let src = RandomSource::new(&config, opts).unwrap();
        let spec = tensor_specs(&config)
            .into_iter()
            .find(|s| s.name == name)
            .unwrap();
        assert_eq!(spec.shape, shape, "{name}");
        let t = src.rows(name, rows[0]..rows[1]).unwrap();
        let first: Vec<u32> = serde_json::from_value(e["first_bits"].clone()).unwrap();
        let bits: Vec<u32> = t.data.iter().map(|x| x.to_bits()).collect();
        assert_eq!(&bits[..first.len()], &first[..], "{name} first values");
        let bit_sum: u64 = bits.iter().map(|&b| u64::from(b)).sum();
        assert_eq!(bit_sum, e["bit_sum"].as_u64().unwrap(), "{name} bit sum");
        let sum: f64 = t.data.iter().map(|&x| f64::from(x)).sum();
        let expected = e["sum_f64"].as_f64().unwrap();
        assert!(
            (sum - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{name}: {sum} vs {expected}"
        );
    }
}
