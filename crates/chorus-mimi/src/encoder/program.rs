//! The encode step as a program of backend ops, and the activations it runs over.
//!
//! Order as transformers `MimiModel._encode_frame`: SEANet encoder, encoder transformer,
//! downsample, split RVQ. Activations are sized for the largest bucket and shared by all.

use super::prepare::PreparedEncoder;
use super::state::EncoderState;
use crate::program::{conv, res_block, Rows};
use crate::transformer::{run_layers, LayerActs, LayerStep};
use crate::MimiConfig;
use chorus_core::{Backend, BufRole, ReplicateArgs, Result, RvqEncodeArgs, FRAME_SAMPLES};

/// Buffers of one encoder stage at its input rate.
pub struct EncStageActs<B: Backend> {
    pub hidden: B::Buf,
    /// Each residual block's output `[rows, time, c]`.
    pub out: Vec<B::Buf>,
    /// The strided conv's output `[rows, time / stride, 2c]`.
    pub down: B::Buf,
    /// Input time steps per row.
    pub time: usize,
}

/// Every intermediate of one encode step for `rows` row-frames (rows times frames per row).
pub struct EncActivations<B: Backend> {
    pub slots: B::Ints,
    pub codes: B::Ints,
    pub pcm: B::Buf,
    pub conv_in: B::Buf,
    pub stages: Vec<EncStageActs<B>>,
    /// Transformer activations over `rows * frame_tokens` tokens (the last conv writes `h`).
    pub layers: LayerActs<B>,
    /// `[rows, hidden]` pre-quantisation latents.
    pub latent: B::Buf,
}

impl<B: Backend> EncActivations<B> {
    /// Allocates buffers for up to `rows` row-frames (per-frame sizes times `rows`).
    pub fn new(be: &B, cfg: &MimiConfig, w: &PreparedEncoder<B>, rows: usize) -> Result<Self> {
        let a = |n: usize| be.zeros(rows * n, BufRole::Activation);
        let (hid, tok) = (cfg.hidden_size, cfg.frame_tokens());
        let mut time = FRAME_SAMPLES;
        let mut stages = Vec::with_capacity(w.stages.len());
        for s in &w.stages {
            let c = s.down.c_in / s.stride;
            let hidden_c = s.resblocks.first().map_or(0, |b| b.conv1.c_out);
            stages.push(EncStageActs {
                hidden: a(time * hidden_c)?,
                out: (0..s.resblocks.len())
                    .map(|_| a(time * c))
                    .collect::<Result<Vec<_>>>()?,
                down: a(time / s.stride * s.down.c_out)?,
                time,
            });
            time /= s.stride;
        }
        Ok(Self {
            slots: be.ints(rows, 0)?,
            codes: be.ints(rows * cfg.num_quantizers, 0)?,
            pcm: a(FRAME_SAMPLES * cfg.audio_channels)?,
            conv_in: a(FRAME_SAMPLES * w.conv_in.c_out)?,
            stages,
            layers: LayerActs::new(be, cfg, rows * tok)?,
            latent: a(hid)?,
        })
    }
}

/// Everything one encode program run reads and writes.
pub struct EncStepBuffers<'s, B: Backend> {
    pub weights: &'s PreparedEncoder<B>,
    pub state: &'s mut EncoderState<B>,
    pub acts: &'s mut EncActivations<B>,
    pub staging: &'s mut B::Staging,
}

/// What one encode program run needs besides buffers.
pub struct EncShape<'c> {
    pub cfg: &'c MimiConfig,
    pub rows: usize,
    /// Consecutive frames of each row encoded in this step (time runs inside the step: every
    /// convolution sees `frames` times the samples with its history, the attention is causal
    /// over the step's tokens within the window).
    pub frames: usize,
    pub dummy: usize,
}

/// Runs (or records) one encode step for `shape.rows` rows of `shape.frames` frames each.
pub fn encode_forward<B: Backend>(
    be: &B,
    shape: &EncShape<'_>,
    bufs: EncStepBuffers<'_, B>,
) -> Result<()> {
    let EncStepBuffers {
        weights,
        state,
        acts,
        staging,
    } = bufs;
    be.stage_in_audio(staging, &mut acts.slots, &mut acts.codes, &mut acts.pcm)?;
    let step = EncodeStep {
        weights,
        state,
        acts: &mut *acts,
    };
    encode_step(be, shape, step)?;
    be.stage_out_codes(&acts.codes, &acts.latent, staging)
}

