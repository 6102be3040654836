//! The step (`KYUTAI_STT.md` §3.2), for every stream of a bucket: the input embedding (the 32
//! audio rows of this position's codes, plus the embedding of the stream's previous text token,
//! kept per slot on the device), the decoder stack with its sliding window over the stream's
//! ring, the final norm, the text head and the draw (greedy, or the noise race at a
//! temperature; a forced token wins), the VAD heads, and the drawn token's embedding stored as
//! the slot's next text input.
//!
//! One program over device buffers: no host sync, no allocation, no data-dependent branch. The
//! token goes back on the device, so the host may stage the next step before it reads this one.

use chorus_core::lm_ops::{
    CfgDrawArgs, CopyRowsArgs, EmbedSumArgs, Epilogue, GatherArgs, RmsNormArgs, ScatterArgs,
};
use chorus_core::{BufRole, LmOps, ResetRowsArgs, Result};
use chorus_lm::{
    decoder_stack, linear, ActDims, Acts, DecoderCall, DecoderStack, LayerCache, LinearIo,
    PagedShape,
};

use crate::config::SttConfig;
use crate::device::DeviceWeights;
use crate::io::{StepInputs, StepOutputs};
use crate::mimi::MimiEncode;

/// How text tokens are drawn when the draw decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrawSettings {
    /// Divides the logits of sampled draws (greedy ignores it).
    pub temperature: f32,
    /// Candidates of a sampled draw.
    pub top_k: usize,
}

impl DrawSettings {
    /// moshi-server's sampled text token at `temperature` (Unmute runs the 1B at 0.25):
    /// Gumbel-max over the whole vocabulary (`candle_nn::sampling::gumbel_softmax`), which is
    /// the noise race with every piece a candidate (`-ln E` of an exponential E is Gumbel).
    pub fn gumbel(temperature: f32, vocab: usize) -> Self {
        Self {
            temperature,
            top_k: vocab,
        }
    }

    /// The text draw of a server or CLI temperature: `None` (greedy, Kyutai's configs) at 0,
    /// [`DrawSettings::gumbel`] above; a negative or non-finite temperature is refused.
    pub fn for_temperature(temperature: f32, vocab: usize) -> Result<Option<Self>> {
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(chorus_core::Error::input(
                "DrawSettings::for_temperature",
                format!("temperature {temperature} must be finite and at least 0 (0 is greedy)"),
            ));
        }
        Ok((temperature > 0.0).then(|| Self::gumbel(temperature, vocab)))
    }
}

/// Kyutai's configs: greedy (a sampled stream uses these if it asks for noise).
pub const KYUTAI_DRAWS: DrawSettings = DrawSettings {
    temperature: 1.0,
    top_k: 250,
};

/// Buffers every bucket shares (sized for the largest), read back by traces after a step.
pub struct StepBufs<B: LmOps> {
    /// `[n, hidden]`: the slots' previous text embeddings.
    pub text_in: B::Buf,
    pub acts: Acts<B>,
    /// `[n, hidden]`: the final-normed hidden.
    pub hidden: B::Buf,
    /// `[n, text_vocab]`.
    pub logits: B::Buf,
    /// `[n, extra_heads * classes]` (one element without VAD heads).
    pub vad: B::Buf,
    /// `[n, hidden]`: the drawn tokens' embeddings.
    pub text_next: B::Buf,
}

impl<B: LmOps> StepBufs<B> {
    /// Buffers for up to `n` streams.
    pub fn new(be: &B, c: &SttConfig, n: usize) -> Result<Self> {
        let h = c.hidden_size;
        let z = |len: usize| be.zeros(len.max(1), BufRole::Activation);
        let dims = ActDims {
            hidden: h,
            qkv: c.qkv_width(),
            attn: c.q_width(),
            inter: c.ffn_hidden,
            q8: false,
        };
        Ok(Self {
            text_in: z(n * h)?,
            acts: Acts::new(be, n, dims)?,
            hidden: z(n * h)?,
            logits: z(n * c.text_vocab)?,
            vad: z(n * c.extra_heads * c.extra_head_dim)?,
            text_next: z(n * h)?,
        })
    }
}

/// The model as the step sees it.
pub struct Model<'a, B: LmOps> {
    pub c: &'a SttConfig,
    pub w: &'a DeviceWeights<B>,
    pub draws: DrawSettings,
    /// Audio codebooks summed into the input, the first N (the rest are skipped).
    pub codebooks: usize,
}

