//! A memory-mapped safetensors reader: header validation up front, f32 conversion per tensor.
//!
//! Format (huggingface/safetensors `docs/source/index.mdx`): an 8-byte little-endian header
//! length N, N bytes of JSON mapping names to `{dtype, shape, data_offsets: [begin, end]}`
//! (offsets relative to the end of the header), then the raw little-endian data.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::{Error, HostTensor, Result};
use half::{bf16, f16};
use memmap2::Mmap;

use super::source::TensorSource;

/// Bytes of the little-endian header-length prefix.
const LEN_PREFIX: usize = 8;
/// Largest header we accept (the reference implementation's limit is 100 MB).
const MAX_HEADER_BYTES: u64 = 100 * 1024 * 1024;
/// Dtypes that convert losslessly to f32 at load.
pub const SUPPORTED_DTYPES: &str = "F32, F16, BF16";
const OP: &str = "safetensors";

/// Storage dtype of a tensor in a safetensors file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }

    /// The name the safetensors header uses.
    pub fn header_name(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "F32" => Some(Dtype::F32),
            "F16" => Some(Dtype::F16),
            "BF16" => Some(Dtype::BF16),
            _ => None,
        }
    }
}

/// One header entry; the dtype string is kept so that an unsupported dtype is reported only
/// when that tensor is actually needed.
#[derive(Clone, Debug)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

/// An open, validated safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    display: String,
    mmap: Mmap,
    data_start: usize,
    entries: BTreeMap<String, Entry>,
}

impl SafetensorsFile {
    /// Maps `path` and validates its header: every entry's byte range lies in the file and
    /// matches its shape and dtype.
    pub fn open(path: &Path) -> Result<Self> {
        let display = path.display().to_string();
        let file = File::open(path).map_err(|e| Error::io(OP, &display, e))?;
        // SAFETY: the map is read-only; a checkpoint changed underneath a running process is
        // outside what any loader can guard against, and every read is bounds-checked below.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(OP, &display, e))?;
        let format = |reason: String| Error::Format {
            op: OP,
            path: display.clone(),
            reason,
        };
        if mmap.len() < LEN_PREFIX {
            return Err(format(format!(
                "file is {} bytes, shorter than the {LEN_PREFIX}-byte header length",
                mmap.len()
            )));
        }
        let mut prefix = [0u8; LEN_PREFIX];
        prefix.copy_from_slice(&mmap[..LEN_PREFIX]);
        let header_len = u64::from_le_bytes(prefix);
        if header_len > MAX_HEADER_BYTES || header_len as usize > mmap.len() - LEN_PREFIX {
            return Err(format(format!(
                "header length {header_len} does not fit in a file of {} bytes (truncated or not safetensors)",
                mmap.len()
            )));
        }
        let data_start = LEN_PREFIX + header_len as usize;
        let header: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&mmap[LEN_PREFIX..data_start])
                .map_err(|e| format(format!("header is not valid JSON: {e}")))?;
        let data_len = mmap.len() - data_start;
        let mut entries = BTreeMap::new();
        for (name, value) in header {
            if name == "__metadata__" {
                continue;
            }
            let entry = parse_entry(&name, &value).map_err(format)?;
            if entry.end > data_len || entry.begin > entry.end {
                return Err(format(format!(
                    "tensor `{name}` spans bytes {}..{} but the data section holds {data_len} (truncated file?)",
                    entry.begin, entry.end
                )));
            }
            if let Some(dtype) = Dtype::parse(&entry.dtype) {
                let expected = entry.shape.iter().product::<usize>() * dtype.size();
                if entry.end - entry.begin != expected {
                    return Err(format(format!(
                        "tensor `{name}` of shape {:?} and dtype {} needs {expected} bytes, its range holds {}",
                        entry.shape,
                        entry.dtype,
                        entry.end - entry.begin
                    )));
                }
            }
            entries.insert(name, entry);
        }
        Ok(Self {
            path: path.to_path_buf(),
            display,
            mmap,
            data_start,
            entries,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.entries.get(name).ok_or_else(|| Error::MissingTensor {
            op: OP,
            name: name.into(),
            source_name: self.display.clone(),
        })
    }

    /// Loads rows `rows` of the leading axis of `name` as f32 (the whole tensor when `None`).
    pub fn load_rows(
        &self,
        name: &str,
        rows: Option<std::ops::Range<usize>>,
    ) -> Result<HostTensor> {
        let entry = self.entry(name)?;
        let dtype = Dtype::parse(&entry.dtype).ok_or_else(|| Error::Dtype {
            op: OP,
            name: name.into(),
            expected: SUPPORTED_DTYPES.into(),
            found: entry.dtype.clone(),
        })?;
        let mut shape = entry.shape.clone();
        let row_elems: usize = shape.iter().skip(1).product();
        let (first, count) = match rows {
            None => (0, shape.first().copied().unwrap_or(1)),
            Some(r) => {
                let have = shape.first().copied().unwrap_or(0);
                if r.end > have || r.start > r.end {
                    return Err(Error::input(
                        OP,
                        format!("rows {r:?} of `{name}` are outside its {have} rows"),
                    ));
                }
                shape[0] = r.len();
                (r.start, r.len())
            }
        };
        let start = self.data_start + entry.begin + first * row_elems * dtype.size();
        let bytes = &self.mmap[start..start + count * row_elems * dtype.size()];
        HostTensor::new(shape, convert(bytes, dtype))
    }
}

impl SafetensorsFile {
    /// Loads an integer tensor (I32 or I64 in the file; I64 values must fit in i32).
    pub fn load_i32(&self, name: &str) -> Result<(Vec<usize>, Vec<i32>)> {
        let entry = self.entry(name)?;
        let bytes = &self.mmap[self.data_start + entry.begin..self.data_start + entry.end];
        let n: usize = entry.shape.iter().product();
        let data: Vec<i32> = match entry.dtype.as_str() {
            "I32" if bytes.len() == n * 4 => bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            "I64" if bytes.len() == n * 8 => bytes
                .chunks_exact(8)
                .map(|b| {
                    let v = i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                    i32::try_from(v).map_err(|_| {
                        Error::input(OP, format!("`{name}` holds {v}, outside the i32 range"))
                    })
                })
                .collect::<Result<_>>()?,
            other => {
                return Err(Error::Dtype {
                    op: OP,
                    name: name.into(),
                    expected: "I32, I64".into(),
                    found: other.into(),
                })
            }
        };
        Ok((entry.shape.clone(), data))
    }

