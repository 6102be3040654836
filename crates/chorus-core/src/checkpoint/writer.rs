//! Writes named f32 tensors as a safetensors file in F32, F16 or BF16.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::{Error, HostTensor, Result};
use half::{bf16, f16};

pub use super::safetensors::Dtype;

/// The header is padded with spaces to this alignment so that data starts aligned.
const HEADER_ALIGN: usize = 8;
const OP: &str = "write_safetensors";

/// Writes `tensors` (in order) to `path`, converting each to `dtype` (round to nearest even).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, HostTensor)],
    dtype: Dtype,
) -> Result<()> {
    let display = path.display().to_string();
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
    let mut offset = 0usize;
    for (name, t) in tensors {
        if header.contains_key(name) {
            return Err(Error::input(OP, format!("tensor `{name}` appears twice")));
        }
        let end = offset + t.len() * dtype.size();
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": dtype.header_name(),
                "shape": t.shape,
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
        w.write_all(&encode(&t.data, dtype)).map_err(io)?;
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
