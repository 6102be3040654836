//! The transformers oracle fixtures (`tests/fixtures/`, made by `tools/fixtures/make_fixtures.py`):
//! loading them, rebuilding their seeded weights through a real checkpoint file of the case's
//! layout, and decoding them frame by frame through a slot decoder on any backend. The CPU and
//! CUDA exactness tests share it.

use crate::checkpoint::{load_model, write_safetensors, Dtype, Layout, LoadedModel};
use crate::{MimiConfig, SlotDecoder};
use chorus_core::codes::{decode_streams, StreamCodes};
use chorus_core::npy::{read_npy, NpyArray, NpyData};
use chorus_core::{Error, LmOps, Result, FRAME_SAMPLES};
use std::path::{Path, PathBuf};

const OP: &str = "oracle";

/// One fixture: codes `[n_q, frames]` and the oracle's PCM `[frames * 1920]`.
pub struct OracleCase {
    pub name: String,
    pub n_q: usize,
    pub frames: usize,
    pub codes: Vec<u32>,
    pub pcm: Vec<f32>,
}

/// `CHORUS_FIXTURES`, else the checkout's `tests/fixtures`, else `tests/fixtures` under the
/// working directory (where binaries copied to another machine run from the repository root).
pub fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CHORUS_FIXTURES") {
        return PathBuf::from(dir);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    if built.join("manifest.json").exists() {
        built
    } else {
        PathBuf::from("tests/fixtures")
    }
}

fn manifest_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Kyutai => "kyutai",
        _ => "hf",
    }
}

fn read(dir: &Path, name: &str) -> Result<NpyArray> {
    let path = dir.join(name);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(OP, path.display().to_string(), e))?;
    read_npy(&bytes, &path.display().to_string())
}

/// The weight seed and every case of `layout` in the manifest.
pub fn load_cases(dir: &Path, layout: Layout) -> Result<(u64, Vec<OracleCase>)> {
    let path = dir.join("manifest.json");
    let text = std::fs::read(&path).map_err(|e| Error::io(OP, path.display().to_string(), e))?;
    let bad = |reason: String| Error::Format {
        op: OP,
        path: path.display().to_string(),
        reason,
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let (mut seed, mut out) = (None, Vec::new());
    for c in manifest["cases"]
        .as_array()
        .ok_or_else(|| bad("no cases".into()))?
    {
        if c["layout"] != manifest_name(layout) {
            continue;
        }
        seed = c["weight_seed"].as_u64();
        let field = |k: &str| {
            c[k].as_str()
                .ok_or_else(|| bad(format!("case without `{k}`")))
        };
        let codes = read(dir, field("codes")?)?;
        let pcm = read(dir, field("pcm")?)?;
        let (NpyData::Int(values), NpyData::Float(pcm)) = (codes.data, pcm.data) else {
            return Err(bad("codes must be integers and pcm floats".into()));
        };
        let [n_q, frames] = codes.shape[..] else {
            return Err(bad(format!(
                "codes of shape {:?}, expected [n_q, T]",
                codes.shape
            )));
        };
        if pcm.len() != frames * FRAME_SAMPLES {
            return Err(bad(format!(
                "pcm holds {} samples for {frames} frames",
                pcm.len()
            )));
        }
        out.push(OracleCase {
            name: field("case")?.to_string(),
            n_q,
            frames,
            codes: values.iter().map(|&v| v as u32).collect(),
            pcm,
        });
    }
    let seed = seed.ok_or_else(|| bad(format!("no {} case", manifest_name(layout))))?;
    Ok((seed, out))
}

/// The fixtures' weights, written as an f32 checkpoint in `layout` and loaded back through
/// [`load_model`], so that the loader of that layout is part of what is checked.
pub fn model_for(layout: Layout, seed: u64) -> Result<LoadedModel> {
    let cfg = MimiConfig::default();
    let dir = std::env::temp_dir().join(format!(
        "chorus-oracle-{}-{}",
        manifest_name(layout),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(OP, dir.display().to_string(), e))?;
    let file = dir.join("model.safetensors");
    let written = write_safetensors(
        &file,
        &crate::random::random_tensors(&cfg, seed, layout),
        Dtype::F32,
    );
    let model = written.and_then(|()| load_model(&file.display().to_string()));
    std::fs::remove_dir_all(&dir).ok();
    model
}

/// Decodes every case side by side (case i in slot i, its own n_q) for as many frames as the
/// shortest has; returns each case's PCM.
pub fn decode_cases<B: LmOps>(
    dec: &mut SlotDecoder<B>,
    cases: &[OracleCase],
) -> Result<Vec<Vec<f32>>> {
    let streams: Vec<StreamCodes<'_>> = cases
        .iter()
        .map(|c| StreamCodes {
            n_q: c.n_q,
            frames: c.frames,
            codes: &c.codes,
        })
        .collect();
    decode_streams(dec, &streams, || ())
}

/// Relative L2 error of `got` against `want`, in f64.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        num += (*g as f64 - *w as f64).powi(2);
        den += (*w as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}
