//! Hub resolution without network: an empty cache in offline mode is a fetch error with a hint.
//! (Its own test binary: it sets process-wide environment variables.)

use chorus_core::Error;
use chorus_mimi::checkpoint::load_model;

#[test]
fn offline_with_an_empty_cache_is_a_fetch_error_with_a_local_path_hint() {
    let cache = std::env::temp_dir().join(format!("chorus-empty-hub-{}", std::process::id()));
    std::fs::create_dir_all(&cache).unwrap();
    std::env::set_var("HF_HUB_CACHE", &cache);
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let err = load_model("kyutai/mimi").unwrap_err();
    match &err {
        Error::Fetch { model, reason, .. } => {
            assert_eq!(model, "kyutai/mimi");
            assert!(reason.contains("HF_HUB_OFFLINE"), "{reason}");
            assert!(
                reason.contains("--model /path/to/model.safetensors"),
                "{reason}"
            );
            assert!(reason.contains(cache.to_str().unwrap()), "{reason}");
        }
        other => panic!("expected a fetch error, got {other}"),
    }
}
