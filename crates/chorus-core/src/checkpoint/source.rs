//! Named tensor sources: a safetensors file, tensors in memory, or a renaming view over either.

use std::collections::HashMap;

use crate::{Error, HostTensor, Result};

/// Where checkpoint tensors come from, by name; loading converts to f32.
pub trait TensorSource {
    /// Names the source in errors (a path, or a description).
    fn source_name(&self) -> &str;
    /// Every tensor name, sorted.
    fn names(&self) -> Vec<String>;
    /// The shape of `name`, if present.
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// Loads `name` as f32; [`Error::MissingTensor`] when absent.
    fn load(&self, name: &str) -> Result<HostTensor>;

    /// True when `name` is present.
    fn contains(&self, name: &str) -> bool {
        self.shape(name).is_some()
    }
}

/// Tensors held in memory (random weights, tests).
pub struct MemorySource {
    name: String,
    tensors: HashMap<String, HostTensor>,
}

impl MemorySource {
    /// Wraps `tensors`; a repeated name keeps the last one.
    pub fn new(name: impl Into<String>, tensors: Vec<(String, HostTensor)>) -> Self {
        Self {
            name: name.into(),
            tensors: tensors.into_iter().collect(),
        }
    }
}

impl TensorSource for MemorySource {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.keys().cloned().collect();
        names.sort();
        names
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.tensors.get(name).map(|t| t.shape.clone())
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| Error::MissingTensor {
                op: "MemorySource::load",
                name: name.into(),
                source_name: self.name.clone(),
            })
    }
}
