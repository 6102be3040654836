//! A hand-written FLAC of digital silence, shared with the server's hostile-client tests
//! (`crates/chorus-server/tests/hostile.rs` includes this file by path).

/// Frames per FLAC block of `silent_flac`: the largest block STREAMINFO can declare.
pub const FLAC_BLOCK: u32 = 65_535;

/// A 16-bit mono FLAC of `blocks` blocks of `FLAC_BLOCK` frames of digital silence at `rate`,
/// written by hand: each block is one CONSTANT subframe, 13 bytes or so for 65 535 frames, so
/// hours of audio take a few hundred kilobytes (the hostile upload the length limit is for).
pub fn silent_flac(rate: u32, blocks: u32) -> Vec<u8> {
    let total = u64::from(blocks) * u64::from(FLAC_BLOCK);
    let mut out = b"fLaC".to_vec();
    // Metadata block header: last block, type 0 (STREAMINFO), 34 bytes.
    out.extend_from_slice(&[0x80, 0, 0, 34]);
    out.extend_from_slice(&(FLAC_BLOCK as u16).to_be_bytes()); // min block size
    out.extend_from_slice(&(FLAC_BLOCK as u16).to_be_bytes()); // max block size
    out.extend_from_slice(&[0; 6]); // min and max frame size: unknown
                                    // 20 bits rate, 3 bits channels - 1, 5 bits bits-per-sample - 1, 36 bits total frames.
    let packed = (u64::from(rate) << 44) | (15u64 << 36) | total;
    out.extend_from_slice(&packed.to_be_bytes());
    out.extend_from_slice(&[0; 16]); // MD5: unknown
    for n in 0..blocks {
        let start = out.len();
        // Sync, fixed block size; block size from the end of the header (0b0111), rate from
        // STREAMINFO (0b0000); mono, 16 bits.
        out.extend_from_slice(&[0xff, 0xf8, 0x70, 0x08]);
        push_flac_utf8(&mut out, n);
        out.extend_from_slice(&((FLAC_BLOCK - 1) as u16).to_be_bytes());
        let crc8 = flac_crc8(&out[start..]);
        out.push(crc8);
        // CONSTANT subframe (type 0, no wasted bits) of value 0.
        out.extend_from_slice(&[0, 0, 0]);
        let crc16 = flac_crc16(&out[start..]);
        out.extend_from_slice(&crc16.to_be_bytes());
    }
    out
}

/// FLAC's UTF-8-style frame number.
fn push_flac_utf8(out: &mut Vec<u8>, n: u32) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0x7ff => out.extend_from_slice(&[0xc0 | (n >> 6) as u8, 0x80 | (n & 0x3f) as u8]),
        0x800..=0xffff => out.extend_from_slice(&[
            0xe0 | (n >> 12) as u8,
            0x80 | ((n >> 6) & 0x3f) as u8,
            0x80 | (n & 0x3f) as u8,
        ]),
        _ => out.extend_from_slice(&[
            0xf0 | (n >> 18) as u8,
            0x80 | ((n >> 12) & 0x3f) as u8,
            0x80 | ((n >> 6) & 0x3f) as u8,
            0x80 | (n & 0x3f) as u8,
        ]),
    }
}

/// CRC-8 of a FLAC frame header (polynomial 0x07, initial 0).
fn flac_crc8(data: &[u8]) -> u8 {
    data.iter().fold(0u8, |mut crc, &b| {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ 0x07
            } else {
                crc << 1
            };
        }
        crc
    })
}

/// CRC-16 of a FLAC frame (polynomial 0x8005, initial 0).
fn flac_crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |mut crc, &b| {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8005
            } else {
                crc << 1
            };
        }
        crc
    })
}
