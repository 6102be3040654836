//! The Mimi decoder inside the frame program: the frame's codes, as the draws left them on the
//! device, become its 1,920 samples per utterance in the same program (one graph replay per
//! frame on CUDA), so codes never reach the host before their PCM does.
//!
//! Each utterance's decoder state lives in its own slot (the stage's slot numbering, the dummy
//! slot for padding) and is zeroed when an utterance takes the slot. A drawn class past Mimi's
//! codebook (2048..2050 of CSM's 2051, which neither reference masks) adds nothing to the frame.

use chorus_core::{BufRole, Error, LmOps, Result};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::decoder::ring_for;
use chorus_mimi::prepare::{prepare, PreparedWeights};
use chorus_mimi::program::{decode_step, StepInputs, StepShape, Work};
use chorus_mimi::state::SlotState;
use chorus_mimi::MimiConfig;

/// Mimi's weights, per-slot state and work buffers on the stage's backend.
pub struct MimiStep<B: LmOps> {
    pub cfg: MimiConfig,
    w: PreparedWeights<B>,
    state: SlotState<B>,
    work: Work<B>,
    /// `[largest bucket, hidden]` zeros: the latents added to the codes' embedding.
    zeros: B::Buf,
    max_slots: usize,
}

impl<B: LmOps> MimiStep<B> {
    /// Uploads `m` for `max_slots` slots (plus the dummy) and steps of up to `rows` rows; CSM's
    /// `codebooks` must be at most Mimi's quantizers.
    pub fn new(
        be: &B,
        m: &LoadedModel,
        codebooks: usize,
        max_slots: usize,
        rows: usize,
    ) -> Result<Self> {
        let cfg = m.config.clone();
        cfg.validate()?;
        if codebooks > cfg.num_quantizers {
            return Err(Error::config(
                "MimiStep::new",
                format!(
                    "the speech model draws {codebooks} codebooks, the Mimi model `{}` has {}",
                    m.source, cfg.num_quantizers
                ),
            ));
        }
        let w = prepare(be, &cfg, &m.weights)?;
        let ring = ring_for(cfg.sliding_window, cfg.frame_tokens());
        let state = SlotState::new(be, &cfg, &w, max_slots, ring)?;
        let work = Work::new(be, &cfg, &w, rows)?;
        let zeros = be.zeros(rows * cfg.hidden_size, BufRole::Activation)?;
        Ok(Self {
            cfg,
            w,
            state,
            work,
            zeros,
            max_slots,
        })
    }

    /// Zeroes slot `slot`'s state (outside programs, no host sync): a new utterance starts from
    /// silence.
    pub fn reset(&mut self, be: &B, slot: usize) -> Result<()> {
        self.state.reset_row(be, slot)
    }

    /// Program op: decodes one frame for `rows` rows (`slots`, `[rows, codebooks]` codes) into
    /// `[rows, FRAME_SAMPLES]` PCM (24 kHz), returned for the caller to copy out.
    pub fn step(
        &mut self,
        be: &B,
        slots: &B::Ints,
        codes: &B::Ints,
        codebooks: usize,
        rows: usize,
    ) -> Result<&B::Buf> {
        let shape = StepShape {
            cfg: &self.cfg,
            rows,
            frames: 1,
            dummy: self.max_slots,
        };
        let input = StepInputs {
            slots,
            codes,
            codebooks,
            latents: &self.zeros,
        };
        decode_step(be, &shape, &self.w, &mut self.state, input, &mut self.work)?;
        Ok(&self.work.pcm)
    }
}
