//! The seeded random weights against tools/fixtures/stt_weights.py's golden file (first values
//! and sums, the small config whole and full-size row ranges), so the Rust and Python draws stay
//! one generator.

use chorus_core::checkpoint::TensorSource;
use chorus_stt::random::{RandomSource, RANDOM_STT_SEED};
use chorus_stt::weights::tensor_specs;
use chorus_stt::SttConfig;
use serde_json::Value;

fn golden() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/weights_golden.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn draws_match_the_python_generator() {
    let g = golden();
    assert_eq!(g["seed"].as_u64().unwrap(), RANDOM_STT_SEED);
    let entries = g["tensors"].as_array().unwrap();
    assert!(entries.len() >= 10);
    for e in entries {
        let c = match e["config"].as_str().unwrap() {
            "small" => SttConfig::random_small(),
            "1b" => SttConfig::stt_1b_en_fr(),
            "2.6b" => SttConfig::stt_2b6_en(),
            other => panic!("config {other}"),
        };
        let name = e["name"].as_str().unwrap();
        let shape: Vec<usize> = serde_json::from_value(e["shape"].clone()).unwrap();
        let spec = tensor_specs(&c)
            .into_iter()
            .find(|s| s.name == name)
            .unwrap();
        assert_eq!(spec.shape, shape, "{name}");
        let rows: Vec<usize> = serde_json::from_value(e["rows"].clone()).unwrap();
        let t = RandomSource::new(&c, RANDOM_STT_SEED)
            .rows(name, rows[0]..rows[1])
            .unwrap();
        let first: Vec<u32> = serde_json::from_value(e["first_bits"].clone()).unwrap();
        let got: Vec<u32> = t
            .data
            .iter()
            .take(first.len())
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(got, first, "{name} rows {rows:?}");
        let sum: f64 = t.data.iter().map(|&x| f64::from(x)).sum();
        let want = e["sum"].as_f64().unwrap();
        assert!(
            (sum - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{name}: {sum} vs {want}"
        );
    }
}

#[test]
fn a_whole_tensor_equals_its_rows_drawn_alone() {
    let c = SttConfig::random_small();
    let src = RandomSource::new(&c, RANDOM_STT_SEED);
    let whole = src.load("emb.5.weight").unwrap();
    let part = src.rows("emb.5.weight", 100..103).unwrap();
    assert_eq!(part.shape, vec![3, 64]);
    assert_eq!(&whole.data[100 * 64..103 * 64], part.data.as_slice());
    assert!(src.rows("emb.5.weight", 2000..2050).is_err());
    let e = src.load("emb.32.weight").unwrap_err().to_string();
    assert!(e.contains("emb.32.weight"), "{e}");
}
