//! The frame program (`CSM.md` §4.1): for every utterance of a bucket, codebook 0's logits from
//! its last backbone hidden and the draw; the depth decoder over the frame's positions (position 0
//! the backbone hidden, position `p` the embedding of code `p - 1`), each level's head and draw;
//! the next backbone input (the sum of the frame's code embeddings) and the backbone step at
//! position `P + f`, whose final-normed output is the next frame's hidden.
//!
//! One program over device buffers: no host sync, no allocation, no data-dependent branch. The
//! depth decoder's cache is one block of `codebooks` positions per row, rewritten from position 0
//! every frame (a fresh cache each frame, as both references); positions past `p` are never read.
//! An utterance whose frame is all zeros still runs the rest of its frame; the host discards it.
//! With a Mimi decoder, the frame ends in its audio (`mimi.rs`), decoded from the codes on the
//! device. In its chunk variant the backbone step also prefills a joining utterance's prompt
//! chunk after the frame's rows (`chorus_lm::chunk`); the depth decoder and Mimi run only for the
//! frame's rows.

use chorus_core::lm_ops::{
    CfgDrawArgs, CopyRowsArgs, DrawMode, EmbedSumArgs, Epilogue, GatherArgs, ScatterArgs,
};
use chorus_core::{BufRole, Error, LmOps, Result, FRAME_SAMPLES};
use chorus_lm::chunk::{place_chunk, store_chunk};
use chorus_lm::{
    decoder_stack, layer_caches, linear, ActDims, Acts, ChunkBufs, ChunkInputs, DecoderCall,
    DecoderStack, LayerCache, LinearIo, PagedShape,
};

use crate::config::{CsmConfig, LlamaConfig, CSM_AUDIO_VOCAB};
use crate::device::{DeviceDecoder, DeviceWeights};
use crate::io::{FrameInputs, FrameOutputs};
use crate::mimi::MimiStep;
use crate::prefill::embed_prompt;

/// How an utterance's codes are drawn (`CSM.md` §4.2): data of each row of the frame, so one
/// program serves utterances with different settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrawSettings {
    /// Divides the logits of sampled draws; 0 draws greedily (greedy ignores it).
    pub temperature: f32,
    /// Candidates of a sampled draw: the tie-inclusive top k, 1..=[`MAX_TOP_K`].
    pub top_k: usize,
}

/// The largest top-k a request may ask for: csm-1b's audio vocabulary. A k at or above a model's
/// vocabulary keeps every class (the draw ops take any k up to `i32::MAX`).
pub const MAX_TOP_K: usize = CSM_AUDIO_VOCAB;

/// The temperature word of a greedy row (the draw ignores it).
const GREEDY_TEMPERATURE: f32 = 1.0;

impl DrawSettings {
    /// Checks the settings: a finite temperature >= 0 and a top-k in 1..=[`MAX_TOP_K`].
    pub fn validate(&self, op: &'static str) -> Result<()> {
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::input(
                op,
                format!("temperature {t} must be a finite number >= 0 (0 draws greedily)"),
            ));
        }
        if self.top_k == 0 || self.top_k > MAX_TOP_K {
            return Err(Error::input(
                op,
                format!("top_k {} must be in 1..={MAX_TOP_K}", self.top_k),
            ));
        }
        Ok(())
    }

    /// The row's draw mode and its `row_sampling` words (temperature bits, top-k) for an
    /// utterance whose sampling mode is `mode`; a temperature of 0 draws greedily.
    pub fn row(self, mode: DrawMode) -> (DrawMode, [i32; 2]) {
        let greedy = mode == DrawMode::Greedy || self.temperature == 0.0;
        let (mode, t) = if greedy {
            (DrawMode::Greedy, GREEDY_TEMPERATURE)
        } else {
            (mode, self.temperature)
        };
        // top_k <= MAX_TOP_K: validated at admission.
        (mode, [t.to_bits() as i32, self.top_k as i32])
    }
}

/// `row_sampling` words of a padding row: greedy, so any valid pair.
pub const PADDING_ROW: [i32; 2] = [GREEDY_TEMPERATURE.to_bits() as i32, 1];

