//! The decode step as a program of backend ops, and the activation buffers it runs over.
//!
//! Activations are sized for the largest bucket and shared by every bucket (a smaller bucket
//! uses a prefix), so the memory of a decoder is one largest-bucket step plus the slot state.

use crate::prepare::{PreparedConv, PreparedConvTr, PreparedResBlock, PreparedUp, PreparedWeights};
use crate::state::{SlotState, StateBuf};
use crate::transformer::{run_layers, LayerActs, LayerStep};
use crate::MimiConfig;
use chorus_core::{
    Backend, BufRole, Conv1dArgs, Conv1dGeom, ConvTr1dArgs, ConvTr1dGeom, EmbedArgs, ResBlockArgs,
    ResBlockGeom, Result,
};

/// Buffers of one SEANet stage.
pub struct StageActs<B: Backend> {
    /// `[rows, time, c]`: transposed-conv output, then each residual block's output.
    pub up: B::Buf,
    pub hidden: B::Buf,
    pub out: Vec<B::Buf>,
    /// Time steps per row after this stage.
    pub time: usize,
}

/// Every intermediate of one step, for `rows` row-frames (rows times frames per row): the
/// staged inputs, then the work buffers.
pub struct Activations<B: Backend> {
    pub slots: B::Ints,
    pub codes: B::Ints,
    pub latents: B::Buf,
    pub work: Work<B>,
}

/// The buffers a decode step computes through, from the frame embedding to the PCM.
pub struct Work<B: Backend> {
    pub emb: B::Buf,
    /// Transformer activations over `rows * frame_tokens` tokens.
    pub layers: LayerActs<B>,
    pub conv_in: B::Buf,
    pub stages: Vec<StageActs<B>>,
    /// `[rows, samples]`.
    pub pcm: B::Buf,
}

impl<B: Backend> Work<B> {
    /// Allocates work buffers for up to `rows` row-frames.
    pub fn new(be: &B, cfg: &MimiConfig, w: &PreparedWeights<B>, rows: usize) -> Result<Self> {
        let a = |n: usize| be.zeros(rows * n, BufRole::Activation);
        let (hid, tok) = (cfg.hidden_size, cfg.frame_tokens());
        let mut time = tok;
        let mut stages = Vec::with_capacity(w.stages.len());
        for s in &w.stages {
            time *= s.convtr.stride();
            let c = s.convtr.c_out();
            let hidden_c = s.resblocks.first().map_or(0, |b| b.conv1.c_out);
            stages.push(StageActs {
                up: a(time * c)?,
                hidden: a(time * hidden_c)?,
                out: (0..s.resblocks.len())
                    .map(|_| a(time * c))
                    .collect::<Result<Vec<_>>>()?,
                time,
            });
        }
        Ok(Self {
            emb: a(hid)?,
            layers: LayerActs::new(be, cfg, rows * tok)?,
            conv_in: a(tok * w.conv_in.c_out)?,
            stages,
            pcm: a(time * w.conv_out.c_out)?,
        })
    }
}

impl<B: Backend> Activations<B> {
    /// Allocates buffers for up to `rows` row-frames.
    pub fn new(be: &B, cfg: &MimiConfig, w: &PreparedWeights<B>, rows: usize) -> Result<Self> {
        Ok(Self {
            slots: be.ints(rows, 0)?,
            codes: be.ints(rows * cfg.num_quantizers, 0)?,
            latents: be.zeros(rows * cfg.hidden_size, BufRole::Activation)?,
            work: Work::new(be, cfg, w, rows)?,
        })
    }
}

/// What one program run needs besides buffers.
pub struct StepShape<'c> {
    pub cfg: &'c MimiConfig,
    pub rows: usize,
    /// Consecutive frames of each row decoded in this step (time runs inside the step).
    pub frames: usize,
    pub dummy: usize,
}

/// Everything one program run reads and writes.
pub struct StepBuffers<'s, B: Backend> {
    pub weights: &'s PreparedWeights<B>,
    pub state: &'s mut SlotState<B>,
    pub acts: &'s mut Activations<B>,
    pub staging: &'s mut B::Staging,
}

