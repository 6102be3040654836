//! Hugging Face Hub files, resolved through the standard cache and downloaded on first use.
//!
//! The cache directory follows `huggingface_hub`'s rules: `$HF_HUB_CACHE`, else
//! `$HF_HOME/hub`, else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE=1` forbids the network.

use std::path::{Path, PathBuf};

use crate::{Error, Result};
use hf_hub::api::sync::{ApiBuilder, ApiRepo};

const OP: &str = "hub";

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

/// The snapshot directory of `repo_id`'s main revision in the cache (`huggingface_hub`'s layout:
/// `models--{owner}--{name}/refs/main` names a directory under `snapshots/`), if present.
pub fn cached_snapshot(dir: &Path, repo_id: &str) -> Option<PathBuf> {
    let repo_dir = dir.join(format!("models--{}", repo_id.replace('/', "--")));
    let commit = std::fs::read_to_string(repo_dir.join("refs").join("main")).ok()?;
    let snapshot = repo_dir.join("snapshots").join(commit.trim());
    snapshot.is_dir().then_some(snapshot)
}

/// A repo handle for downloads; `hint` (how to avoid the network) ends every error.
pub fn repo(repo_id: &str, hint: &str) -> Result<ApiRepo> {
    let dir = cache_dir();
    let fetch_err = |reason: String| Error::Fetch {
        op: OP,
        model: repo_id.into(),
        reason: format!("{reason}; {hint}"),
    };
    if offline() {
        return Err(fetch_err(format!(
            "HF_HUB_OFFLINE is set and the files needed are not in the cache at {}",
            dir.display()
        )));
    }
    // from_env picks up HF_ENDPOINT and the saved token; the cache dir follows our rules.
    let api = ApiBuilder::from_env()
        .with_cache_dir(dir)
        .with_progress(true)
        .build()
        .map_err(|e| fetch_err(format!("cannot start the hub client: {e}")))?;
    Ok(api.model(repo_id.to_string()))
}

/// One file of `repo_id` (`path` inside the repo, subfolders allowed): the cache first, then a
/// download unless offline.
pub fn file(repo_id: &str, path: &str, hint: &str) -> Result<PathBuf> {
    let dir = cache_dir();
    if let Some(p) = cached_snapshot(&dir, repo_id)
        .map(|s| s.join(path))
        .filter(|p| p.is_file())
    {
        return Ok(p);
    }
    repo(repo_id, hint)?.get(path).map_err(|e| Error::Fetch {
        op: OP,
        model: repo_id.into(),
        reason: format!(
            "downloading {path} into {} failed (no network?): {e}; {hint}",
            dir.display()
        ),
    })
}
