//! Seeded random weights of csm-1b's architecture (`random`) or the small one (`random-small`),
//! drawn from [`tensor_specs`] under HF names, bit-identical to `tools/fixtures/csm_weights.py`.
//!
//! Element `i` of tensor `name` is `u * scale + offset` in f32 with `u` from
//! [`chorus_core::rng::uniform_range`] (the splitmix64 stream of weightgen.py). `(scale, offset)`
//! by role, scales computed in f64 and rounded once to f32:
//!
//! | role | scale, offset |
//! |---|---|
//! | text embeddings | 1.0, 0 |
//! | audio table (one draw, tied) | 0.5, 0: a frame's sum of one row per codebook has std 0.29 sqrt(codebooks) |
//! | RMSNorm weights | 0.1, 1.0 |
//! | linears `[out, in]` | `sqrt(3 / in)`, 0 (unit variance in, unit variance out) |
//! | `lm_head`, `codebooks_head` | `2 sqrt(3 / in)`, 0 (`in` = hidden: logits of std ~2) |
//!
//! [`RandomOptions::zero_gains`] multiply, after the draw, the weights of code `codebook_eos`'s
//! logit at each level: entry 0 `lm_head` row `codebook_eos`, entry `l >= 1` column
//! `codebook_eos` of `codebooks_head[l - 1]`. With signs matched to each level's hidden states
//! they make the all-0 EOS frame likely (the oracle's stop case; random weights never draw it). Each tensor is drawn when it is loaded, so the full model is held
//! once (by [`CsmWeights`]).

use std::collections::HashMap;

use chorus_core::checkpoint::TensorSource;
use chorus_core::rng::{draw_rows, Init};
use chorus_core::{Error, HostTensor, Result};

use crate::config::CsmConfig;
use crate::weights::{tensor_specs, CsmWeights, Role, CODEBOOKS_HEAD, LM_HEAD};

/// Seed of the `random` and `random-small` specs ("csm-rand").
pub const RANDOM_CSM_SEED: u64 = 0x6373_6d2d_7261_6e64;
/// Scale of the audio table: a frame sums one row per codebook.
pub const AUDIO_EMBED_SCALE: f64 = 0.5;
/// Gain of the heads over a unit-variance init.
pub const HEAD_GAIN: f64 = 2.0;

/// How the random weights are drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomOptions {
    pub seed: u64,
    /// Per level (0 = codebook 0), the factor of the weights of code `codebook_eos`'s logit;
    /// empty leaves every head as drawn, else one entry per codebook.
    pub zero_gains: Vec<f32>,
}

impl Default for RandomOptions {
    fn default() -> Self {
        Self {
            seed: RANDOM_CSM_SEED,
            zero_gains: Vec::new(),
        }
    }
}

/// The init of a tensor of role `role` and shape `shape` (module doc).
pub fn init_for(role: Role, shape: &[usize]) -> Init {
    let scaled = |s: f64, offset: f32| Init {
        scale: s as f32,
        offset,
    };
    // [out, in] linears and lm_head [vocab, in]; codebooks_head [levels, in, vocab].
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
    opts: RandomOptions,
    eos: usize,
    name: String,
    specs: HashMap<String, (Vec<usize>, Role)>,
}

impl RandomSource {
    /// The source of `c`'s tensors under `opts`; `zero_gains` must be empty or hold one entry
    /// per codebook.
    pub fn new(c: &CsmConfig, opts: RandomOptions) -> Result<Self> {
        if !opts.zero_gains.is_empty() && opts.zero_gains.len() != c.num_codebooks {
            return Err(Error::input(
                "RandomSource::new",
                format!(
                    "{} zero gains for {} codebooks",
                    opts.zero_gains.len(),
                    c.num_codebooks
                ),
            ));
        }
        let specs = tensor_specs(c)
            .into_iter()
            .map(|s| (s.name, (s.shape, s.role)))
            .collect();
        let gain = if opts.zero_gains.is_empty() {
            String::new()
        } else {
            format!(", EOS-code gains {:?}", opts.zero_gains)
        };
        Ok(Self {
            name: format!(
                "random weights (seed {:#x}{gain}): the speech is noise",
                opts.seed
            ),
            opts,
            eos: c.ids.codebook_eos as usize,
            specs,
        })
    }

    /// Rows `rows` of tensor `name` (its leading axis), drawn alone (the zero gain applied).
    pub fn rows(&self, name: &str, rows: std::ops::Range<usize>) -> Result<HostTensor> {
        let (shape, role) = self.spec(name)?;
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
        let first = rows.start;
        let data = draw_rows(
            self.opts.seed,
            name,
            rows.clone(),
            cols,
            init_for(role, &shape),
        );
        let mut out_shape = shape;
        out_shape[0] = rows.len();
        let mut t = HostTensor::new(out_shape, data)?;
        self.scale_eos(name, first, &mut t);
        Ok(t)
    }

    fn spec(&self, name: &str) -> Result<(Vec<usize>, Role)> {
        self.specs
            .get(name)
            .cloned()
            .ok_or_else(|| Error::MissingTensor {
                op: "RandomSource::load",
                name: name.into(),
                source_name: self.name.clone(),
            })
    }

    /// Applies [`RandomOptions::zero_gains`] to drawn head rows starting at row `first`.
    fn scale_eos(&self, name: &str, first: usize, t: &mut HostTensor) {
        let gains = &self.opts.zero_gains;
        if gains.is_empty() {
            return;
        }
        if name == LM_HEAD {
            let h = t.shape[1];
            if let Some(r) = self.eos.checked_sub(first).filter(|&r| r < t.shape[0]) {
                for x in &mut t.data[r * h..(r + 1) * h] {
                    *x *= gains[0];
                }
            }
        } else if name == CODEBOOKS_HEAD {
            let v = t.shape[2];
            let level_len = t.shape[1] * v;
            for (i, level) in t.data.chunks_mut(level_len).enumerate() {
                let g = gains[first + i + 1];
                for x in level.iter_mut().skip(self.eos).step_by(v) {
                    *x *= g;
                }
            }
        }
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
        let rows = self.spec(name)?.0[0];
        self.rows(name, 0..rows)
    }
}

/// The random weights of `c` (each tensor drawn once, straight into its place).
pub fn random_weights(c: &CsmConfig, opts: RandomOptions) -> Result<CsmWeights> {
    CsmWeights::from_source(c, &RandomSource::new(c, opts)?)
}
