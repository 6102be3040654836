//! Configs: both released models from both layouts' json, the parameter counts, and a named
//! error for every bad field.

mod common;

use chorus_stt::weights::parameter_count;
use chorus_stt::SttConfig;
use common::{hf_json, kyutai_json};
use serde_json::Value;

fn parse(v: &Value) -> chorus_stt::Result<SttConfig> {
    SttConfig::from_json(&v.to_string(), "config.json")
}

fn err(v: &Value) -> String {
    parse(v).unwrap_err().to_string()
}

#[test]
fn both_released_models_parse_from_both_layouts() {
    for c in [
        SttConfig::stt_2b6_en(),
        SttConfig::stt_1b_en_fr(),
        SttConfig::random_small(),
    ] {
        assert_eq!(parse(&kyutai_json(&c)).unwrap(), c);
        // transformers' config has no VAD heads and keeps the delay in its processor.
        let hf = parse(&hf_json(&c)).unwrap();
        assert_eq!(
            hf,
            SttConfig {
                extra_heads: 0,
                ..c.clone()
            },
            "{c:?}"
        );
    }
}

#[test]
fn parameter_counts_are_the_briefs() {
    assert_eq!(parameter_count(&SttConfig::stt_2b6_en()), 2_617_118_720);
    // 49 152 of them the four VAD heads.
    assert_eq!(parameter_count(&SttConfig::stt_1b_en_fr()), 989_253_632);
}

#[test]
fn kyutai_ffn_width_follows_hidden_scale() {
    // stt-2.6b-en: hidden_scale 4.125 -> dim_feedforward 8448 -> 5632.
    let mut v = kyutai_json(&SttConfig::stt_2b6_en());
    v["hidden_scale"] = 4.125.into();
    assert_eq!(parse(&v).unwrap().ffn_hidden, 5632);
    v.as_object_mut().unwrap().remove("hidden_scale");
    v["dim_feedforward"] = 8448.into();
    assert_eq!(parse(&v).unwrap().ffn_hidden, 5632);
}

#[test]
fn transformers_bos_48000_becomes_the_initial_row_and_theta_defaults_to_kyutais() {
    let mut v = hf_json(&SttConfig::stt_2b6_en());
    v.as_object_mut().unwrap().remove("rope_parameters");
    let c = parse(&v).unwrap();
    assert_eq!(c.ids.initial_text, 4000);
    assert_eq!(c.rope_theta, 100_000.0);
}

#[test]
fn every_bad_config_gets_a_named_error() {
    let k = kyutai_json(&SttConfig::stt_1b_en_fr());
    let h = hf_json(&SttConfig::stt_1b_en_fr());
    let with = |base: &Value, field: &str, value: Value| {
        let mut v = base.clone();
        v[field] = value;
        v
    };
    let cases: Vec<(Value, &str)> = vec![
        (with(&k, "dep_q", 8.into()), "dep_q 8"),
        (with(&k, "gating", "gelu".into()), "gating `gelu`"),
        (with(&k, "norm", "layer_norm".into()), "norm `layer_norm`"),
        (
            with(&k, "delays", serde_json::json!([0, 1])),
            "per-codebook delays",
        ),
        (with(&k, "num_heads", 3.into()), "differs from hidden_size"),
        (
            with(&k, "context", 0.into()),
            "sliding_window must be positive",
        ),
        (with(&k, "dim", "wide".into()), "field `dim` is \"wide\""),
        (
            with(&h, "model_type", "llama".into()),
            "model_type is `llama`",
        ),
        (
            with(&h, "ffn_dim", 11263.into()),
            "ffn_dim 11263 must be even",
        ),
        (
            with(&h, "audio_pad_token_id", 5.into()),
            "audio_pad_token_id 5 is not the zero row 73569",
        ),
        (with(&h, "hidden_act", "gelu".into()), "hidden_act `gelu`"),
        (
            with(&h, "rms_norm_eps", 0.into()),
            "rms_norm_eps 0 must be positive",
        ),
        (
            serde_json::json!({"hidden_size": 4}),
            "neither a transformers",
        ),
    ];
    for (v, want) in cases {
        let e = err(&v);
        assert!(e.contains(want), "expected `{want}` in: {e}");
    }
    let e = SttConfig::from_json("{", "cfg.json")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cfg.json") && e.contains("not valid JSON"),
        "{e}"
    );
    let mut v = h.clone();
    v.as_object_mut().unwrap().remove("sliding_window");
    v.as_object_mut().unwrap().remove("codebook_vocab_size");
    assert!(err(&v).contains("neither"));
}