/// The backend and the rows of a step, as every layer call needs them.
pub(crate) struct Rows<'r, B: Backend> {
    pub be: &'r B,
    pub slots: &'r B::Ints,
    pub rows: usize,
}

/// Runs (or records) one decode step for `shape.rows` rows from the staging area.
pub fn forward<B: Backend>(be: &B, shape: &StepShape<'_>, bufs: StepBuffers<'_, B>) -> Result<()> {
    let StepBuffers {
        weights: w,
        state: st,
        acts: a,
        staging,
    } = bufs;
    be.stage_in(staging, &mut a.slots, &mut a.codes, &mut a.latents)?;
    let input = StepInputs {
        slots: &a.slots,
        codes: &a.codes,
        codebooks: shape.cfg.num_quantizers,
        latents: &a.latents,
    };
    decode_step(be, shape, w, st, input, &mut a.work)?;
    be.stage_out(&a.work.pcm, staging)
}

/// A decode step's inputs on the device, written by the caller's own program (a speech model's
/// frame program hands its drawn codes straight to the decoder).
pub struct StepInputs<'a, B: Backend> {
    /// `[rows]`: each row's state slot (padding: the dummy slot).
    pub slots: &'a B::Ints,
    /// `[rows * frames, codebooks]`: codebook `q` of a row-frame is absent when negative or not
    /// below the codebook size (it adds nothing to the frame's embedding).
    pub codes: &'a B::Ints,
    /// Codes per row-frame (at most the model's quantizers).
    pub codebooks: usize,
    /// `[rows * frames, hidden]`: added to the codes' embedding (zeros for codes alone).
    pub latents: &'a B::Buf,
}

/// One decode step from device inputs into `work.pcm` (`[rows, frames * samples]`).
pub fn decode_step<B: Backend>(
    be: &B,
    shape: &StepShape<'_>,
    w: &PreparedWeights<B>,
    st: &mut SlotState<B>,
    input: StepInputs<'_, B>,
    a: &mut Work<B>,
) -> Result<()> {
    let (cfg, rows, frames) = (shape.cfg, shape.rows, shape.frames);
    let hid = cfg.hidden_size;
    // Codes and latents are `[rows, frames, ...]`: one embedding row per row-frame.
    be.embed_codes(EmbedArgs {
        codes: input.codes,
        table: &w.table,
        latents: input.latents,
        out: &mut a.emb,
        rows: rows * frames,
        codebooks: input.codebooks,
        cardinality: cfg.codebook_size,
        dim: hid,
    })?;
    let r = Rows {
        be,
        slots: input.slots,
        rows,
    };
    convtr(
        &r,
        &w.upsample,
        &mut st.upsample,
        (&a.emb, &mut a.layers.h),
        (frames, false),
    )?;
    transformer(be, shape, w, st, input.slots, a)?;
    let r = Rows {
        be,
        slots: input.slots,
        rows,
    };
    let tok = cfg.frame_tokens() * frames;
    conv(
        &r,
        &w.conv_in,
        st.conv_in.as_mut(),
        (&a.layers.h, &mut a.conv_in, None),
        (tok, false),
    )?;
    let mut time = tok;
    for (i, stage_w) in w.stages.iter().enumerate() {
        let (done, rest) = a.stages.split_at_mut(i);
        let input = match done.last() {
            Some(prev) => prev.out.last().unwrap_or(&prev.up),
            None => &a.conv_in,
        };
        let sa = &mut rest[0];
        let tail = &mut st.stage_tails[i];
        match &stage_w.convtr {
            PreparedUp::Transposed(c) => convtr(&r, c, tail, (input, &mut sa.up), (time, true))?,
            PreparedUp::Phases { conv: c, .. } => {
                conv(&r, c, Some(tail), (input, &mut sa.up, None), (time, true))?
            }
        }
        time *= stage_w.convtr.stride();
        for (j, b) in stage_w.resblocks.iter().enumerate() {
            let (before, after) = sa.out.split_at_mut(j);
            let x = before.last().unwrap_or(&sa.up);
            let hist = st.res_history[i][j].as_mut();
            res_block(&r, b, hist, (x, &mut sa.hidden, &mut after[0]), time)?;
        }
    }
    let last = a
        .stages
        .last()
        .map_or(&a.conv_in, |s| s.out.last().unwrap_or(&s.up));
    conv(
        &r,
        &w.conv_out,
        st.conv_out.as_mut(),
        (last, &mut a.pcm, None),
        (time, true),
    )
}