/// What [`encode_step`] reads and writes, all on the device.
pub struct EncodeStep<'s, B: Backend> {
    pub weights: &'s PreparedEncoder<B>,
    pub state: &'s mut EncoderState<B>,
    /// In: `slots` (`[rows]`, padding on the dummy row), `codes` (`[rows, num_quantizers]` code
    /// requests, see [`chorus_core::RvqEncodeArgs`]) and `pcm` (`[rows, frames * FRAME_SAMPLES]`). Out:
    /// `codes` and `latent`.
    pub acts: &'s mut EncActivations<B>,
}

/// Program op sequence: one encode step for `shape.rows` rows of `shape.frames` frames over
/// device buffers, for programs that feed the codes to further ops (the STT frame) without a host
/// trip.
pub fn encode_step<B: Backend>(
    be: &B,
    shape: &EncShape<'_>,
    step: EncodeStep<'_, B>,
) -> Result<()> {
    let (cfg, rows, frames, dummy) = (shape.cfg, shape.rows, shape.frames, shape.dummy);
    let EncodeStep {
        weights: w,
        state: st,
        acts: a,
    } = step;
    let r = Rows {
        be,
        slots: &a.slots,
        rows,
    };
    conv(
        &r,
        &w.conv_in,
        st.conv_in.as_mut(),
        (&a.pcm, &mut a.conv_in, None),
        (FRAME_SAMPLES * frames, false),
    )?;
    for (i, sw) in w.stages.iter().enumerate() {
        let (done, rest) = a.stages.split_at_mut(i);
        let input = done.last().map_or(&a.conv_in, |prev| &prev.down);
        let sa = &mut rest[0];
        let time = sa.time * frames;
        for (j, b) in sw.resblocks.iter().enumerate() {
            let (before, after) = sa.out.split_at_mut(j);
            let x = before.last().unwrap_or(input);
            let hist = st.res_history[i][j].as_mut();
            res_block(&r, b, hist, (x, &mut sa.hidden, &mut after[0]), time)?;
        }
        let x = sa.out.last().unwrap_or(input);
        conv(
            &r,
            &sw.down,
            st.down[i].as_mut(),
            (x, &mut sa.down, None),
            (time / sw.stride, true),
        )?;
    }
    let last = a.stages.last().map_or(&a.conv_in, |s| &s.down);
    let tok = cfg.frame_tokens() * frames;
    conv(
        &r,
        &w.conv_out,
        st.conv_out.as_mut(),
        (last, &mut a.layers.h, None),
        (tok, true),
    )?;
    let step = LayerStep {
        cfg,
        rows,
        time: tok,
        ring: st.ring,
        slots: &a.slots,
        tokens: &st.tokens,
    };
    run_layers(be, &step, &w.layers, &mut st.kv, &mut a.layers)?;
    // A fresh slot's downsample history is its first token, repeated (replicate padding).
    if let Some(hist) = st.downsample.as_mut() {
        be.replicate_history(ReplicateArgs {
            x: &a.layers.h,
            state: &mut hist.buf,
            tokens: &st.tokens,
            slots: &a.slots,
            rows,
            time: tok,
            channels: cfg.hidden_size,
            history: (w.downsample.kernel - 1) * w.downsample_stride,
        })?;
    }
    be.advance_tokens(&mut st.tokens, &a.slots, rows, tok as i32, dummy)?;
    let r = Rows {
        be,
        slots: &a.slots,
        rows,
    };
    conv(
        &r,
        &w.downsample,
        st.downsample.as_mut(),
        (&a.layers.h, &mut a.latent, None),
        (tok / w.downsample_stride, false),
    )?;
    be.rvq_encode(RvqEncodeArgs {
        x: &a.latent,
        proj: &w.proj,
        codebooks: &w.codebooks,
        norms: &w.norms,
        codes: &mut a.codes,
        rows: rows * frames,
        dim: cfg.hidden_size,
        cb_dim: cfg.codebook_dim,
        card: cfg.codebook_size,
        books: cfg.num_quantizers,
        semantic_books: cfg.num_semantic_quantizers,
    })
}
