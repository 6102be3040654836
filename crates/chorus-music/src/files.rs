//! Local files of a checkpoint spec: explicit `LM,DEPTH` files, a directory (the bf16 checkpoints,
//! else the int8 ConvRot ones), or a Hugging Face repo id with a subfolder; and their loading.

use std::path::{Path, PathBuf};

use chorus_core::checkpoint::{hub, SafetensorsFile};
use chorus_core::{Error, HostTensor, Result};

use crate::config::{DepthConfig, Qwen3Config, AUDIO_CODE_OFFSET, AUDIO_END_TOKEN, SEMANTIC_VOCAB};
use crate::load::{
    MusicModel, DEPTH_CONFIG, DEPTH_WEIGHTS, DEPTH_WEIGHTS_INT8, LM_CONFIG, LM_WEIGHTS,
    LM_WEIGHTS_INT8, TOKENIZER,
};
use crate::weights::{build_depth, build_lm, parameter_count, LM_HEAD};

const OP: &str = "load_music_model";
/// Appended to hub errors.
const LOCAL_HINT: &str = "pass local files instead: `--model DIR` (holding MiniMaxMusic3-Qwen3_bf16.safetensors and rvq_depth_decoder_bf16.safetensors, or their _int8_convrot versions) or `--model LM.safetensors,DEPTH.safetensors`";

/// Resolved local files of a non-random spec.
#[derive(Clone, Debug)]
pub struct ModelFiles {
    pub lm: PathBuf,
    pub depth: PathBuf,
    pub lm_config: Option<PathBuf>,
    pub depth_config: Option<PathBuf>,
    pub tokenizer: Option<PathBuf>,
}

impl ModelFiles {
    pub(crate) fn describe(&self) -> String {
        format!("{} + {}", self.lm.display(), self.depth.display())
    }

    pub(crate) fn configs(&self) -> Result<(Qwen3Config, DepthConfig)> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| Error::io(OP, p.display().to_string(), e))
        };
        let lm = match &self.lm_config {
            Some(p) => Qwen3Config::from_json(&read(p)?, &p.display().to_string())?,
            None => Qwen3Config::music3(),
        };
        let depth = match &self.depth_config {
            Some(p) => DepthConfig::from_json(&read(p)?, &p.display().to_string())?,
            None => DepthConfig::music3(),
        };
        depth.validate(&lm)?;
        Ok((lm, depth))
    }

    pub(crate) fn load(&self) -> Result<MusicModel> {
        let (lm, depth) = self.configs()?;
        let lm_file = SafetensorsFile::open(&self.lm)?;
        let depth_file = SafetensorsFile::open(&self.depth)?;
        let lm_w = build_lm(&lm, &lm_file, &|_| audio_head_rows(&lm_file))?;
        let depth_w = build_depth(&depth, &lm, &depth_file)?;
        Ok(MusicModel {
            parameter_count: parameter_count(&lm, &depth),
            source: self.describe(),
            lm_config: lm,
            depth_config: depth,
            lm: lm_w,
            depth: depth_w,
            random: false,
            tokenizer: self.tokenizer.clone(),
        })
    }
}

/// The LM head's audio rows read straight from the file (the other rows are never read).
fn audio_head_rows(file: &SafetensorsFile) -> Result<HostTensor> {
    let codes = file.load_rows(
        LM_HEAD,
        Some(AUDIO_CODE_OFFSET..AUDIO_CODE_OFFSET + SEMANTIC_VOCAB),
    )?;
    let end = file.load_rows(LM_HEAD, Some(AUDIO_END_TOKEN..AUDIO_END_TOKEN + 1))?;
    let h = codes.shape[1];
    let mut data = codes.data;
    data.extend(end.data);
    HostTensor::new(vec![SEMANTIC_VOCAB + 1, h], data)
}

