//! Local files of a checkpoint spec: explicit comma-separated files, a directory, or a Hugging
//! Face repo id (`kyutai/stt-1b-en_fr`) through chorus-core's hub cache.

use std::path::{Path, PathBuf};

use chorus_core::checkpoint::hub;
use chorus_core::checkpoint::shards::shard_paths;
use chorus_core::{Error, Result};

const OP: &str = "load_stt_model";
/// The LM weights of both layouts.
pub const WEIGHTS: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
/// The config (transformers' or Kyutai's).
pub const CONFIG: &str = "config.json";
/// The SentencePiece model when the config names none.
pub const TOKENIZER: &str = "tokenizer.model";
/// The config field of Kyutai's repos that names the SentencePiece file.
const TOKENIZER_FIELD: &str = "tokenizer_name";
/// Kyutai repos keep the Mimi codec beside the LM under this prefix: never an LM shard.
const MIMI_PREFIX: &str = "mimi";
const LOCAL_HINT: &str = "pass local files instead: `--model DIR` (holding model.safetensors, \
    config.json and the tokenizer's .model file) or `--model model.safetensors,config.json,\
    tokenizer.model`";

/// The files of a non-random spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SttFiles {
    /// Weight files (one, or the shards).
    pub weights: Vec<PathBuf>,
    pub index: Option<PathBuf>,
    pub config: Option<PathBuf>,
    /// The SentencePiece `.model`.
    pub tokenizer: Option<PathBuf>,
}

impl SttFiles {
    /// What was loaded, for logs.
    pub fn describe(&self) -> String {
        match (&self.index, self.weights.as_slice()) {
            (Some(i), _) => format!("{} ({} shards)", i.display(), self.weights.len()),
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

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A spec to local files (see [`crate::load_stt_model`]).
pub fn resolve(spec: &str) -> Result<SttFiles> {
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
        "no such file or directory (and not a hub repo id like kyutai/stt-1b-en_fr)",
    ))
}

/// Comma-separated files, each by its name: `*.index.json`, another `.json` (the config),
/// `*.model` (the tokenizer), `*.safetensors` (weights or shards; a `mimi*` file is the codec and
/// is refused here).
fn explicit(spec: &str) -> Result<SttFiles> {
    let mut f = SttFiles::default();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(part);
        if !p.is_file() {
            return Err(not_found(part, "no such file"));
        }
        let name = file_name(&p);
        let slot = if name.ends_with(".index.json") {
            &mut f.index
        } else if name.ends_with(".json") {
            &mut f.config
        } else if name.ends_with(".model") {
            &mut f.tokenizer
        } else if name.ends_with(".safetensors") && !name.starts_with(MIMI_PREFIX) {
            f.weights.push(p);
            continue;
        } else {
            return Err(Error::input(
                OP,
                format!(
                    "{part}: not the LM's .safetensors, an index, a config or a SentencePiece \
                     .model file"
                ),
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
    let dir = f.weights[0].parent().map(Path::to_path_buf);
    if f.config.is_none() {
        f.config = dir.as_deref().and_then(|d| at(d, CONFIG));
    }
    if f.tokenizer.is_none() {
        f.tokenizer = dir
            .as_deref()
            .and_then(|d| tokenizer_in(d, f.config.as_deref()));
    }
    Ok(f)
}

fn at(dir: &Path, name: &str) -> Option<PathBuf> {
    Some(dir.join(name)).filter(|p| p.is_file())
}

/// The tokenizer file a config names (`tokenizer_name`), if readable.
fn named_tokenizer(config: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get(TOKENIZER_FIELD)?.as_str().map(str::to_string)
}

/// The SentencePiece model in `dir`: the one the config names, else `tokenizer.model`, else the
/// only `.model` file there.
fn tokenizer_in(dir: &Path, config: Option<&Path>) -> Option<PathBuf> {
    if let Some(named) = config.and_then(named_tokenizer) {
        if let Some(p) = at(dir, &named) {
            return Some(p);
        }
    }
    if let Some(p) = at(dir, TOKENIZER) {
        return Some(p);
    }
    let models: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && file_name(p).ends_with(".model"))
        .collect();
    match models.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// A directory: the index and its shards, else `model.safetensors`; config and tokenizer beside.
fn from_dir(dir: &Path) -> Result<SttFiles> {
    let (weights, index) = if let Some(index) = at(dir, WEIGHTS_INDEX) {
        (shard_paths(&index)?, Some(index))
    } else if let Some(w) = at(dir, WEIGHTS) {
        (vec![w], None)
    } else {
        return Err(not_found(
            &dir.display().to_string(),
            format!("no {WEIGHTS} nor {WEIGHTS_INDEX} in this directory"),
        ));
    };
    let config = at(dir, CONFIG);
    Ok(SttFiles {
        weights,
        index,
        tokenizer: tokenizer_in(dir, config.as_deref()),
        config,
    })
}

/// A hub repo: config, the weights (or the index and its shards), the tokenizer the config
/// names; the cache first, then downloads unless `HF_HUB_OFFLINE` is set.
fn from_hub(repo_id: &str) -> Result<SttFiles> {
    let optional = |name: &str| hub::file(repo_id, name, LOCAL_HINT).ok();
    let config = optional(CONFIG);
    let (weights, index) = match optional(WEIGHTS_INDEX) {
        Some(index) => {
            let mut shards = Vec::new();
            for p in shard_paths(&index)? {
                shards.push(hub::file(repo_id, &file_name(&p), LOCAL_HINT)?);
            }
            (shards, Some(index))
        }
        None => (vec![hub::file(repo_id, WEIGHTS, LOCAL_HINT)?], None),
    };
    let tok_name = config
        .as_deref()
        .and_then(named_tokenizer)
        .unwrap_or_else(|| TOKENIZER.to_string());
    Ok(SttFiles {
        weights,
        index,
        config,
        tokenizer: optional(&tok_name),
    })
}