    /// Loads a one-byte tensor stored as `I8` (int8 weights) as raw values.
    pub fn load_i8(&self, name: &str) -> Result<(Vec<usize>, Vec<i8>)> {
        let (shape, bytes) = self.bytes_of(name, "I8")?;
        Ok((shape, bytes.iter().map(|&b| b as i8).collect()))
    }

    /// Loads a one-byte tensor stored as `U8` (for example UTF-8 text) as raw bytes.
    pub fn load_u8(&self, name: &str) -> Result<(Vec<usize>, Vec<u8>)> {
        let (shape, bytes) = self.bytes_of(name, "U8")?;
        Ok((shape, bytes.to_vec()))
    }

    /// Shape and data bytes of a one-byte tensor of dtype `want`, checked.
    fn bytes_of(&self, name: &str, want: &str) -> Result<(Vec<usize>, &[u8])> {
        let entry = self.entry(name)?;
        if entry.dtype != want {
            return Err(Error::Dtype {
                op: OP,
                name: name.into(),
                expected: want.into(),
                found: entry.dtype.clone(),
            });
        }
        let bytes = &self.mmap[self.data_start + entry.begin..self.data_start + entry.end];
        let n: usize = entry.shape.iter().product();
        if bytes.len() != n {
            return Err(Error::Format {
                op: OP,
                path: self.display.clone(),
                reason: format!(
                    "tensor `{name}` of shape {:?} and dtype {want} needs {n} bytes, its range holds {}",
                    entry.shape,
                    bytes.len()
                ),
            });
        }
        Ok((entry.shape.clone(), bytes))
    }

    /// The stored dtype name of `name` (`F32`, `BF16`, `I32`, ...), if present.
    pub fn dtype_name(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(|e| e.dtype.as_str())
    }
}

impl TensorSource for SafetensorsFile {
    fn source_name(&self) -> &str {
        &self.display
    }

    fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.entries.get(name).map(|e| e.shape.clone())
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        self.load_rows(name, None)
    }
}

fn parse_entry(name: &str, value: &serde_json::Value) -> std::result::Result<Entry, String> {
    let bad = |what: &str| format!("header entry `{name}`: {what}");
    let obj = value.as_object().ok_or_else(|| bad("not an object"))?;
    let dtype = obj
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or_else(|| bad("missing dtype"))?
        .to_string();
    let shape = obj
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or_else(|| bad("missing shape"))?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("shape is not a list of sizes"))?;
    let offsets = obj
        .get("data_offsets")
        .and_then(|o| o.as_array())
        .filter(|o| o.len() == 2)
        .and_then(|o| Some((o[0].as_u64()? as usize, o[1].as_u64()? as usize)))
        .ok_or_else(|| bad("data_offsets is not [begin, end]"))?;
    Ok(Entry {
        dtype,
        shape,
        begin: offsets.0,
        end: offsets.1,
    })
}

/// Little-endian bytes to f32; chunked loops so that the compiler vectorises them.
fn convert(bytes: &[u8], dtype: Dtype) -> Vec<f32> {
    match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
    }
}
