//! The transformers encoder fixtures (`tests/fixtures/encoder/`, made by
//! `tools/fixtures/make_encoder_fixtures.py`): loading them, encoding them frame by frame through
//! any [`FrameEncoder`], and comparing codes level by level with the oracle's distance margins.

use crate::checkpoint::Layout;
use chorus_core::npy::{read_npy, NpyArray, NpyData};
use chorus_core::{AudioFrame, Error, FrameEncoder, Result, FRAME_SAMPLES};
use std::path::{Path, PathBuf};

const OP: &str = "oracle_encoder";

/// One fixture: 24 kHz audio, and the oracle's latents, codes and margins.
pub struct EncoderCase {
    pub name: String,
    pub layout: Layout,
    pub frames: usize,
    /// `[frames * 1920]`.
    pub audio: Vec<f32>,
    /// `[frames, hidden]`.
    pub latent: Vec<f32>,
    /// `[levels, frames]`.
    pub codes: Vec<u32>,
    /// `[levels, frames]`: distance to the second-nearest codeword less the nearest's.
    pub margins: Vec<f32>,
    pub levels: usize,
}

/// The encoder fixtures folder under [`crate::oracle::fixtures_dir`].
pub fn encoder_fixtures_dir() -> PathBuf {
    crate::oracle::fixtures_dir().join("encoder")
}

fn read(dir: &Path, name: &str) -> Result<NpyArray> {
    let path = dir.join(name);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(OP, path.display().to_string(), e))?;
    read_npy(&bytes, &path.display().to_string())
}

/// The weight seed and every case of the manifest.
pub fn load_encoder_cases(dir: &Path) -> Result<(u64, Vec<EncoderCase>)> {
    let path = dir.join("manifest.json");
    let text = std::fs::read(&path).map_err(|e| Error::io(OP, path.display().to_string(), e))?;
    let bad = |reason: String| Error::Format {
        op: OP,
        path: path.display().to_string(),
        reason,
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let seed = manifest["weight_seed"]
        .as_u64()
        .ok_or_else(|| bad("no weight_seed".into()))?;
    let mut out = Vec::new();
    for c in manifest["cases"]
        .as_array()
        .ok_or_else(|| bad("no cases".into()))?
    {
        let field = |k: &str| {
            c[k].as_str()
                .ok_or_else(|| bad(format!("case without `{k}`")))
        };
        let floats = |k: &str| -> Result<(Vec<usize>, Vec<f32>)> {
            let a = read(dir, field(k)?)?;
            match a.data {
                NpyData::Float(v) => Ok((a.shape, v)),
                NpyData::Int(_) => Err(bad(format!("{k} must be floats"))),
            }
        };
        let codes = read(dir, field("codes")?)?;
        let NpyData::Int(code_values) = codes.data else {
            return Err(bad("codes must be integers".into()));
        };
        let [levels, frames] = codes.shape[..] else {
            return Err(bad(format!(
                "codes of shape {:?}, expected [levels, T]",
                codes.shape
            )));
        };
        let (_, audio) = floats("audio")?;
        let (_, latent) = floats("latent")?;
        let (_, margins) = floats("margins")?;
        if audio.len() != frames * FRAME_SAMPLES || margins.len() != levels * frames {
            return Err(bad(format!(
                "{}: {} samples and {} margins for {frames} frames x {levels} levels",
                field("case")?,
                audio.len(),
                margins.len()
            )));
        }
        let layout = match field("layout")? {
            "kyutai" => Layout::Kyutai,
            _ => Layout::HuggingFace,
        };
        out.push(EncoderCase {
            name: field("case")?.to_string(),
            layout,
            frames,
            audio,
            latent,
            codes: code_values.iter().map(|&v| v as u32).collect(),
            margins,
            levels,
        });
    }
    Ok((seed, out))
}

/// What a case encodes to: codes `[frames, n_q]` and latents `[frames, hidden]`.
pub struct Encoded {
    pub codes: Vec<u32>,
    pub latents: Vec<f32>,
}

/// Encodes every case side by side (case i in slot i), frame by frame, with `n_q` levels.
pub fn encode_cases<E: FrameEncoder + ?Sized>(
    enc: &mut E,
    cases: &[&EncoderCase],
    n_q: usize,
) -> Result<Vec<Encoded>> {
    let (nq_max, dim) = (enc.max_codebooks(), enc.latent_dim());
    let frames = cases.iter().map(|c| c.frames).min().unwrap_or(0);
    let mut out: Vec<Encoded> = cases
        .iter()
        .map(|_| Encoded {
            codes: Vec::with_capacity(frames * n_q),
            latents: Vec::with_capacity(frames * dim),
        })
        .collect();
    let mut codes = vec![0u32; cases.len() * nq_max];
    let mut latents = vec![0f32; cases.len() * dim];
    for f in 0..frames {
        let step: Vec<AudioFrame<'_>> = cases
            .iter()
            .enumerate()
            .map(|(slot, c)| AudioFrame {
                slot,
                pcm: &c.audio[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
                n_q,
            })
            .collect();
        enc.step(&step, &mut codes, Some(&mut latents))?;
        for (i, o) in out.iter_mut().enumerate() {
            o.codes
                .extend_from_slice(&codes[i * nq_max..i * nq_max + n_q]);
            o.latents
                .extend_from_slice(&latents[i * dim..(i + 1) * dim]);
        }
    }
    Ok(out)
}

/// A code that differs from the oracle's, with the oracle's margin there.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub level: usize,
    pub frame: usize,
    pub got: u32,
    pub want: u32,
    pub margin: f32,
}

/// Per-level agreement of encoded codes `[frames, n_q]` with a case's.
pub struct Agreement {
    /// Identical codes per level, out of `frames`.
    pub identical: Vec<usize>,
    pub frames: usize,
    pub mismatches: Vec<Mismatch>,
}

impl Agreement {
    /// The lowest share of identical codes over the levels.
    pub fn worst_share(&self) -> f64 {
        self.identical
            .iter()
            .map(|&n| n as f64 / self.frames.max(1) as f64)
            .fold(1.0, f64::min)
    }
}

/// Compares `got` (`[frames, n_q]`) with the oracle's first `n_q` levels. A level below a
/// mismatch quantises a different residual, so only the first mismatch of a frame is listed.
pub fn compare_codes(case: &EncoderCase, got: &[u32], n_q: usize) -> Agreement {
    let frames = got.len() / n_q.max(1);
    let mut identical = vec![0usize; n_q];
    let mut mismatches = Vec::new();
    for f in 0..frames {
        let mut first = true;
        for (q, same) in identical.iter_mut().enumerate() {
            let want = case.codes[q * case.frames + f];
            let g = got[f * n_q + q];
            if g == want {
                *same += 1;
            } else if first {
                first = false;
                mismatches.push(Mismatch {
                    level: q,
                    frame: f,
                    got: g,
                    want,
                    margin: case.margins[q * case.frames + f],
                });
            }
        }
    }
    Agreement {
        identical,
        frames,
        mismatches,
    }
}
