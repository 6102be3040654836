//! Local files of a checkpoint spec: explicit comma-separated files, a directory, or a Hugging
//! Face repo id (`sesame/csm-1b`) through chorus-core's hub cache.

use std::path::{Path, PathBuf};

use chorus_core::checkpoint::hub;
use chorus_core::checkpoint::shards::shard_paths;
use chorus_core::{Error, Result};

const OP: &str = "load_csm_model";
/// The weights file of both layouts.
pub const WEIGHTS: &str = "model.safetensors";
/// The index of a sharded HF checkpoint.
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
/// The config (transformers' `CsmConfig` or Sesame's `ModelArgs`).
pub const CONFIG: &str = "config.json";
/// The Llama 3 tokenizer.
pub const TOKENIZER: &str = "tokenizer.json";
/// Sesame's pickled checkpoint, which Chorus does not read.
const PICKLE: &str = "ckpt.pt";
/// Appended to hub errors.
const LOCAL_HINT: &str = "pass local files instead: `--model DIR` (holding model.safetensors or \
    model.safetensors.index.json and its shards, config.json, tokenizer.json) or \
    `--model model.safetensors[,config.json][,tokenizer.json]`";

/// The files of a non-random spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsmFiles {
    /// Weight files (one, or the shards).
    pub weights: Vec<PathBuf>,
    /// The shard index, when the weights came from one.
    pub index: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub tokenizer: Option<PathBuf>,
}

impl CsmFiles {
    /// What was loaded, for logs.
    pub fn describe(&self) -> String {
        match (&self.index, self.weights.as_slice()) {
            (Some(i), _) => format!("{} ({} shards)", i.display(), self.weights.len()),
            (None, [one]) => one.display().to_string(),
            (None, many) => many
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

fn not_found(what: &str, reason: impl Into<String>) -> Error {
    Error::io(
        OP,
        what,
        std::io::Error::new(std::io::ErrorKind::NotFound, reason.into()),
    )
}

/// A spec to local files (see [`crate::load_csm_model`]).
pub fn resolve(spec: &str) -> Result<CsmFiles> {
    let path = Path::new(spec);
    if spec.contains(',') || path.is_file() {
        return explicit(spec);
    }
    if path.is_dir() {
        return from_dir(path);
    }
    if hub::looks_like_repo_id(spec) {
        return from_hub(spec);
    }
    Err(not_found(
        spec,
        "no such file or directory (and not a hub repo id like sesame/csm-1b)",
    ))
}

/// Comma-separated files, each by its name: `*.index.json`, `tokenizer.json`, another `.json`
/// (the config), `*.safetensors` (weights or shards).
fn explicit(spec: &str) -> Result<CsmFiles> {
    let mut f = CsmFiles::default();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(part);
        if !p.is_file() {
            return Err(not_found(part, "no such file"));
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let slot = if name.ends_with(".index.json") {
            &mut f.index
        } else if name == TOKENIZER {
            &mut f.tokenizer
        } else if name.ends_with(".json") {
            &mut f.config
        } else if name.ends_with(".safetensors") {
            f.weights.push(p);
            continue;
        } else if name.ends_with(".pt") || name.ends_with(".bin") {
            return Err(pickle_error(&p));
        } else {
            return Err(Error::input(
                OP,
                format!("{part}: not a .safetensors, index, config or tokenizer file"),
            ));
        };
        if slot.is_some() {
            return Err(Error::input(
                OP,
                format!("{part}: a second {name}-like file"),
            ));
        }
        *slot = Some(p);
    }
    if let Some(index) = &f.index {
        if !f.weights.is_empty() {
            return Err(Error::input(
                OP,
                format!(
                    "give either {} or the shard files, not both",
                    index.display()
                ),
            ));
        }
        f.weights = shard_paths(index)?;
    }
    if f.weights.is_empty() {
        return Err(Error::input(
            OP,
            format!("{spec}: no .safetensors weights among the files"),
        ));
    }
    if f.config.is_none() {
        f.config = beside(&f.weights[0], CONFIG);
    }
    if f.tokenizer.is_none() {
        f.tokenizer = beside(&f.weights[0], TOKENIZER);
    }
    Ok(f)
}

fn pickle_error(p: &Path) -> Error {
    Error::input(
        OP,
        format!(
            "{} is a pickled PyTorch checkpoint, which Chorus does not read: convert it once with \
             `python3 -c \"import torch; from safetensors.torch import save_file; \
             save_file(torch.load('ckpt.pt', map_location='cpu'), 'model.safetensors')\"`",
            p.display()
        ),
    )
}

/// `name` in `file`'s directory, if it exists.
fn beside(file: &Path, name: &str) -> Option<PathBuf> {
    let p = file.parent()?.join(name);
    p.is_file().then_some(p)
}

/// A directory: the index and its shards, else `model.safetensors`; config and tokenizer beside.
fn from_dir(dir: &Path) -> Result<CsmFiles> {
    let at = |n: &str| Some(dir.join(n)).filter(|p| p.is_file());
    let (weights, index) = if let Some(index) = at(WEIGHTS_INDEX) {
        (shard_paths(&index)?, Some(index))
    } else if let Some(w) = at(WEIGHTS) {
        (vec![w], None)
    } else if let Some(p) = at(PICKLE) {
        return Err(pickle_error(&p));
    } else {
        return Err(not_found(
            &dir.display().to_string(),
            format!("no {WEIGHTS} nor {WEIGHTS_INDEX} in this directory"),
        ));
    };
    Ok(CsmFiles {
        weights,
        index,
        config: at(CONFIG),
        tokenizer: at(TOKENIZER),
    })
}

/// A hub repo: config, the index and its shards or `model.safetensors`, the tokenizer; the
/// cache first, then downloads unless `HF_HUB_OFFLINE` is set.
fn from_hub(repo_id: &str) -> Result<CsmFiles> {
    let optional = |name: &str| hub::file(repo_id, name, LOCAL_HINT).ok();
    let (weights, index) = match optional(WEIGHTS_INDEX) {
        Some(index) => {
            let names = shard_paths(&index)?;
            let mut shards = Vec::with_capacity(names.len());
            for p in names {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                shards.push(hub::file(repo_id, &name, LOCAL_HINT)?);
            }
            (shards, Some(index))
        }
        None => (vec![hub::file(repo_id, WEIGHTS, LOCAL_HINT)?], None),
    };
    Ok(CsmFiles {
        weights,
        index,
        config: optional(CONFIG),
        tokenizer: optional(TOKENIZER),
    })
}