/// Upstream's defaults: temperature 0.9, top-k 50, for codebook 0 and every depth level.
pub const UPSTREAM_DRAWS: DrawSettings = DrawSettings {
    temperature: 0.9,
    top_k: 50,
};

/// Activation buffers of one decoder for `tokens` tokens.
pub fn decoder_acts<B: LmOps>(be: &B, c: &LlamaConfig, tokens: usize) -> Result<Acts<B>> {
    let dims = ActDims {
        hidden: c.hidden_size,
        qkv: c.q_width() + 2 * c.kv_width(),
        attn: c.q_width(),
        inter: c.intermediate_size,
        q8: false,
    };
    Acts::new(be, tokens, dims)
}

/// The stack of one decoder over `w`.
pub fn stack<'a, B: LmOps>(c: &LlamaConfig, w: &'a DeviceDecoder<B>) -> DecoderStack<'a, B> {
    DecoderStack {
        layers: &w.layers,
        norm: &w.norm,
        rope: Some(&w.rope),
        hidden: c.hidden_size,
        inter: c.intermediate_size,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
        eps: c.rms_norm_eps,
        window: None,
    }
}

/// Buffers every bucket shares (sized for the largest), read back by traces after a step.
pub struct FrameBufs<B: LmOps> {
    /// `[n, backbone_hidden]`: each utterance's last backbone hidden.
    pub h: B::Buf,
    /// `[n, audio_vocab]`: codebook 0's logits.
    pub logits: B::Buf,
    /// `[n, backbone_hidden]`: the current depth position's input before the projector.
    pub depth_in: B::Buf,
    /// `codebooks` × `[n, depth_hidden]`: the depth decoder's normed output at each position.
    pub depth_out: Vec<B::Buf>,
    /// `codebooks - 1` × `[n, audio_vocab]`: level `k`'s logits at `k - 1`.
    pub head_logits: Vec<B::Buf>,
    /// `[n, backbone_hidden]`: the next backbone input (the sum of the frame's code embeddings).
    pub feedback: B::Buf,
    pub backbone: Acts<B>,
    pub depth: Acts<B>,
    pub depth_caches: Vec<LayerCache<B>>,
    /// `codebooks` × `[n]`: position `p` in every entry.
    pub depth_start: Vec<B::Ints>,
    /// `[n]`: `r` (row `r` owns depth cache block `r`).
    pub depth_table: B::Ints,
    /// A prompt chunk's embedding and hand-over (`None`: the stage prefills whole prompts).
    pub chunk: Option<ChunkBufs<B>>,
}

impl<B: LmOps> FrameBufs<B> {
    /// Buffers for up to `n` utterances and, if `chunk` > 0, a prompt chunk of `chunk` positions
    /// in the backbone step (one row per utterance: CSM has no guidance row).
    pub fn new(be: &B, c: &CsmConfig, n: usize, chunk: usize) -> Result<Self> {
        let (h, d, v, books) = (
            c.backbone.hidden_size,
            c.depth.hidden_size,
            c.audio_vocab_size,
            c.num_codebooks,
        );
        let z = |len: usize| be.zeros(len, BufRole::Activation);
        let mut depth_table = be.ints(n, 0)?;
        for r in 0..n {
            be.fill_ints(&mut depth_table, r, r as i32)?;
        }
        Ok(Self {
            h: z(n * h)?,
            logits: z(n * v)?,
            depth_in: z(n * h)?,
            depth_out: (0..books).map(|_| z(n * d)).collect::<Result<_>>()?,
            head_logits: (1..books).map(|_| z(n * v)).collect::<Result<_>>()?,
            feedback: z(n * h)?,
            backbone: decoder_acts(be, &c.backbone, n + chunk)?,
            depth: decoder_acts(be, &c.depth, n)?,
            depth_caches: layer_caches(
                be,
                c.depth.num_hidden_layers,
                n,
                books,
                c.depth.kv_width(),
            )?,
            depth_start: (0..books)
                .map(|p| be.ints(n, p as i32))
                .collect::<Result<_>>()?,
            depth_table,
            chunk: (chunk > 0)
                .then(|| ChunkBufs::new(be, (chunk, 1), h))
                .transpose()?,
        })
    }
}

