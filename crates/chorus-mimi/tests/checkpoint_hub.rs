//! Hub resolution without network, through the standard cache layout. One test, because it sets
//! process-wide environment variables (and this file is its own test binary).

use chorus_core::Error;
use chorus_mimi::checkpoint::{load_model, write_safetensors, Dtype, Layout};
use chorus_mimi::random::random_tensors;
use chorus_mimi::MimiConfig;

const REPO: &str = "kyutai/mimi";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn small() -> MimiConfig {
    MimiConfig {
        hidden_size: 64,
        num_filters: 8,
        codebook_size: 16,
        codebook_dim: 8,
        num_quantizers: 4,
        upsample_groups: 64,
        num_hidden_layers: 1,
        intermediate_size: 128,
        num_attention_heads: 4,
        num_key_value_heads: 4,
        ..MimiConfig::default()
    }
}

const SMALL_JSON: &str = r#"{"hidden_size": 64, "num_filters": 8, "codebook_size": 16,
    "codebook_dim": 8, "num_quantizers": 4, "upsample_groups": 64, "num_hidden_layers": 1,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4}"#;

#[test]
fn offline_resolution_uses_the_cache_or_explains_how_to_pass_a_path() {
    let cache_tmp = tempfile::Builder::new()
        .prefix("chorus-hub-")
        .tempdir()
        .unwrap();
    let cache = cache_tmp.path();
    std::env::set_var("HF_HUB_CACHE", cache);
    std::env::set_var("HF_HUB_OFFLINE", "1");

    // Empty cache, no network allowed: a fetch error that says how to pass a local file.
    let err = load_model(REPO).unwrap_err();
    match &err {
        Error::Fetch { model, reason, .. } => {
            assert_eq!(model, REPO);
            assert!(reason.contains("HF_HUB_OFFLINE"), "{reason}");
            assert!(
                reason.contains("--model /path/to/model.safetensors"),
                "{reason}"
            );
            assert!(reason.contains(cache.to_str().unwrap()), "{reason}");
        }
        other => panic!("expected a fetch error, got {other}"),
    }

    // The layout huggingface_hub writes: refs/main names a snapshot holding the files.
    let repo_dir = cache.join("models--kyutai--mimi");
    let snapshot = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs").join("main"), COMMIT).unwrap();
    let c = small();
    let tensors = random_tensors(&c, 3, Layout::HuggingFace);
    write_safetensors(&snapshot.join("model.safetensors"), &tensors, Dtype::F32).unwrap();
    std::fs::write(snapshot.join("config.json"), SMALL_JSON).unwrap();
    let m = load_model(REPO).unwrap();
    assert_eq!(m.layout, Layout::HuggingFace);
    assert_eq!(m.config, c);
    assert!(
        m.source.starts_with(REPO) && m.source.contains(COMMIT),
        "{}",
        m.source
    );

    // A Kyutai repo: its snapshot holds a `tokenizer-*.safetensors` in the original layout.
    let repo_dir = cache.join("models--kyutai--moshiko-pytorch-bf16");
    let snapshot = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs").join("main"), format!("{COMMIT}\n")).unwrap();
    let file = snapshot.join("tokenizer-e351c8d8-checkpoint125.safetensors");
    write_safetensors(&file, &random_tensors(&c, 3, Layout::Kyutai), Dtype::BF16).unwrap();
    std::fs::write(snapshot.join("config.json"), SMALL_JSON).unwrap();
    let m = load_model("kyutai/moshiko-pytorch-bf16").unwrap();
    assert_eq!(m.layout, Layout::Kyutai);
    assert!(m.source.contains("tokenizer-e351c8d8"), "{}", m.source);
}
