//! Reading code sequences from `.npy` or `.safetensors` files, validated for a model.

use anyhow::{anyhow, bail, Context, Result};
use chorus_core::codes::CodesBatch;
use std::path::Path;

/// Reads a codes file and checks it against `cardinality` and the model's `max_codebooks`.
pub fn read_codes(path: &Path, cardinality: usize, max_codebooks: usize) -> Result<CodesBatch> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("reading codes file {name}"))?;
    Ok(match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => CodesBatch::from_npy(&bytes, &name, cardinality, max_codebooks)?,
        Some("safetensors") => {
            let (shape, values) = read_safetensors_ints(&bytes, &name)?;
            CodesBatch::from_array(&name, &shape, &values, cardinality, max_codebooks)?
        }
        _ => bail!("{name}: codes file must end in .npy or .safetensors"),
    })
}

/// The single integer tensor of a safetensors file (or the one named `codes`).
fn read_safetensors_ints(bytes: &[u8], name: &str) -> Result<(Vec<usize>, Vec<i64>)> {
    let len = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
        .ok_or_else(|| anyhow!("{name}: truncated safetensors header"))?;
    let header = bytes
        .get(8..8usize.saturating_add(len))
        .ok_or_else(|| anyhow!("{name}: truncated safetensors header ({len} bytes announced)"))?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header)
        .with_context(|| format!("{name}: malformed safetensors header"))?;
    let tensors: Vec<(&String, &serde_json::Value)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    let (key, info) = match tensors.iter().find(|(k, _)| *k == "codes") {
        Some(t) => *t,
        None if tensors.len() == 1 => tensors[0],
        None => bail!(
            "{name}: expected one tensor or one named `codes`, found {}",
            tensors.len()
        ),
    };
    let dtype = info["dtype"].as_str().unwrap_or("?");
    let shape: Vec<usize> = info["shape"]
        .as_array()
        .ok_or_else(|| anyhow!("{name}: tensor `{key}` has no shape"))?
        .iter()
        .map(|d| {
            d.as_u64()
                .map(|d| d as usize)
                .ok_or_else(|| anyhow!("{name}: bad shape of `{key}`"))
        })
        .collect::<Result<_>>()?;
    let offsets: Vec<usize> = info["data_offsets"]
        .as_array()
        .map(|o| {
            o.iter()
                .filter_map(|v| v.as_u64().map(|v| v as usize))
                .collect()
        })
        .unwrap_or_default();
    let [start, end] = offsets[..] else {
        bail!("{name}: tensor `{key}` has malformed data_offsets");
    };
    let data = bytes.get(8 + len + start..8 + len + end).ok_or_else(|| {
        anyhow!("{name}: tensor `{key}` data lies past the end of the file (truncated?)")
    })?;
    let width = match dtype {
        "I64" | "U64" => 8,
        "I32" | "U32" => 4,
        "I16" | "U16" => 2,
        "I8" | "U8" => 1,
        other => bail!("{name}: tensor `{key}` has dtype {other}; codes must be an integer dtype"),
    };
    let count: usize = shape.iter().product();
    if data.len() != count * width {
        bail!(
            "{name}: tensor `{key}` holds {} bytes, shape {shape:?} of {dtype} needs {}",
            data.len(),
            count * width
        );
    }
    let values = data
        .chunks_exact(width)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..width].copy_from_slice(c);
            if dtype.starts_with('I') && c[width - 1] & 0x80 != 0 {
                b[width..].fill(0xff);
            }
            i64::from_le_bytes(b)
        })
        .collect();
    Ok((shape, values))
}

/// An integer `.npy` as `u32`s with its shape; `what` names the contents in errors.
pub fn read_u32_npy(path: &std::path::Path, what: &str) -> anyhow::Result<(Vec<usize>, Vec<u32>)> {
    use anyhow::Context;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let arr = chorus_core::npy::read_npy(&bytes, &path.display().to_string())?;
    let chorus_core::npy::NpyData::Int(ids) = arr.data else {
        anyhow::bail!(
            "{}: {what} must be integers, found dtype {}",
            path.display(),
            arr.descr
        );
    };
    let ids = ids
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            u32::try_from(x).with_context(|| {
                format!(
                    "{}: {what}: {x} at index {i} is negative or too large",
                    path.display()
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((arr.shape, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_signed_safetensors_ints() {
        let header = br#"{"codes":{"dtype":"I16","shape":[1,2],"data_offsets":[0,4]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[5, 0, 0xff, 0xff]);
        let (shape, v) = read_safetensors_ints(&bytes, "c").unwrap();
        assert_eq!((shape, v), (vec![1, 2], vec![5, -1]));
        assert!(read_safetensors_ints(&bytes[..bytes.len() - 1], "c").is_err());
        let float = br#"{"codes":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let mut f = (float.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(float);
        f.extend_from_slice(&[0; 4]);
        assert!(read_safetensors_ints(&f, "f")
            .unwrap_err()
            .to_string()
            .contains("F32"));
    }
}