/// The model as the programs see it.
pub struct Model<'a, B: LmOps> {
    pub c: &'a CsmConfig,
    pub w: &'a DeviceWeights<B>,
    /// The stage's default, stated in the draw op's call; every row's own settings replace it.
    pub draws: DrawSettings,
}

/// Everything a frame touches besides the shared buffers.
pub struct FrameCall<'a, B: LmOps> {
    pub inputs: &'a mut FrameInputs<B>,
    pub outputs: &'a mut FrameOutputs<B>,
    /// `[slots + 1, backbone_hidden]`: each utterance's last backbone hidden.
    pub hidden_state: &'a mut B::Buf,
    pub caches: &'a mut [LayerCache<B>],
    /// The Mimi decoder, when the frame ends in audio.
    pub mimi: Option<&'a mut MimiStep<B>>,
    pub n: usize,
    pub block_size: usize,
    pub max_blocks: usize,
    /// A joining utterance's prompt chunk, prefilled in this frame's backbone step after the
    /// frame's rows.
    pub chunk: Option<&'a mut ChunkInputs<B>>,
}

/// One frame for `call.n` utterances (see the module doc).
pub fn frame_program<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    bufs: &mut FrameBufs<B>,
    call: FrameCall<'_, B>,
) -> Result<()> {
    let FrameCall {
        inputs,
        outputs,
        hidden_state,
        caches,
        mimi,
        n,
        block_size,
        max_blocks,
        mut chunk,
    } = call;
    let (c, w) = (m.c, m.w);
    let (h, v, books) = (c.backbone.hidden_size, c.audio_vocab_size, c.num_codebooks);
    inputs.stage(be)?;
    if let Some(ch) = chunk.as_deref_mut() {
        ch.stage(be)?;
    }
    be.gather_rows(GatherArgs::lookup(
        hidden_state,
        &inputs.slots.dev,
        &mut bufs.h,
        (n, h),
    ))?;
    // Codebook 0 from the backbone hidden.
    let io = LinearIo::new(
        &bufs.h,
        &mut bufs.logits,
        bufs.depth.scratch.view(),
        [n, h, v],
        Epilogue::Store,
    );
    linear(be, &w.lm_head, io)?;
    draw(be, m, inputs, &bufs.logits, (n, 0))?;
    // The depth decoder: position 0 on the backbone hidden, position p on code p - 1.
    for pos in 0..books {
        let input = if pos == 0 {
            DepthInput::Hidden
        } else {
            be.gather_rows(GatherArgs {
                table: &w.audio_embeddings,
                ids: &inputs.codes.dev,
                out: &mut bufs.depth_in,
                rows: n,
                dim: h,
                rows_per_id: 1,
                ids_stride: books,
                ids_col: pos - 1,
                offset: (pos - 1) * v,
                scale: 1.0,
            })?;
            DepthInput::Gathered
        };
        depth_position(be, m, bufs, input, (pos, n))?;
        if pos > 0 {
            let logits = &mut bufs.head_logits[pos - 1];
            let io = LinearIo::new(
                &bufs.depth_out[pos],
                logits,
                bufs.depth.scratch.view(),
                [n, c.depth.hidden_size, v],
                Epilogue::Store,
            );
            linear(be, &w.heads[pos - 1], io)?;
            draw(be, m, inputs, logits, (n, pos))?;
        }
    }
    // The next backbone input: the sum of the frame's code embeddings, no text.
    be.embed_sum(EmbedSumArgs {
        text: None,
        audio: &w.audio_embeddings,
        ids: &inputs.codes.dev,
        out: &mut bufs.feedback,
        rows: n,
        dim: h,
        stride: books,
        text_col: 0,
        codes_col: 0,
        levels: books,
        cardinality: v,
    })?;
    be.copy_rows(CopyRowsArgs {
        src: &bufs.feedback,
        dst: &mut bufs.backbone.residual,
        rows: 1,
        len: n * h,
        src_offset: 0,
        src_stride: 0,
        dst_offset: 0,
        dst_stride: 0,
    })?;
    // A joining utterance's prompt chunk rides along after the frame's rows.
    let chunk = chunk.as_deref();
    if let (Some(ch), Some(cb)) = (chunk, bufs.chunk.as_mut()) {
        embed_prompt(be, m, &ch.ids.dev, &mut cb.embed, ch.chunk)?;
        place_chunk(be, ch, cb, (&mut bufs.backbone.residual, n, h))?;
    }
    decoder_stack(
        be,
        &stack(&c.backbone, &w.backbone),
        DecoderCall {
            caches,
            acts: &mut bufs.backbone,
            start: &inputs.start.dev,
            block_tables: &inputs.tables.dev,
            shape: PagedShape {
                rows: n,
                time: 1,
                block_size,
                max_blocks,
            },
            out: None,
            chunk: chunk.map(ChunkInputs::segment),
        },
    )?;
    be.scatter_rows(ScatterArgs {
        src: &bufs.backbone.scratch.normed,
        ids: &inputs.slots.dev,
        table: hidden_state,
        rows: n,
        dim: h,
    })?;
    if let (Some(ch), Some(cb)) = (chunk, bufs.chunk.as_mut()) {
        store_chunk(
            be,
            ch,
            cb,
            (&bufs.backbone.scratch.normed, &mut *hidden_state, h),
        )?;
    }
    // The frame's audio from its codes, still on the device.
    if let (Some(mimi), Some(pcm_out)) = (mimi, outputs.pcm.as_mut()) {
        let pcm = mimi.step(be, &inputs.slots.dev, &inputs.codes.dev, books, n)?;
        be.copy_out_floats(pcm, pcm_out, n * FRAME_SAMPLES)?;
    }
    be.copy_out_ints(&inputs.codes.dev, &mut outputs.codes, n * books)
}

