//! Hugging Face Hub repos: resolved through the standard cache, downloaded on first use.
//!
//! The cache directory follows `huggingface_hub`'s rules: `$HF_HUB_CACHE`, else
//! `$HF_HOME/hub`, else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE=1` forbids the network.

use std::path::{Path, PathBuf};

pub use chorus_core::checkpoint::hub::looks_like_repo_id;
use chorus_core::checkpoint::hub::{self, cache_dir, cached_snapshot};
use chorus_core::{Error, Result};

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
    let repo = hub::repo(repo_id, LOCAL_HINT)?;
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

/// The checkpoint of `repo_id`'s main revision in the cache.
fn cached(dir: &Path, repo_id: &str) -> Option<HubFiles> {
    let snapshot = cached_snapshot(dir, repo_id)?;
    let weights = super::find_weights(&snapshot).ok()?;
    let config = Some(snapshot.join(HF_CONFIG)).filter(|p| p.is_file());
    Some(HubFiles { weights, config })
}
