//! Where the weights of a linear come from: a tensor source whose linears may be stored int8.
//!
//! The int8 ConvRot layout of a checkpoint (`MUSIC_SEMANTIC.md` §5.6): for a linear `<base>`,
//! `<base>.weight` I8 `[out, in]`, `<base>.weight_scale` F32 `[out, 1]` and, optionally,
//! `<base>.comfy_quant` U8 JSON `{"format": "int8_tensorwise", "convrot": true,
//! "convrot_groupsize": g}`. A linear is read as int8 exactly when its `.weight_scale` is present,
//! so a file may mix int8 and float linears; without `comfy_quant` the group is the writer's rule
//! (the first of 256, 64, 16 dividing `in`).

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_core::convrot::{check_group, writer_group};
use chorus_core::{Error, HostTensor, Result};
use chorus_lm::{HostLinear, Q8Tensor};

use crate::weights::Spec;

/// The `format` of a ConvRot `comfy_quant` entry.
pub const COMFY_FORMAT: &str = "int8_tensorwise";

/// Tensors by name, with linears in either form.
pub trait LinearSource {
    /// The float tensors (and every name's shape).
    fn tensors(&self) -> &dyn TensorSource;
    /// The linear `name` (a `<base>.weight` of `shape` `[out, in]`), int8 where the source holds
    /// it so, else dense f32.
    fn linear(&self, op: &'static str, name: &str, shape: &[usize]) -> Result<HostLinear>;
}

/// `<base>` of a `<base>.weight` name.
pub fn base_name(name: &str) -> &str {
    name.strip_suffix(".weight").unwrap_or(name)
}

impl LinearSource for SafetensorsFile {
    fn tensors(&self) -> &dyn TensorSource {
        self
    }

    fn linear(&self, op: &'static str, name: &str, shape: &[usize]) -> Result<HostLinear> {
        let base = base_name(name);
        let scale_name = format!("{base}.weight_scale");
        if !self.contains(&scale_name) {
            return load_checked(self, op, name, shape).map(HostLinear::Dense);
        }
        let &[rows, cols] = shape else {
            return Err(Error::input(op, format!("`{name}` is not a 2-D linear")));
        };
        match self.dtype_name(name) {
            Some("I8") => {}
            found => {
                return Err(Error::Dtype {
                    op,
                    name: name.into(),
                    expected: format!("I8 (`{scale_name}` makes it an int8 weight)"),
                    found: found.unwrap_or("nothing").into(),
                })
            }
        }
        let (found, data) = self.load_i8(name)?;
        if found != shape {
            return Err(Error::Shape {
                op,
                name: name.into(),
                expected: shape.to_vec(),
                found,
            });
        }
        let scales = self.load(&scale_name)?;
        if scales.shape != [rows, 1] && scales.shape != [rows] {
            return Err(Error::Shape {
                op,
                name: scale_name,
                expected: vec![rows, 1],
                found: scales.shape,
            });
        }
        let group = comfy_group(self, op, base, cols)?;
        check_group(op, group, cols).map_err(|e| Error::input(op, format!("`{name}`: {e}")))?;
        Ok(HostLinear::Q8(Q8Tensor {
            rows,
            cols,
            group,
            data,
            scales: scales.data,
        }))
    }
}

/// The Hadamard group of int8 linear `base` with `cols` inputs: its `comfy_quant` entry's, else the
/// writer's rule.
fn comfy_group(file: &SafetensorsFile, op: &'static str, base: &str, cols: usize) -> Result<usize> {
    let name = format!("{base}.comfy_quant");
    let bad = |reason: String| Error::Format {
        op,
        path: file.source_name().into(),
        reason: format!("`{name}`: {reason}"),
    };
    if !file.contains(&name) {
        return writer_group(cols).ok_or_else(|| {
            bad(format!(
                "absent, and no group of 256, 64 or 16 divides the {cols} inputs"
            ))
        });
    }
    let (_, bytes) = file.load_u8(&name)?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON ({e})")))?;
    let format = json.get("format").and_then(|v| v.as_str());
    let convrot = json.get("convrot").and_then(|v| v.as_bool());
    if format != Some(COMFY_FORMAT) || convrot != Some(true) {
        return Err(bad(format!(
            "format {format:?}, convrot {convrot:?}: only {COMFY_FORMAT} with convrot is supported"
        )));
    }
    match json.get("convrot_groupsize").and_then(|v| v.as_u64()) {
        Some(g) => Ok(g as usize),
        None => {
            writer_group(cols).ok_or_else(|| bad(format!("no convrot_groupsize for {cols} inputs")))
        }
    }
}

/// Loads `name` after checking its shape against the spec list (shape before data).
pub(crate) fn load_checked(
    src: &dyn TensorSource,
    op: &'static str,
    name: &str,
    shape: &[usize],
) -> Result<HostTensor> {
    match src.shape(name) {
        None => Err(Error::MissingTensor {
            op,
            name: name.into(),
            source_name: src.source_name().into(),
        }),
        Some(found) if found != shape => Err(Error::Shape {
            op,
            name: name.into(),
            expected: shape.to_vec(),
            found,
        }),
        Some(_) => src.load(name),
    }
}

/// Shape-checked reads of one model's tensors, by the spec list.
pub(crate) struct Loader<'a> {
    op: &'static str,
    lin: &'a dyn LinearSource,
    specs: Vec<Spec>,
}

impl<'a> Loader<'a> {
    /// Checks the shape of every spec present in the source (but `skip`) before any data is read.
    pub(crate) fn new(
        op: &'static str,
        lin: &'a dyn LinearSource,
        specs: Vec<Spec>,
        skip: &str,
    ) -> Result<Self> {
        for s in specs.iter().filter(|s| s.name != skip) {
            if let Some(found) = lin.tensors().shape(&s.name).filter(|f| *f != s.shape) {
                return Err(Error::Shape {
                    op,
                    name: s.name.clone(),
                    expected: s.shape.clone(),
                    found,
                });
            }
        }
        Ok(Self { op, lin, specs })
    }

    pub(crate) fn shape(&self, name: &str) -> Vec<usize> {
        let spec = self.specs.iter().find(|s| s.name == name);
        spec.map(|s| s.shape.clone()).unwrap_or_default()
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<HostTensor> {
        load_checked(self.lin.tensors(), self.op, name, &self.shape(name))
    }

    pub(crate) fn linear(&self, name: &str) -> Result<HostLinear> {
        self.lin.linear(self.op, name, &self.shape(name))
    }

    /// `prefix` + each of `names`, concatenated along the output axis.
    pub(crate) fn fused(&self, prefix: &str, names: &[&str]) -> Result<HostLinear> {
        let parts = names.iter().map(|n| self.linear(&format!("{prefix}{n}")));
        HostLinear::concat_rows(parts.collect::<Result<_>>()?)
    }
}
