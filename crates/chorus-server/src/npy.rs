//! Reading and writing `.npy` integer arrays of codes (format spec: numpy `lib/format.py`).

use chorus_core::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";
/// Bytes before the header: magic, two version bytes.
const PREAMBLE: usize = 8;

/// Codes read from a file, frame-major: `codes[t * n_q + q]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodesFile {
    pub n_q: usize,
    pub frames: usize,
    pub codes: Vec<u32>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Format {
        op: "npy::read_codes",
        path: "request body".into(),
        reason: reason.into(),
    }
}

/// Value of `key` in the header dict text, up to the next top-level comma or brace.
fn field<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let pat = format!("'{key}':");
    let start = header
        .find(&pat)
        .ok_or_else(|| bad(format!("header has no `{key}`")))?
        + pat.len();
    let rest = header[start..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| bad(format!("unterminated `{key}`")))?;
    Ok(rest[..end].trim())
}

/// Reads an integer array of shape `[n_q, T]` (or `[1, n_q, T]`) of any integer dtype.
/// Negative codes are reported as out of range via `Error::CodeOutOfRange` by the caller's check;
/// here they fail as `Error::Input`.
pub fn read_codes(bytes: &[u8]) -> Result<CodesFile> {
    if bytes.len() < PREAMBLE + 2 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not an .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (header_len, header_start) = match major {
        1 => (
            u16::from_le_bytes([bytes[8], bytes[9]]) as usize,
            PREAMBLE + 2,
        ),
        2 | 3 => {
            if bytes.len() < PREAMBLE + 4 {
                return Err(bad("truncated header"));
            }
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (n as usize, PREAMBLE + 4)
        }
        v => return Err(bad(format!("unsupported .npy version {v}"))),
    };
    let data_start = header_start + header_len;
    let header = bytes
        .get(header_start..data_start)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated or non-UTF-8 header"))?;
    let descr = field(header, "descr")?.trim_matches(|c| c == '\'' || c == '"');
    let fortran = match field(header, "fortran_order")? {
        "False" => false,
        "True" => true,
        other => return Err(bad(format!("fortran_order `{other}`"))),
    };
    let shape: Vec<usize> = field(header, "shape")?
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|e| bad(format!("shape: {e}"))))
        .collect::<Result<_>>()?;
    let (n_q, frames) = match shape.as_slice() {
        [q, t] | [1, q, t] => (*q, *t),
        other => {
            return Err(bad(format!(
                "codes must have shape [n_q, T] or [1, n_q, T], got {other:?}"
            )))
        }
    };
    let (little, kind, width) = parse_descr(descr)?;
    let data = &bytes[data_start..];
    let count = n_q * frames;
    if data.len() != count * width {
        return Err(bad(format!(
            "{} data bytes for shape {shape:?} of {descr} (expected {})",
            data.len(),
            count * width
        )));
    }
    let mut values = Vec::with_capacity(count);
    for chunk in data.chunks_exact(width) {
        let mut b = [0u8; 8];
        if little {
            b[..width].copy_from_slice(chunk);
        } else {
            for (i, &x) in chunk.iter().rev().enumerate() {
                b[i] = x;
            }
        }
        let raw = u64::from_le_bytes(b);
        let v: i64 = if kind == 'i' {
            // Sign-extend from `width` bytes.
            let shift = 64 - 8 * width as u32;
            ((raw << shift) as i64) >> shift
        } else {
            raw as i64
        };
        values.push(v);
    }
    let mut codes = vec![0u32; count];
    for q in 0..n_q {
        for t in 0..frames {
            let v = if fortran {
                values[t * n_q + q]
            } else {
                values[q * frames + t]
            };
            codes[t * n_q + q] = u32::try_from(v).map_err(|_| Error::CodeOutOfRange {
                op: "npy::read_codes",
                row: t,
                codebook: q,
                code: v,
                cardinality: u32::MAX as usize,
            })?;
        }
    }
    Ok(CodesFile { n_q, frames, codes })
}

/// `(little_endian, 'i' | 'u', bytes)` of an integer dtype string such as `<i8`.
fn parse_descr(descr: &str) -> Result<(bool, char, usize)> {
    let mut chars = descr.chars();
    let order = chars.next().ok_or_else(|| bad("empty descr"))?;
    let kind = chars.next().ok_or_else(|| bad("short descr"))?;
    let width: usize = chars
        .as_str()
        .parse()
        .map_err(|_| bad(format!("dtype `{descr}`")))?;
    let little = match order {
        '<' | '|' | '=' => true,
        '>' => false,
        _ => return Err(bad(format!("dtype `{descr}`"))),
    };
    if !matches!(kind, 'i' | 'u') || !matches!(width, 1 | 2 | 4 | 8) {
        return Err(bad(format!("dtype `{descr}` is not an integer type")));
    }
    Ok((little, kind, width))
}

/// Writes frame-major codes as a C-order `<i4` array of shape `[n_q, T]`.
pub fn write_codes(n_q: usize, codes: &[u32]) -> Vec<u8> {
    let frames = codes.len() / n_q;
    let mut header =
        format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({n_q}, {frames}), }}");
    // Pad so that the data starts on a 64-byte boundary, header ending in a newline.
    let unpadded = PREAMBLE + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(PREAMBLE + 2 + header.len() + codes.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for q in 0..n_q {
        for t in 0..frames {
            out.extend_from_slice(&(codes[t * n_q + q] as i32).to_le_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_transposes_to_frame_major() {
        let codes: Vec<u32> = (0..12).collect();
        let bytes = write_codes(3, &codes);
        assert_eq!(
            (PREAMBLE + 2 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64,
            0
        );
        let f = read_codes(&bytes).unwrap();
        assert_eq!((f.n_q, f.frames), (3, 4));
        assert_eq!(f.codes, codes);
    }

    #[test]
    fn reads_int64_big_endian_and_fortran_layouts() {
        let header = "{'descr': '>i8', 'fortran_order': True, 'shape': (2, 3), }\n";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        // Fortran order stores column t = [q0, q1] contiguously.
        for v in [10i64, 20, 11, 21, 12, 22] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        let f = read_codes(&bytes).unwrap();
        assert_eq!(f.codes, vec![10, 20, 11, 21, 12, 22]);
    }

    #[test]
    fn rejects_negative_codes_wrong_shapes_and_truncation() {
        let header = "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2), }\n";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&5i16.to_le_bytes());
        assert!(read_codes(&bytes).is_err(), "truncated data");
        bytes.extend_from_slice(&(-1i16).to_le_bytes());
        assert!(matches!(
            read_codes(&bytes),
            Err(Error::CodeOutOfRange { code: -1, .. })
        ));
        assert!(read_codes(b"not numpy at all").is_err());
        let h3 = "{'descr': '<i2', 'fortran_order': False, 'shape': (6,), }\n";
        let mut b3 = MAGIC.to_vec();
        b3.extend_from_slice(&[1, 0]);
        b3.extend_from_slice(&(h3.len() as u16).to_le_bytes());
        b3.extend_from_slice(h3.as_bytes());
        b3.extend_from_slice(&[0u8; 12]);
        assert!(read_codes(&b3).is_err(), "1-D shape");
    }
}
