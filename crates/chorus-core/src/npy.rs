//! Reading and writing NumPy `.npy` arrays (format versions 1-3; any byte order and C or
//! Fortran order on reading; little-endian C order on writing). Format: numpy `lib/format.py`.

use crate::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";
const OP: &str = "npy";

/// Element values, widened: integers to i64, floats to f32.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    Int(Vec<i64>),
    Float(Vec<f32>),
}

/// A parsed array.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    /// The dtype string of the header, e.g. `<i8`.
    pub descr: String,
    pub data: NpyData,
}

fn bad(origin: &str, reason: impl Into<String>) -> Error {
    Error::Format {
        op: OP,
        path: origin.into(),
        reason: reason.into(),
    }
}

/// Parses an `.npy` file's bytes; `origin` names it in errors.
pub fn read_npy(bytes: &[u8], origin: &str) -> Result<NpyArray> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad(origin, "not a .npy file (bad magic)"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(origin, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or_else(|| bad(origin, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(origin, "header is not UTF-8"))?;
    let descr = dict_value(header, "descr")
        .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
        .ok_or_else(|| bad(origin, "header has no descr"))?;
    let fortran = dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True"));
    let shape = parse_shape(header)
        .ok_or_else(|| bad(origin, format!("bad shape in header `{header}`")))?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(origin, "shape overflows"))?;
    let body = &bytes[start + header_len..];
    let width = dtype_width(&descr).ok_or_else(|| Error::Dtype {
        op: OP,
        name: origin.into(),
        expected: "int8/16/32/64, uint8/16/32/64, float32, float64 (little-endian)".into(),
        found: descr.clone(),
    })?;
    let needed = count
        .checked_mul(width)
        .ok_or_else(|| bad(origin, "shape overflows"))?;
    if body.len() < needed {
        return Err(bad(
            origin,
            format!(
                "truncated data: shape {shape:?} needs {needed} bytes, file has {}",
                body.len()
            ),
        ));
    }
    let body = &body[..needed];
    let swapped: Vec<u8>;
    let body = if descr.starts_with('>') && width > 1 {
        swapped = body
            .chunks_exact(width)
            .flat_map(|c| c.iter().rev().copied())
            .collect();
        &swapped
    } else {
        body
    };
    let mut data = decode(&descr, body, width);
    if fortran && shape.len() > 1 {
        data = match data {
            NpyData::Int(v) => NpyData::Int(fortran_to_c(&v, &shape)),
            NpyData::Float(v) => NpyData::Float(fortran_to_c(&v, &shape)),
        };
    }
    Ok(NpyArray { shape, descr, data })
}

/// Reorders column-major data of `shape` into row-major.
fn fortran_to_c<T: Copy>(data: &[T], shape: &[usize]) -> Vec<T> {
    let rank = shape.len();
    let mut strides = vec![1usize; rank];
    for i in 1..rank {
        strides[i] = strides[i - 1] * shape[i - 1];
    }
    let mut index = vec![0usize; rank];
    let mut out = Vec::with_capacity(data.len());
    for _ in 0..data.len() {
        out.push(
            data[index
                .iter()
                .zip(&strides)
                .map(|(i, s)| i * s)
                .sum::<usize>()],
        );
        for axis in (0..rank).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    out
}

fn dtype_width(descr: &str) -> Option<usize> {
    let (order, kind) = descr.split_at(1.min(descr.len()));
    if !matches!(order, "<" | ">" | "|" | "=") {
        return None;
    }
    match kind {
        "i1" | "u1" | "b1" => Some(1),
        "i2" | "u2" => Some(2),
        "i4" | "u4" | "f4" => Some(4),
        "i8" | "u8" | "f8" => Some(8),
        _ => None,
    }
}

fn decode(descr: &str, body: &[u8], width: usize) -> NpyData {
    let chunks = body.chunks_exact(width);
    let ints = |f: fn(&[u8]) -> i64| NpyData::Int(body.chunks_exact(width).map(f).collect());
    match &descr[1..] {
        "f4" => NpyData::Float(
            chunks
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "f8" => NpyData::Float(
            chunks
                .map(|c| {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                })
                .collect(),
        ),
        "i1" => ints(|c| c[0] as i8 as i64),
        "u1" | "b1" => ints(|c| c[0] as i64),
        "i2" => ints(|c| i16::from_le_bytes([c[0], c[1]]) as i64),
        "u2" => ints(|c| u16::from_le_bytes([c[0], c[1]]) as i64),
        "i4" => ints(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64),
        "u4" => ints(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64),
        "i8" => ints(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
        // u8 values above i64::MAX saturate, which every range check then rejects.
        _ => ints(|c| {
            i64::try_from(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]))
            .unwrap_or(i64::MAX)
        }),
    }
}

/// The text after `'key':` up to the next top-level comma.
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

fn parse_shape(header: &str) -> Option<Vec<usize>> {
    let at = header
        .find("'shape'")
        .or_else(|| header.find("\"shape\""))?;
    let rest = &header[at..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse().ok())
        .collect()
}

/// Serialises a float32 array (format version 1).
pub fn write_npy_f32(shape: &[usize], data: &[f32]) -> Vec<u8> {
    write(shape, "<f4", data.len() * 4, |out| {
        data.iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()))
    })
}

/// Serialises an int64 array (format version 1).
pub fn write_npy_i64(shape: &[usize], data: &[i64]) -> Vec<u8> {
    write(shape, "<i8", data.len() * 8, |out| {
        data.iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()))
    })
}

fn write(shape: &[usize], descr: &str, body: usize, fill: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // The header is padded with spaces so that the data starts on a 64-byte boundary.
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + body);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    fill(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_f32_and_i64() {
        let a = read_npy(&write_npy_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]), "a").unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, NpyData::Float(vec![1., 2., 3., 4., 5., 6.]));
        let b = read_npy(&write_npy_i64(&[3], &[-1, 0, 7]), "b").unwrap();
        assert_eq!(b.shape, vec![3]);
        assert_eq!(b.data, NpyData::Int(vec![-1, 0, 7]));
    }

    #[test]
    fn reads_a_numpy_written_header() {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let header = "{'descr': '<u2', 'fortran_order': False, 'shape': (1, 2), }          \n";
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[5, 0, 0, 8]);
        let a = read_npy(&bytes, "x").unwrap();
        assert_eq!(a.data, NpyData::Int(vec![5, 2048]));
    }

    #[test]
    fn rejects_truncated_and_bad_dtypes() {
        let full = write_npy_f32(&[4], &[1., 2., 3., 4.]);
        let e = read_npy(&full[..full.len() - 3], "t.npy").unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let mut wrong = full.clone();
        let at = wrong.windows(3).position(|w| w == b"<f4").unwrap();
        wrong[at..at + 3].copy_from_slice(b"<c8");
        assert!(matches!(
            read_npy(&wrong, "c.npy"),
            Err(Error::Dtype { .. })
        ));
        assert!(read_npy(b"hello world", "h").is_err());
    }

    #[test]
    fn reads_big_endian_fortran_order() {
        let header = "{'descr': '>i8', 'fortran_order': True, 'shape': (2, 3), }\n";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        // Column-major: column t holds [row 0, row 1].
        for v in [10i64, 20, 11, 21, 12, 22] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        let a = read_npy(&bytes, "f").unwrap();
        assert_eq!(a.data, NpyData::Int(vec![10, 11, 12, 20, 21, 22]));
    }
}