fn transformer<B: Backend>(
    be: &B,
    shape: &StepShape<'_>,
    w: &PreparedWeights<B>,
    st: &mut SlotState<B>,
    slots: &B::Ints,
    a: &mut Work<B>,
) -> Result<()> {
    let tok = shape.cfg.frame_tokens() * shape.frames;
    let step = LayerStep {
        cfg: shape.cfg,
        rows: shape.rows,
        time: tok,
        ring: st.ring,
        slots,
        tokens: &st.tokens,
    };
    run_layers(be, &step, &w.layers, &mut st.kv, &mut a.layers)?;
    be.advance_tokens(&mut st.tokens, slots, shape.rows, tok as i32, shape.dummy)
}

/// `(input, output, residual)` of a convolution.
pub(crate) type ConvIo<'a, B> = (
    &'a <B as Backend>::Buf,
    &'a mut <B as Backend>::Buf,
    Option<&'a <B as Backend>::Buf>,
);

pub(crate) fn conv<B: Backend>(
    r: &Rows<'_, B>,
    c: &PreparedConv<B>,
    state: Option<&mut StateBuf<B>>,
    (x, out, residual): ConvIo<'_, B>,
    (time, elu_input): (usize, bool),
) -> Result<()> {
    let (slots, rows) = (r.slots, r.rows);
    r.be.conv1d(Conv1dArgs {
        x,
        w: &c.w,
        bias: c.bias.as_ref(),
        state: state.map(|s| &mut s.buf),
        slots,
        residual,
        out,
        geom: Conv1dGeom {
            rows,
            time,
            c_in: c.c_in,
            c_out: c.c_out,
            kernel: c.kernel,
            dilation: c.dilation,
            elu_input,
        },
    })
}

/// One SEANet residual block over `time` steps per row: `x -> out`, through `hidden` where the
/// backend runs its two convolutions apart.
pub(crate) fn res_block<B: Backend>(
    r: &Rows<'_, B>,
    b: &PreparedResBlock<B>,
    state: Option<&mut StateBuf<B>>,
    (x, hidden, out): (&B::Buf, &mut B::Buf, &mut B::Buf),
    time: usize,
) -> Result<()> {
    r.be.res_block(ResBlockArgs {
        x,
        w1: &b.conv1.w,
        b1: b.conv1.bias.as_ref(),
        state: state.map(|s| &mut s.buf),
        slots: r.slots,
        w2: &b.conv2.w,
        b2: b.conv2.bias.as_ref(),
        hidden,
        out,
        geom: ResBlockGeom {
            rows: r.rows,
            time,
            c: b.conv1.c_in,
            hidden: b.conv1.c_out,
            kernel: b.conv1.kernel,
            dilation: b.conv1.dilation,
        },
    })
}

fn convtr<B: Backend>(
    r: &Rows<'_, B>,
    c: &PreparedConvTr<B>,
    state: &mut StateBuf<B>,
    (x, out): (&B::Buf, &mut B::Buf),
    (time, elu_input): (usize, bool),
) -> Result<()> {
    let (slots, rows) = (r.slots, r.rows);
    r.be.conv_tr1d(ConvTr1dArgs {
        x,
        w: &c.w,
        bias: c.bias.as_ref(),
        state: &mut state.buf,
        slots,
        out,
        geom: ConvTr1dGeom {
            rows,
            time,
            c_in: c.c_in,
            c_out: c.c_out,
            kernel: c.kernel,
            stride: c.stride,
            depthwise: c.depthwise,
            elu_input,
        },
    })
}
