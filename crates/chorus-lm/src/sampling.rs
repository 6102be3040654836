//! How a request's codes are drawn: the user-facing modes and the draw op's mode and seed.

use chorus_core::lm_ops::DrawMode;
use chorus_core::rng::mix64;
use chorus_core::{Error, Result};

/// Mixed into a user's seed for `seeded` sampling, so that nearby seeds give unrelated
/// outputs.
const SEEDED_DOMAIN: u64 = 0x6368_6f72_7573_2d73;

/// How a request's codes are drawn (a song's, an utterance's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// The exponential race with counter-based noise from a hashed seed: the same noise on every
    /// backend and in any batch (bit-identical across batches on the CPU backend;
    /// on CUDA, bf16 rounding and batch-dependent products may flip near-ties).
    Seeded(u64),
    /// The largest value, after guidance where the model has it (lowest index on ties).
    Greedy,
    /// The exponential race with the oracle's noise `exp_noise(seed, d, i)` for draw `d` (the
    /// model numbers its draws: `draws_per_frame * f + level`), draw by draw.
    Noise(u64),
}

impl Sampling {
    /// Parses `seeded`, `greedy` or `noise` with a seed.
    pub fn parse(mode: &str, seed: u64) -> Result<Self> {
        match mode {
            "seeded" => Ok(Self::Seeded(seed)),
            "greedy" => Ok(Self::Greedy),
            "noise" => Ok(Self::Noise(seed)),
            other => Err(Error::input(
                "Sampling::parse",
                format!("unknown sampling mode `{other}` (expected seeded, greedy or noise)"),
            )),
        }
    }

    /// The draw op's mode and 64-bit noise seed.
    pub fn device(self) -> (DrawMode, u64) {
        match self {
            Self::Seeded(s) => (DrawMode::Noise, mix64(s ^ SEEDED_DOMAIN)),
            Self::Greedy => (DrawMode::Greedy, 0),
            Self::Noise(s) => (DrawMode::Noise, s),
        }
    }
}