/// A spec to local files: explicit `LM,DEPTH`, a directory, or a hub repo id with a subfolder.
pub fn resolve(spec: &str) -> Result<ModelFiles> {
    if let Some((lm, depth)) = spec.split_once(',') {
        let (lm, depth) = (PathBuf::from(lm.trim()), PathBuf::from(depth.trim()));
        for p in [&lm, &depth] {
            if !p.is_file() {
                return Err(not_found(&p.display().to_string(), "no such file"));
            }
        }
        return Ok(ModelFiles {
            lm_config: beside(&lm, &[LM_CONFIG, "config.json"]),
            depth_config: beside(&depth, &[DEPTH_CONFIG]),
            tokenizer: beside(&lm, &[TOKENIZER]),
            lm,
            depth,
        });
    }
    let path = Path::new(spec);
    if path.is_dir() {
        return from_dir(path);
    }
    if path.exists() {
        return Err(Error::input(
            OP,
            format!("{spec} is one file; the stage needs two: pass `LM.safetensors,DEPTH.safetensors` or a directory"),
        ));
    }
    let mut parts = spec.splitn(3, '/');
    if let (Some(owner), Some(name)) = (parts.next(), parts.next()) {
        let repo_id = format!("{owner}/{name}");
        if hub::looks_like_repo_id(&repo_id) {
            return from_hub(&repo_id, parts.next().unwrap_or(""));
        }
    }
    Err(not_found(
        spec,
        "no such file or directory (and not a hub repo id like owner/name/subfolder)",
    ))
}

fn not_found(what: &str, reason: &str) -> Error {
    Error::io(
        OP,
        what,
        std::io::Error::new(std::io::ErrorKind::NotFound, reason.to_string()),
    )
}

/// The first of `names` that exists in `file`'s directory.
fn beside(file: &Path, names: &[&str]) -> Option<PathBuf> {
    let dir = file.parent()?;
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// A directory holding both checkpoints (directly or one subfolder down, as the upstream folders
/// `MiniMaxMusic3-Qwen3/` and `MiniMax-Music3/` are laid out); each model's bf16 file when present,
/// else its int8 ConvRot file.
fn from_dir(dir: &Path) -> Result<ModelFiles> {
    let find = |name: &str| -> Option<PathBuf> {
        let direct = dir.join(name);
        if direct.is_file() {
            return Some(direct);
        }
        let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        subs.sort();
        subs.into_iter().map(|s| s.join(name)).find(|p| p.is_file())
    };
    let missing = |name: &str| {
        Error::io(
            OP,
            dir.display().to_string(),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no {name} (nor its _int8_convrot version) in this directory or its subfolders"
                ),
            ),
        )
    };
    let lm = find(LM_WEIGHTS)
        .or_else(|| find(LM_WEIGHTS_INT8))
        .ok_or_else(|| missing(LM_WEIGHTS))?;
    let depth = find(DEPTH_WEIGHTS)
        .or_else(|| find(DEPTH_WEIGHTS_INT8))
        .ok_or_else(|| missing(DEPTH_WEIGHTS))?;
    Ok(ModelFiles {
        lm_config: beside(&lm, &[LM_CONFIG, "config.json"]).or_else(|| find(LM_CONFIG)),
        depth_config: beside(&depth, &[DEPTH_CONFIG]).or_else(|| find(DEPTH_CONFIG)),
        tokenizer: beside(&lm, &[TOKENIZER]).or_else(|| find(TOKENIZER)),
        lm,
        depth,
    })
}

/// `repo_id` with `sub` (may be empty): the four files under the subfolder; configs and the
/// tokenizer are optional.
fn from_hub(repo_id: &str, sub: &str) -> Result<ModelFiles> {
    let at = |name: &str| {
        if sub.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", sub.trim_end_matches('/'))
        }
    };
    let optional = |name: &str| hub::file(repo_id, &at(name), LOCAL_HINT).ok();
    Ok(ModelFiles {
        lm: hub::file(repo_id, &at(LM_WEIGHTS), LOCAL_HINT)?,
        depth: hub::file(repo_id, &at(DEPTH_WEIGHTS), LOCAL_HINT)?,
        lm_config: optional(LM_CONFIG),
        depth_config: optional(DEPTH_CONFIG),
        tokenizer: optional(TOKENIZER),
    })
}
