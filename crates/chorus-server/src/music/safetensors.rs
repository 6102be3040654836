//! A song as a safetensors file in memory, byte for byte what `chorus music` writes with
//! [`chorus_core::checkpoint::write_tensors`] (no temporary file on the server).

use chorus_music::song::LEVELS;
use serde_json::{json, Map, Value};

/// The header is padded with spaces to this alignment, as `write_tensors` does.
const HEADER_ALIGN: usize = 8;

/// `codes` int32 `[T, 8]` and, when given, `frame_hiddens` bf16 bits `[T, width]`, with
/// `metadata` string pairs (plus `format: pt`).
pub fn song_safetensors(
    codes: &[i32],
    hiddens: Option<(&[u16], usize)>,
    metadata: &[(&str, String)],
) -> Vec<u8> {
    let t = codes.len() / LEVELS;
    let mut header = Map::new();
    let mut meta = Map::new();
    meta.insert("format".into(), "pt".into());
    for (k, v) in metadata {
        meta.insert((*k).into(), v.clone().into());
    }
    header.insert("__metadata__".into(), Value::Object(meta));
    let codes_bytes = codes.len() * 4;
    header.insert(
        "codes".into(),
        json!({"dtype": "I32", "shape": [t, LEVELS], "data_offsets": [0, codes_bytes]}),
    );
    if let Some((bits, width)) = hiddens {
        let end = codes_bytes + bits.len() * 2;
        header.insert(
            "frame_hiddens".into(),
            json!({"dtype": "BF16", "shape": [t, width], "data_offsets": [codes_bytes, end]}),
        );
    }
    // A map of strings and integers always serialises.
    let mut head = Value::Object(header).to_string().into_bytes();
    while !head.len().is_multiple_of(HEADER_ALIGN) {
        head.push(b' ');
    }
    let body = codes_bytes + hiddens.map_or(0, |(b, _)| b.len() * 2);
    let mut out = Vec::with_capacity(8 + head.len() + body);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend(codes.iter().flat_map(|c| c.to_le_bytes()));
    if let Some((bits, _)) = hiddens {
        out.extend(bits.iter().flat_map(|b| b.to_le_bytes()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::checkpoint::{write_tensors, TensorData};

    #[test]
    fn bytes_equal_what_write_tensors_writes() {
        let codes: Vec<i32> = (0..3 * LEVELS as i32).collect();
        let bits: Vec<u16> = (0..3 * 16).map(|i| i as u16 * 7).collect();
        let meta = [
            ("seed", "5".to_string()),
            ("sampling", "greedy".to_string()),
        ];
        let path = std::env::temp_dir().join(format!(
            "chorus-music-st-{}.safetensors",
            std::process::id()
        ));
        let tensors = [
            (
                "codes".to_string(),
                TensorData::I32 {
                    shape: vec![3, LEVELS],
                    data: &codes,
                },
            ),
            (
                "frame_hiddens".to_string(),
                TensorData::Bf16Bits {
                    shape: vec![3, 16],
                    bits: &bits,
                },
            ),
        ];
        write_tensors(&path, &tensors, &meta).unwrap();
        let want = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(song_safetensors(&codes, Some((&bits, 16)), &meta), want);
    }
}