/// Everything a step touches besides the shared buffers.
pub struct StepCall<'a, B: LmOps> {
    pub inputs: &'a mut StepInputs<B>,
    pub outputs: &'a mut StepOutputs<B>,
    /// `[slots + 1, hidden]`: each stream's next text embedding.
    pub text_state: &'a mut B::Buf,
    /// `[hidden]`: the text-state row a stream starts from (`inputs.resets` lists its slot).
    pub initial: &'a B::Buf,
    pub caches: &'a mut [LayerCache<B>],
    pub n: usize,
    pub block_size: usize,
    pub max_blocks: usize,
    /// PCM in: the in-frame encoder's codes replace `inputs.codes`.
    pub audio: Option<AudioCall<'a, B>>,
}

/// The in-frame Mimi encoder's part of a step.
pub struct AudioCall<'a, B: LmOps> {
    pub mimi: &'a mut MimiEncode<B>,
    /// The staged slots (the dummy for rows without audio), code requests and PCM.
    pub staging: &'a B::Staging,
    /// `[n]`: the row of `table` each stream's audio embedding comes from: its own row, or the
    /// last (the initial codes' embedding, a stream's position 0).
    pub select: &'a mut chorus_lm::IntInput<B>,
    /// `[rows + 1, hidden]`: the encoded frames' embeddings, then the initial codes' one.
    pub table: &'a mut B::Buf,
    /// `[n, num_quantizers]`: the codes, for the host.
    pub codes_out: &'a mut B::PinnedInts,
}

/// The decoder stack of the model.
pub fn stack<'a, B: LmOps>(c: &SttConfig, w: &'a DeviceWeights<B>) -> DecoderStack<'a, B> {
    DecoderStack {
        layers: &w.layers,
        norm: &w.out_norm,
        rope: Some(&w.rope),
        hidden: c.hidden_size,
        inter: c.ffn_hidden,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
        eps: c.rms_norm_eps,
        window: Some(c.sliding_window),
    }
}

/// One step for `call.n` streams (see the module doc).
pub fn step_program<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    bufs: &mut StepBufs<B>,
    call: StepCall<'_, B>,
) -> Result<()> {
    let StepCall {
        inputs,
        outputs,
        text_state,
        initial,
        caches,
        n,
        block_size,
        max_blocks,
        mut audio,
    } = call;
    let (c, w) = (m.c, m.w);
    let (h, books) = (c.hidden_size, m.codebooks);
    inputs.stage(be)?;
    // 0. The slots this step admits start over: the initial text row, a zero encoder state.
    be.reset_rows(ResetRowsArgs {
        buf: &mut *text_state,
        row_len: h,
        list: &inputs.resets.dev,
        count: n,
        src: Some(initial),
    })?;
    if let Some(a) = &mut audio {
        a.mimi.reset_listed(be, &inputs.resets.dev, n)?;
    }
    // 1. The 32 audio rows (of the staged codes, or of the codes the encoder finds in the
    // staged PCM), then the previous text token's row added to them.
    let audio_rows = |ids: &B::Ints, out: &mut B::Buf, stride: usize| {
        be.embed_sum(EmbedSumArgs {
            text: None,
            audio: &w.audio_emb,
            ids,
            out,
            rows: n,
            dim: h,
            stride,
            text_col: 0,
            codes_col: 0,
            levels: books,
            cardinality: c.codebook_vocab,
        })
    };
    match audio {
        None => audio_rows(&inputs.codes.dev, &mut bufs.acts.residual, books)?,
        Some(a) => {
            a.select.stage(be)?;
            let stride = a.mimi.cfg.num_quantizers;
            let codes = a.mimi.step(be, a.staging, n)?;
            audio_rows(codes, a.table, stride)?;
            be.gather_rows(GatherArgs::lookup(
                a.table,
                &a.select.dev,
                &mut bufs.acts.residual,
                (n, h),
            ))?;
            be.copy_out_ints(codes, a.codes_out, n * stride)?;
        }
    }
    be.gather_rows(GatherArgs::lookup(
        text_state,
        &inputs.slots.dev,
        &mut bufs.text_in,
        (n, h),
    ))?;
    // The fused residual add of RMSNorm is the op's one row-wise add; its normed output is
    // scratch the first layer overwrites.
    be.rms_norm(RmsNormArgs {
        residual: &mut bufs.acts.residual,
        delta: Some(&bufs.text_in),
        weight: &w.out_norm,
        out: &mut bufs.acts.scratch.normed,
        n,
        dim: h,
        eps: c.rms_norm_eps,
    })?;
    // 2. The layers over each stream's ring, then out_norm.
    decoder_stack(
        be,
        &stack(c, w),
        DecoderCall {
            caches,
            acts: &mut bufs.acts,
            start: &inputs.start.dev,
            block_tables: &inputs.tables.dev,
            shape: PagedShape {
                rows: n,
                time: 1,
                block_size,
                max_blocks,
            },
            out: Some(&mut bufs.hidden),
            chunk: None,
        },
    )?;
    // 3. The text head and the draw (a forced token is kept).
    let io = LinearIo::new(
        &bufs.hidden,
        &mut bufs.logits,
        bufs.acts.scratch.view(),
        [n, h, c.text_vocab],
        Epilogue::Store,
    );
    linear(be, &w.text_linear, io)?;
    be.cfg_draw(CfgDrawArgs {
        logits: &bufs.logits,
        codes: &mut inputs.tokens.dev,
        mode: &inputs.mode.dev,
        seeds: &inputs.seeds.dev,
        draws: &inputs.draws.dev,
        allow_end: &inputs.allow_end.dev,
        songs: n,
        vocab: c.text_vocab,
        codes_stride: 1,
        col: 0,
        draw_offset: 0,
        cfg_scale: None,
        temperature: m.draws.temperature,
        cond_top_k: None,
        top_k: m.draws.top_k,
        end: None,
        row_sampling: None,
    })?;
    // 4. The VAD heads on the same hidden (softmax on the host: six classes per head).
    if let (Some(vad), Some(out)) = (&w.vad, outputs.vad.as_mut()) {
        let width = c.extra_heads * c.extra_head_dim;
        let io = LinearIo::new(
            &bufs.hidden,
            &mut bufs.vad,
            bufs.acts.scratch.view(),
            [n, h, width],
            Epilogue::Store,
        );
        linear(be, vad, io)?;
        be.copy_out_floats(&bufs.vad, out, n * width)?;
    }
    // 5. The token's embedding is the slot's next text input.
    be.gather_rows(GatherArgs::lookup(
        &w.text_emb,
        &inputs.tokens.dev,
        &mut bufs.text_next,
        (n, h),
    ))?;
    be.scatter_rows(ScatterArgs {
        src: &bufs.text_next,
        ids: &inputs.slots.dev,
        table: text_state,
        rows: n,
        dim: h,
    })?;
    if let Some(out) = outputs.logits.as_mut() {
        be.copy_out_floats(&bufs.logits, out, n * c.text_vocab)?;
    }
    be.copy_out_ints(&inputs.tokens.dev, &mut outputs.tokens, n)
}

