//! Hugging Face Hub repos: resolved through the standard cache, downloaded on first use.
//!
//! The cache directory follows `huggingface_hub`'s rules: `$HF_HUB_CACHE`, else
//! `$HF_HOME/hub`, else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE=1` forbids the network.

use std::path::{Path, PathBuf};

use chorus_core::{Error, Result};
use hf_hub::api::sync::ApiBuilder;

const OP: &str = "hub";
/// The weights file of an HF-layout repo.
pub const HF_WEIGHTS: &str = "model.safetensors";
/// The config file of an HF-layout repo.
pub const HF_CONFIG: &str = "config.json";
/// How to avoid the network, appended to every fetch error.
pub const LOCAL_HINT: &str =
    "pass a local checkpoint instead, e.g. `--model /path/to/model.safetensors` (or a directory holding it and its config.json)";

/// Files resolved for a repo.
#[derive(Clone, Debug)]
pub struct HubFiles {
    pub weights: PathBuf,
    pub config: Option<PathBuf>,
}

/// The hub cache directory from the environment.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(home) = std::env::var_os("HF_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join("hub");
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home)
        .join(".cache")
        .join("huggingface")
        .join("hub")
}

/// True when `HF_HUB_OFFLINE` is set to a true value (`1`, `true`, `yes`, `on`).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// True when `spec` has the shape of a repo id (`owner/name`).
pub fn looks_like_repo_id(spec: &str) -> bool {
    let mut parts = spec.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// Resolves `repo_id` to local files: the cache first, then a download unless offline.
/// An HF-layout repo provides `model.safetensors`; a Kyutai repo a `tokenizer-*.safetensors`.
pub fn resolve(repo_id: &str) -> Result<HubFiles> {
    let dir = cache_dir();
    let fetch_err = |reason: String| Error::Fetch {
        op: OP,
        model: repo_id.into(),
        reason: format!("{reason}; {LOCAL_HINT}"),
    };
    if let Some(files) = cached(&dir, repo_id) {
        return Ok(files);
    }
    if offline() {
        return Err(fetch_err(format!(
            "HF_HUB_OFFLINE is set and no checkpoint of it is in the cache at {}",
            dir.display()
        )));
    }
    // from_env picks up HF_ENDPOINT and the saved token; the cache dir follows our rules.
    let api = ApiBuilder::from_env()
        .with_cache_dir(dir.clone())
        .with_progress(true)
        .build()
        .map_err(|e| fetch_err(format!("cannot start the hub client: {e}")))?;
    let repo = api.model(repo_id.to_string());
    let weights = match repo.get(HF_WEIGHTS) {
        Ok(path) => path,
        Err(first) => {
            // No model.safetensors: a Kyutai repo names its codec `tokenizer-*.safetensors`.
            let tokenizer = repo.info().ok().and_then(|info| {
                let mut names = info
                    .siblings
                    .into_iter()
                    .map(|s| s.rfilename)
                    .filter(|n| n.starts_with(TOKENIZER_PREFIX) && n.ends_with(".safetensors"));
                match (names.next(), names.next()) {
                    (Some(one), None) => Some(one),
                    _ => None,
                }
            });
            let Some(name) = tokenizer else {
                return Err(fetch_err(format!(
                    "downloading {HF_WEIGHTS} into {} failed (no network?): {first}",
                    dir.display()
                )));
            };
            repo.get(&name).map_err(|e| {
                fetch_err(format!(
                    "downloading {name} into {} failed: {e}",
                    dir.display()
                ))
            })?
        }
    };
    // A repo without config.json is still usable with the default configuration.
    let config = repo.get(HF_CONFIG).ok();
    Ok(HubFiles { weights, config })
}

/// Prefix of the codec checkpoint in Kyutai's repos.
const TOKENIZER_PREFIX: &str = "tokenizer-";

/// The checkpoint of `repo_id`'s main revision in the cache (`huggingface_hub`'s layout:
/// `models--{owner}--{name}/refs/main` names a directory under `snapshots/`).
fn cached(dir: &Path, repo_id: &str) -> Option<HubFiles> {
    let repo_dir = dir.join(format!("models--{}", repo_id.replace('/', "--")));
    let commit = std::fs::read_to_string(repo_dir.join("refs").join("main")).ok()?;
    let snapshot = repo_dir.join("snapshots").join(commit.trim());
    let weights = super::find_weights(&snapshot).ok()?;
    let config = Some(snapshot.join(HF_CONFIG)).filter(|p| p.is_file());
    Some(HubFiles { weights, config })
}
