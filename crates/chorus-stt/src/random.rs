//! Seeded random weights of stt-1b-en_fr's architecture (`random`), stt-2.6b-en's
//! (`random-2.6b`) or the small one (`random-small`), drawn from [`tensor_specs`] under Kyutai's
//! names, bit-identical to `tools/fixtures/stt_weights.py`.
//!
//! Element `i` of tensor `name` is `u * scale + offset` in f32 with `u` from
//! [`chorus_core::rng::uniform_range`] (the splitmix64 stream of weightgen.py). `(scale, offset)`
//! by role, scales computed in f64 and rounded once to f32:
//!
//! | role | scale, offset |
//! |---|---|
//! | text table | 1.0, 0 |
//! | audio tables | 0.5, 0: a frame's sum of one row per codebook has std 0.29 sqrt(codebooks) |
//! | RMSNorm gains | 0.1, 1.0 (away from 1, so a missing gain shows) |
//! | linears `[out, in]` | `sqrt(3 / in)`, 0 (unit variance in, unit variance out) |
//! | text head, VAD heads | `2 sqrt(3 / in)`, 0 (logits of std ~2) |
//!
//! Each tensor is drawn when it is loaded, so the full model is held once (by [`SttWeights`]).

use std::collections::HashMap;

use chorus_core::checkpoint::TensorSource;
use chorus_core::rng::{draw_rows, Init};
use chorus_core::{Error, HostTensor, Result};

use crate::config::SttConfig;
use crate::weights::{tensor_specs, Role, SttWeights};

/// Seed of the random specs ("stt-rand").
pub const RANDOM_STT_SEED: u64 = 0x7374_742d_7261_6e64;
/// Scale of the audio tables: a frame sums one row per codebook.
pub const AUDIO_EMBED_SCALE: f64 = 0.5;
/// Gain of the heads over a unit-variance init.
pub const HEAD_GAIN: f64 = 2.0;

/// The init of a tensor of role `role` and shape `shape` (module doc).
pub fn init_for(role: Role, shape: &[usize]) -> Init {
    let scaled = |s: f64, offset: f32| Init {
        scale: s as f32,
        offset,
    };
    let fan_in = shape.get(1).copied().unwrap_or(1).max(1) as f64;
    match role {
        Role::TextEmbedding => scaled(1.0, 0.0),
        Role::AudioEmbedding => scaled(AUDIO_EMBED_SCALE, 0.0),
        Role::Norm => scaled(0.1, 1.0),
        // Uniform [-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) preserves unit variance.
        Role::Linear => scaled((3.0 / fan_in).sqrt(), 0.0),
        Role::Head => scaled(HEAD_GAIN * (3.0 / fan_in).sqrt(), 0.0),
    }
}

/// A tensor source that draws each tensor of [`tensor_specs`] when it is loaded.
pub struct RandomSource {
    seed: u64,
    name: String,
    specs: HashMap<String, (Vec<usize>, Role)>,
}

impl RandomSource {
    pub fn new(c: &SttConfig, seed: u64) -> Self {
        Self {
            seed,
            name: format!("random weights (seed {seed:#x}): the text is noise"),
            specs: tensor_specs(c)
                .into_iter()
                .map(|s| (s.name, (s.shape, s.role)))
                .collect(),
        }
    }

    /// Rows `rows` of tensor `name` (its leading axis), drawn alone.
    pub fn rows(&self, name: &str, rows: std::ops::Range<usize>) -> Result<HostTensor> {
        let (shape, role) = self
            .specs
            .get(name)
            .cloned()
            .ok_or_else(|| Error::MissingTensor {
                op: "RandomSource::load",
                name: name.into(),
                source_name: self.name.clone(),
            })?;
        if rows.start > rows.end || rows.end > shape[0] {
            return Err(Error::input(
                "RandomSource::rows",
                format!(
                    "rows {rows:?} of `{name}` are outside its {} rows",
                    shape[0]
                ),
            ));
        }
        let cols = shape.iter().skip(1).product::<usize>();
        let data = draw_rows(self.seed, name, rows.clone(), cols, init_for(role, &shape));
        let mut out = shape;
        out[0] = rows.len();
        HostTensor::new(out, data)
    }
}

impl TensorSource for RandomSource {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.specs.keys().cloned().collect();
        n.sort();
        n
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.specs.get(name).map(|(s, _)| s.clone())
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let rows = self.shape(name).map_or(0, |s| s[0]);
        self.rows(name, 0..rows)
    }
}

/// The random weights of `c`.
pub fn random_weights(c: &SttConfig, seed: u64) -> Result<SttWeights> {
    SttWeights::from_source(c, &RandomSource::new(c, seed))
}
