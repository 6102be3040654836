//! The Mimi encoder inside the STT step: each stream's 80 ms of PCM becomes its 32 codes in the
//! same program as the LM step (one graph replay per bucket on CUDA), so codes never reach the
//! host before the text token they feed.
//!
//! Each stream's encoder state (conv histories, transformer ring, position) lives in the row of
//! its stage slot and is zeroed when a stream takes the slot; padding and a stream's position 0
//! (the initial codes, no audio) run on the dummy row.

use chorus_core::{Backend, Error, Result, StagingDims, FRAME_SAMPLES};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::decoder::ring_for;
use chorus_mimi::encoder::prepare::{prepare_encoder, PreparedEncoder};
use chorus_mimi::encoder::program::{encode_step, EncActivations, EncShape, EncodeStep};
use chorus_mimi::encoder::state::EncoderState;
use chorus_mimi::MimiConfig;

/// Mimi's encoder weights, per-slot state and activations on the stage's backend.
pub struct MimiEncode<B: Backend> {
    pub cfg: MimiConfig,
    w: PreparedEncoder<B>,
    state: EncoderState<B>,
    acts: EncActivations<B>,
    /// The dummy row (`max_slots`).
    dummy: usize,
}

impl<B: Backend> MimiEncode<B> {
    /// Uploads `m`'s encoder for `max_slots` slots (plus the dummy) and steps of up to `rows`
    /// rows; the STT model reads `codebooks` codes of `cardinality` values per frame.
    pub fn new(
        be: &B,
        m: &LoadedModel,
        (codebooks, cardinality): (usize, usize),
        max_slots: usize,
        rows: usize,
    ) -> Result<Self> {
        const OP: &str = "MimiEncode::new";
        let cfg = m.config.clone();
        cfg.validate()?;
        if codebooks > cfg.num_quantizers || cfg.codebook_size != cardinality {
            return Err(Error::config(
                OP,
                format!(
                    "the STT model reads {codebooks} codebooks of {cardinality} codes, the Mimi \
                     model `{}` has {} of {}",
                    m.source, cfg.num_quantizers, cfg.codebook_size
                ),
            ));
        }
        if cfg.audio_channels != 1 {
            return Err(Error::config(
                OP,
                format!("the Mimi model `{}` is not mono", m.source),
            ));
        }
        let w = prepare_encoder(be, &cfg, &m.weights)?;
        let ring = ring_for(cfg.sliding_window, cfg.frame_tokens());
        let state = EncoderState::new(be, &cfg, &w, max_slots, ring)?;
        let acts = EncActivations::new(be, &cfg, &w, rows)?;
        Ok(Self {
            cfg,
            w,
            state,
            acts,
            dummy: max_slots,
        })
    }

    /// One bucket's staging area: slots, code requests and PCM in, codes out.
    pub fn staging(&self, be: &B, rows: usize) -> Result<B::Staging> {
        be.staging(StagingDims {
            rows,
            codebooks: self.cfg.num_quantizers,
            latent_dim: self.cfg.hidden_size,
            samples: FRAME_SAMPLES,
        })
    }

    /// Program op: zeroes the state of the slots listed in `list[..count]` (the slots a step
    /// admits; see [`chorus_core::ResetRowsArgs`]).
    pub fn reset_listed(&mut self, be: &B, list: &B::Ints, count: usize) -> Result<()> {
        self.state.reset_listed(be, list, count)
    }

    /// Program op sequence: encodes the staged frame of each of `rows` rows; returns the
    /// `[rows, num_quantizers]` codes (levels not requested hold `NO_CODE`).
    pub fn step(&mut self, be: &B, staging: &B::Staging, rows: usize) -> Result<&B::Ints> {
        let a = &mut self.acts;
        be.stage_in_audio(staging, &mut a.slots, &mut a.codes, &mut a.pcm)?;
        let step = EncodeStep {
            weights: &self.w,
            state: &mut self.state,
            acts: &mut *a,
        };
        let shape = EncShape {
            cfg: &self.cfg,
            rows,
            frames: 1,
            dummy: self.dummy,
        };
        encode_step(be, &shape, step)?;
        Ok(&self.acts.codes)
    }
}