/// The text-state row every stream starts from: the initial text token's embedding, computed
/// once at construction.
pub struct InitialRow<B: LmOps> {
    /// `[hidden]`.
    pub row: B::Buf,
}

impl<B: LmOps> InitialRow<B> {
    /// Gathers the initial token's row (an eager program: one sync, at construction).
    pub fn new(be: &B, w: &DeviceWeights<B>, c: &SttConfig) -> Result<Self> {
        let mut initial = chorus_lm::IntInput::new(be, 1)?;
        initial.host(be)?[0] = c.ids.initial_text as i32;
        let mut row = be.zeros(c.hidden_size, BufRole::Activation)?;
        be.run_eager(&mut |b: &B| {
            initial.stage(b)?;
            b.gather_rows(GatherArgs::lookup(
                &w.text_emb,
                &initial.dev,
                &mut row,
                (1, c.hidden_size),
            ))
        })?;
        Ok(Self { row })
    }
}

/// Eager program: writes the embedding of the initial codes (the initial id of each of the first
/// `books` codebooks) into row `row` of `table` (the last row of the in-frame encoder's table,
/// written once).
pub fn initial_audio_row<B: LmOps>(
    be: &B,
    w: &DeviceWeights<B>,
    c: &SttConfig,
    books: usize,
    (table, row): (&mut B::Buf, usize),
) -> Result<()> {
    let mut ids = chorus_lm::IntInput::new(be, books)?;
    ids.host(be)?.fill(c.ids.initial_audio as i32);
    let mut one = be.zeros(c.hidden_size, BufRole::Activation)?;
    be.run_eager(&mut |b: &B| {
        ids.stage(b)?;
        b.embed_sum(EmbedSumArgs {
            text: None,
            audio: &w.audio_emb,
            ids: &ids.dev,
            out: &mut one,
            rows: 1,
            dim: c.hidden_size,
            stride: books,
            text_col: 0,
            codes_col: 0,
            levels: books,
            cardinality: c.codebook_vocab,
        })?;
        b.copy_rows(CopyRowsArgs {
            src: &one,
            dst: &mut *table,
            rows: 1,
            len: c.hidden_size,
            src_offset: 0,
            src_stride: 0,
            dst_offset: row * c.hidden_size,
            dst_stride: 0,
        })
    })
}
