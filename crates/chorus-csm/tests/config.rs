//! Config parsing: transformers' CsmConfig json (both rope spellings), Sesame's config.json (flat
//! and under `args`), and a named error for every malformed or missing field.

use chorus_csm::weights::{parameter_count, tensor_specs};
use chorus_csm::CsmConfig;
use serde_json::{json, Value};

/// transformers' CsmConfig of csm-1b as `to_json_string` writes it (5.x: `rope_parameters`).
fn hf_json() -> Value {
    let rope = |low: f64, high: f64, old: u32| {
        json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
               "low_freq_factor": low, "high_freq_factor": high,
               "original_max_position_embeddings": old})
    };
    json!({
        "model_type": "csm", "num_codebooks": 32, "vocab_size": 2051, "text_vocab_size": 128256,
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "silu",
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "pad_token_id": 128002,
        "codebook_pad_token_id": 2050, "codebook_eos_token_id": 0, "bos_token_id": 128000,
        "eos_token_id": null, "audio_token_id": 128002, "audio_eos_token_id": 128003,
        "attention_bias": false, "mlp_bias": false, "tie_codebooks_embeddings": true,
        "rope_parameters": rope(0.125, 0.5, 1024),
        "depth_decoder_config": {
            "model_type": "csm_depth_decoder_model", "num_codebooks": 32,
            "backbone_hidden_size": 2048, "vocab_size": 2051, "hidden_size": 1024,
            "intermediate_size": 8192, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 128, "hidden_act": "silu",
            "max_position_embeddings": 33, "rms_norm_eps": 1e-5,
            "rope_parameters": rope(0.001953125, 0.0078125, 16)
        },
        "codec_config": {"model_type": "mimi"}
    })
}

fn parse(v: &Value) -> chorus_csm::Result<CsmConfig> {
    CsmConfig::from_hf_json(&v.to_string(), "config.json")
}

fn err(v: &Value) -> String {
    parse(v)
        .expect_err("the config must be refused")
        .to_string()
}

#[test]
fn csm_1b_has_the_brief_numbers() {
    let c = CsmConfig::csm_1b();
    c.validate().unwrap();
    assert_eq!(parameter_count(&c), 1_552_791_552, "CSM.md §2.1");
    assert_eq!(
        tensor_specs(&c).len(),
        187,
        "Sesame's 187 keys, the tied table once"
    );
    assert_eq!(c.audio_rows(), 65_632);
    assert_eq!((c.backbone.q_width(), c.backbone.kv_width()), (2048, 512));
    assert_eq!((c.depth.q_width(), c.depth.kv_width()), (1024, 256));
    CsmConfig::random_small().validate().unwrap();
}

#[test]
fn transformers_json_parses_to_csm_1b() {
    assert_eq!(parse(&hf_json()).unwrap(), CsmConfig::csm_1b());
}

#[test]
fn transformers_4_rope_scaling_spelling_parses_the_same() {
    let mut v = hf_json();
    let to_old = |o: &mut Value| {
        let mut p = o["rope_parameters"].take();
        let theta = p["rope_theta"].take();
        p.as_object_mut().unwrap().remove("rope_theta");
        o.as_object_mut().unwrap().remove("rope_parameters");
        o["rope_theta"] = theta;
        o["rope_scaling"] = p;
    };
    to_old(&mut v);
    to_old(&mut v["depth_decoder_config"]);
    // Defaults transformers fills in when a field is null or absent.
    v["depth_decoder_config"]["head_dim"] = Value::Null;
    v.as_object_mut().unwrap().remove("head_dim");
    assert_eq!(parse(&v).unwrap(), CsmConfig::csm_1b());
}

#[test]
fn sesame_json_flat_and_under_args_parses_to_csm_1b() {
    let args = json!({"audio_num_codebooks": 32, "audio_vocab_size": 2051,
                      "backbone_flavor": "llama-1B", "decoder_flavor": "llama-100M",
                      "text_vocab_size": 128256});
    assert_eq!(parse(&args).unwrap(), CsmConfig::csm_1b());
    assert_eq!(
        parse(&json!({ "args": args })).unwrap(),
        CsmConfig::csm_1b()
    );
    let mut bad = args.clone();
    bad["decoder_flavor"] = json!("llama-8B");
    let e = err(&bad);
    assert!(
        e.contains("decoder_flavor") && e.contains("llama-8B"),
        "{e}"
    );
    bad = args.clone();
    bad.as_object_mut().unwrap().remove("audio_vocab_size");
    assert!(err(&bad).contains("field `audio_vocab_size` is missing"));
}

#[test]
fn missing_and_mistyped_fields_are_named_with_their_path() {
    let mut v = hf_json();
    v["depth_decoder_config"]
        .as_object_mut()
        .unwrap()
        .remove("intermediate_size");
    let e = err(&v);
    assert!(
        e.contains("depth_decoder_config.intermediate_size") && e.contains("missing"),
        "{e}"
    );

    let mut v = hf_json();
    v["hidden_size"] = json!("2048");
    let e = err(&v);
    assert!(
        e.contains("`hidden_size`") && e.contains("not a non-negative integer"),
        "{e}"
    );

    let mut v = hf_json();
    v["rms_norm_eps"] = json!([1]);
    assert!(err(&v).contains("`rms_norm_eps`"));

    let mut v = hf_json();
    v["rope_parameters"]
        .as_object_mut()
        .unwrap()
        .remove("factor");
    assert!(err(&v).contains("rope_parameters.factor"));

    let mut v = hf_json();
    v["rope_parameters"]["rope_type"] = json!("yarn");
    assert!(err(&v).contains("rope_type `yarn` is not supported"));

    let mut v = hf_json();
    v["depth_decoder_config"]["num_codebooks"] = json!(16);
    assert!(err(&v).contains("num_codebooks 16 differs"));

    assert!(err(&json!({"hello": 1})).contains("neither a transformers CsmConfig"));
    let e = CsmConfig::from_hf_json("{not json", "cfg.json")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cfg.json") && e.contains("not valid JSON"),
        "{e}"
    );
}

/// (what, edit of the csm-1b json, expected error text).
type Case = (&'static str, fn(&mut Value), &'static str);

#[test]
fn inconsistent_shapes_and_ids_are_refused() {
    let cases: [Case; 6] = [
        (
            "gqa",
            |v| v["num_key_value_heads"] = json!(5),
            "not a multiple of num_key_value_heads",
        ),
        (
            "head_dim",
            |v| v["head_dim"] = json!(32),
            "differs from hidden_size",
        ),
        (
            "codebooks",
            |v| {
                v["num_codebooks"] = json!(1);
                v["depth_decoder_config"]["num_codebooks"] = json!(1);
            },
            "num_codebooks 1",
        ),
        (
            "depth positions",
            |v| v["depth_decoder_config"]["max_position_embeddings"] = json!(8),
            "max_position_embeddings 8 < num_codebooks 32",
        ),
        (
            "pad",
            |v| v["codebook_pad_token_id"] = json!(4000),
            "codebook_pad_token_id 4000",
        ),
        (
            "bos",
            |v| v["bos_token_id"] = json!(200000),
            "bos_token_id 200000",
        ),
    ];
    for (what, edit, expected) in cases {
        let mut v = hf_json();
        edit(&mut v);
        let e = err(&v);
        assert!(e.contains(expected), "{what}: {e}");
    }
}
