//! One checkpoint stored as several safetensors files (shared by every model family that loads HF
//! checkpoints) (HF's sharded `model.safetensors.index.json`
//! layout, or explicit files), seen as one [`TensorSource`] over chorus-core's reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::checkpoint::safetensors::SUPPORTED_DTYPES;
use crate::checkpoint::{SafetensorsFile, TensorSource};
use crate::{Error, HostTensor, Result};

const OP: &str = "sharded checkpoint";

/// Shards by tensor name; every name lives in exactly one file.
pub struct ShardedSource {
    files: Vec<SafetensorsFile>,
    by_name: BTreeMap<String, usize>,
    name: String,
}

impl ShardedSource {
    /// Opens `paths` (each header validated) and indexes their tensors; a name in two files is
    /// an error.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut by_name = BTreeMap::new();
        for (i, p) in paths.iter().enumerate() {
            let f = SafetensorsFile::open(p)?;
            for n in f.names() {
                if let Some(&j) = by_name.get(&n) {
                    let other: &SafetensorsFile = &files[j];
                    return Err(Error::Format {
                        op: OP,
                        path: p.display().to_string(),
                        reason: format!(
                            "tensor `{n}` is also in {} (one checkpoint, two copies?)",
                            other.path().display()
                        ),
                    });
                }
                by_name.insert(n, i);
            }
            files.push(f);
        }
        let name = match paths {
            [one] => one.display().to_string(),
            _ => format!(
                "{} shards in {}",
                paths.len(),
                paths
                    .first()
                    .and_then(|p| p.parent())
                    .map_or_else(String::new, |d| d.display().to_string())
            ),
        };
        Ok(Self {
            files,
            by_name,
            name,
        })
    }

    /// Opens the shards an index json names (`weight_map`: tensor -> file, relative to the
    /// index) and checks that every tensor sits where the index says.
    pub fn from_index(index: &Path) -> Result<Self> {
        let (map, shown) = read_index(index)?;
        let dir = index.parent().unwrap_or_else(|| Path::new("."));
        let src = Self::open(&shard_files(&map, dir))?;
        for (tensor, file) in &map {
            let at = src.by_name.get(tensor).map(|&i| src.files[i].path());
            if at != Some(dir.join(file).as_path()) {
                return Err(Error::Format {
                    op: OP,
                    path: shown,
                    reason: format!(
                        "the index puts `{tensor}` in {file}, but {}",
                        match at {
                            Some(p) => format!("it is in {}", p.display()),
                            None => "no shard holds it".into(),
                        }
                    ),
                });
            }
        }
        Ok(src)
    }

    /// Refuses any of `names` stored in a dtype that does not load as f32, before any data is read.
    pub fn check_dtypes<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> Result<()> {
        for n in names {
            if let Some(&i) = self.by_name.get(n) {
                let d = self.files[i].dtype_name(n).unwrap_or_default();
                if !matches!(d, "F32" | "F16" | "BF16") {
                    return Err(Error::Dtype {
                        op: OP,
                        name: n.into(),
                        expected: SUPPORTED_DTYPES.into(),
                        found: d.into(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// `weight_map` of an index json.
/// The shard files an index json names, once each in name order, beside the index (their
/// existence is checked when they are opened).
pub fn shard_paths(index: &Path) -> Result<Vec<PathBuf>> {
    let (map, _) = read_index(index)?;
    Ok(shard_files(
        &map,
        index.parent().unwrap_or_else(|| Path::new(".")),
    ))
}

/// An index's `weight_map` (tensor -> shard file) and the index's name as errors show it.
fn read_index(index: &Path) -> Result<(BTreeMap<String, String>, String)> {
    let shown = index.display().to_string();
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(OP, &shown, e))?;
    Ok((parse_index(&text, &shown)?, shown))
}

/// The distinct shard files of a `weight_map`, in name order, in `dir`.
fn shard_files(map: &BTreeMap<String, String>, dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<&String> = map.values().collect();
    names.sort();
    names.dedup();
    names.iter().map(|s| dir.join(s)).collect()
}

fn parse_index(text: &str, shown: &str) -> Result<BTreeMap<String, String>> {
    let bad = |reason: String| Error::Format {
        op: OP,
        path: shown.into(),
        reason,
    };
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    map.iter()
        .map(|(k, f)| {
            let f = f
                .as_str()
                .filter(|f| !f.contains("..") && !Path::new(f).is_absolute())
                .ok_or_else(|| bad(format!("`weight_map.{k}` is {f}, not a shard file name")))?;
            Ok((k.clone(), f.to_string()))
        })
        .collect()
}

impl TensorSource for ShardedSource {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.files[*self.by_name.get(name)?].shape(name)
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        match self.by_name.get(name) {
            Some(&i) => self.files[i].load(name),
            None => Err(Error::MissingTensor {
                op: OP,
                name: name.into(),
                source_name: self.name.clone(),
            }),
        }
    }
}
