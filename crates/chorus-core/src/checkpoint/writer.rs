//! Writes named tensors as a safetensors file: f32 data in F32, F16 or BF16, and integers.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::{Error, HostTensor, Result};
use half::{bf16, f16};

pub use super::safetensors::Dtype;

/// The header is padded with spaces to this alignment so that data starts aligned.
const HEADER_ALIGN: usize = 8;
const OP: &str = "write_safetensors";

/// One tensor to write, in its stored dtype.
pub enum TensorData<'a> {
    /// f32 values converted to `dtype` (round to nearest even).
    Float(&'a HostTensor, Dtype),
    /// Already-rounded bf16 bits.
    Bf16Bits { shape: Vec<usize>, bits: &'a [u16] },
    /// Integers stored as I32.
    I32 { shape: Vec<usize>, data: &'a [i32] },
    /// Integers stored as I8 (int8 weights).
    I8 { shape: Vec<usize>, data: &'a [i8] },
    /// Bytes stored as U8 (for example UTF-8 text).
    U8 { shape: Vec<usize>, data: &'a [u8] },
}

impl TensorData<'_> {
    fn header(&self) -> (&'static str, Vec<usize>, usize) {
        match self {
            TensorData::Float(t, d) => (d.header_name(), t.shape.clone(), t.len() * d.size()),
            TensorData::Bf16Bits { shape, bits } => ("BF16", shape.clone(), bits.len() * 2),
            TensorData::I32 { shape, data } => ("I32", shape.clone(), data.len() * 4),
            TensorData::I8 { shape, data } => ("I8", shape.clone(), data.len()),
            TensorData::U8 { shape, data } => ("U8", shape.clone(), data.len()),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            TensorData::Float(t, d) => encode(&t.data, *d),
            TensorData::Bf16Bits { bits, .. } => {
                bits.iter().flat_map(|b| b.to_le_bytes()).collect()
            }
            TensorData::I32 { data, .. } => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I8 { data, .. } => data.iter().map(|&x| x as u8).collect(),
            TensorData::U8 { data, .. } => data.to_vec(),
        }
    }
}

/// Writes `tensors` (in order) to `path`, converting each to `dtype` (round to nearest even).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, HostTensor)],
    dtype: Dtype,
) -> Result<()> {
    let entries: Vec<(String, TensorData<'_>)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), TensorData::Float(t, dtype)))
        .collect();
    write_tensors(path, &entries, &[])
}

/// Writes `tensors` (in order) with their own dtypes and `metadata` string pairs.
pub fn write_tensors(
    path: &Path,
    tensors: &[(String, TensorData<'_>)],
    metadata: &[(&str, String)],
) -> Result<()> {
    let display = path.display().to_string();
    let mut header = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    meta.insert("format".into(), "pt".into());
    for (k, v) in metadata {
        meta.insert((*k).into(), v.clone().into());
    }
    header.insert("__metadata__".into(), serde_json::Value::Object(meta));
    let mut offset = 0usize;
    for (name, t) in tensors {
        if header.contains_key(name) {
            return Err(Error::input(OP, format!("tensor `{name}` appears twice")));
        }
        let (dtype, shape, len) = t.header();
        let end = offset + len;
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": dtype,
                "shape": shape,
                "data_offsets": [offset, end],
            }),
        );
        offset = end;
    }
    let mut json =
        serde_json::to_vec(&serde_json::Value::Object(header)).map_err(|e| Error::Format {
            op: OP,
            path: display.clone(),
            reason: e.to_string(),
        })?;
    while json.len() % HEADER_ALIGN != 0 {
        json.push(b' ');
    }
    let io = |e| Error::io(OP, &display, e);
    let mut w = BufWriter::new(File::create(path).map_err(io)?);
    w.write_all(&(json.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(&json).map_err(io)?;
    for (_, t) in tensors {
        w.write_all(&t.bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn encode(data: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Dtype::F16 => data
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
        Dtype::BF16 => data
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
    }
}
