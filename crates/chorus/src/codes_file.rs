//! Reading code sequences from `.npy` or `.safetensors` files, validated for a model.

use anyhow::{anyhow, bail, Context, Result};
use chorus_core::npy::{read_npy, NpyData};
use chorus_core::MAX_CODEBOOKS;
use std::path::Path;

/// Codes of `streams` streams, `[streams, n_q, frames]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct CodesBatch {
    pub streams: usize,
    pub n_q: usize,
    pub frames: usize,
    pub codes: Vec<u32>,
}

impl CodesBatch {
    /// The `n_q` codes of one stream at one frame.
    pub fn frame(&self, stream: usize, t: usize, out: &mut Vec<u32>) {
        out.clear();
        let base = stream * self.n_q * self.frames;
        out.extend((0..self.n_q).map(|q| self.codes[base + q * self.frames + t]));
    }
}

/// Reads a codes file and checks it against `cardinality` and the model's `max_codebooks`.
pub fn read_codes(path: &Path, cardinality: usize, max_codebooks: usize) -> Result<CodesBatch> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("reading codes file {name}"))?;
    let (shape, values) = match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => {
            let a = read_npy(&bytes, &name)?;
            match a.data {
                NpyData::Int(v) => (a.shape, v),
                NpyData::Float(_) => bail!(
                    "{name}: codes must be an integer array, found dtype {}",
                    a.descr
                ),
            }
        }
        Some("safetensors") => read_safetensors_ints(&bytes, &name)?,
        _ => bail!("{name}: codes file must end in .npy or .safetensors"),
    };
    codes_from(&name, &shape, &values, cardinality, max_codebooks)
}

/// Validates shape and range; `[n_q, T]` is one stream.
pub fn codes_from(
    name: &str,
    shape: &[usize],
    values: &[i64],
    cardinality: usize,
    max_codebooks: usize,
) -> Result<CodesBatch> {
    let (streams, n_q, frames) = match *shape {
        [q, t] => (1, q, t),
        [b, q, t] => (b, q, t),
        _ => {
            bail!("{name}: codes must have rank 2 [n_q, T] or 3 [B, n_q, T], found shape {shape:?}")
        }
    };
    let limit = max_codebooks.min(MAX_CODEBOOKS);
    if n_q == 0 || n_q > limit {
        bail!("{name}: n_q = {n_q} (shape {shape:?}); the model takes 1..={limit} codebooks");
    }
    if streams == 0 || frames == 0 {
        bail!("{name}: shape {shape:?} holds no frame");
    }
    let mut codes = Vec::with_capacity(values.len());
    for (i, &v) in values.iter().enumerate() {
        if v < 0 || v as u64 >= cardinality as u64 {
            let (b, rest) = (i / (n_q * frames), i % (n_q * frames));
            bail!(
                "{name}: code {v} at stream {b}, codebook {}, frame {} is outside [0, {cardinality})",
                rest / frames,
                rest % frames
            );
        }
        codes.push(v as u32);
    }
    Ok(CodesBatch {
        streams,
        n_q,
        frames,
        codes,
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
            let signed = dtype.starts_with('I') && c[width - 1] & 0x80 != 0;
            if signed {
                b[width..].fill(0xff);
            }
            i64::from_le_bytes(b)
        })
        .collect();
    Ok((shape, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_streams_and_frames() {
        let c = codes_from("x", &[2, 2, 3], &(0..12).collect::<Vec<_>>(), 2048, 32).unwrap();
        let mut f = Vec::new();
        c.frame(1, 2, &mut f);
        assert_eq!(f, vec![8, 11]);
    }

    #[test]
    fn rejects_out_of_range_rank_and_nq() {
        let e = codes_from("x", &[1, 2], &[0, 2048], 2048, 32).unwrap_err();
        assert!(
            e.to_string()
                .contains("code 2048 at stream 0, codebook 0, frame 1"),
            "{e}"
        );
        assert!(codes_from("x", &[1, 1], &[-1], 2048, 32).is_err());
        assert!(codes_from("x", &[4], &[0; 4], 2048, 32)
            .unwrap_err()
            .to_string()
            .contains("rank"));
        assert!(codes_from("x", &[33, 1], &[0; 33], 2048, 32)
            .unwrap_err()
            .to_string()
            .contains("n_q = 33"));
    }

    #[test]
    fn reads_signed_safetensors_ints() {
        let header = br#"{"codes":{"dtype":"I16","shape":[1,2],"data_offsets":[0,4]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[5, 0, 0xff, 0xff]);
        let (shape, v) = read_safetensors_ints(&bytes, "c").unwrap();
        assert_eq!((shape, v), (vec![1, 2], vec![5, -1]));
        assert!(read_safetensors_ints(&bytes[..bytes.len() - 1], "c").is_err());
    }
}