/// Which buffer a depth position reads: the backbone hidden or the gathered embedding.
enum DepthInput {
    Hidden,
    Gathered,
}

/// One depth position for `n` rows: the projector, the layers at position `pos`, the final norm
/// into `depth_out[pos]`.
fn depth_position<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    bufs: &mut FrameBufs<B>,
    input: DepthInput,
    (pos, n): (usize, usize),
) -> Result<()> {
    let (c, w) = (m.c, m.w);
    let (h, d) = (c.backbone.hidden_size, c.depth.hidden_size);
    let FrameBufs {
        h: hidden,
        depth_in,
        depth_out,
        depth,
        depth_caches,
        depth_start,
        depth_table,
        ..
    } = bufs;
    let x = match input {
        DepthInput::Hidden => &*hidden,
        DepthInput::Gathered => &*depth_in,
    };
    let io = LinearIo::new(
        x,
        &mut depth.residual,
        depth.scratch.view(),
        [n, h, d],
        Epilogue::Store,
    );
    linear(be, &w.projector, io)?;
    decoder_stack(
        be,
        &stack(&c.depth, &w.depth),
        DecoderCall {
            caches: depth_caches,
            acts: depth,
            start: &depth_start[pos],
            block_tables: depth_table,
            shape: PagedShape {
                rows: n,
                time: 1,
                block_size: c.num_codebooks,
                max_blocks: 1,
            },
            out: Some(&mut depth_out[pos]),
            chunk: None,
        },
    )
}

/// Draws column `col` of every utterance's codes from `logits` (no guidance, no END class).
fn draw<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    inputs: &mut FrameInputs<B>,
    logits: &B::Buf,
    (n, col): (usize, usize),
) -> Result<()> {
    let books = m.c.num_codebooks;
    be.cfg_draw(CfgDrawArgs {
        logits,
        codes: &mut inputs.codes.dev,
        mode: &inputs.mode.dev,
        seeds: &inputs.seeds.dev,
        draws: &inputs.draws.dev,
        allow_end: &inputs.allow_end.dev,
        songs: n,
        vocab: m.c.audio_vocab_size,
        codes_stride: books,
        col,
        draw_offset: col as u32,
        cfg_scale: None,
        temperature: m.draws.temperature,
        cond_top_k: None,
        top_k: m.draws.top_k,
        end: None,
        row_sampling: Some(&inputs.sampling.dev),
    })
}
