//! The frame program: for every song of a bucket, the audio logits of its last hidden, CFG and the
//! c0 draw, the depth decoder's 8 positions with the 7 level draws, the frame hiddens, the
//! feedback embedding and the LM step that yields the next hidden (`MUSIC_SEMANTIC.md` §3).
//!
//! Everything is one program over device buffers: no host sync, no allocation, no data-dependent
//! branch. A song that draws END still runs the rest of its frame; the host discards it.
//! Each depth position keeps its own output buffer, so the 7 depth hiddens are distinct (the
//! aliasing bug of §9.1 cannot happen).

use chorus_core::lm_ops::{
    CfgDrawArgs, CopyRowsArgs, Epilogue, FeedbackArgs, FusedLinearArgs, GatherArgs, LinearWeight,
    ScatterArgs,
};
use chorus_core::{BufRole, LmOps, Result};
use chorus_lm::{linear, DecoderCall, LayerCache, LinearIo, PagedShape};

use crate::config::{
    DepthConfig, Qwen3Config, AUDIO_CODE_OFFSET, AUDIO_LOGITS, CFG_SCALE, CFG_TOP_K, END_COLUMN,
    SAMPLING_TOP_K,
};
use crate::device::DeviceWeights;
use crate::io::{FrameInputs, FrameOutputs};
use crate::model::depth::{depth_acts, depth_caches, depth_forward, DepthActs, DepthCall};
use crate::model::qwen3::{lm_acts, lm_forward, LmActs};
use chorus_lm::chunk::{embed_chunk, store_chunk, ChunkBufs, ChunkInputs};

/// Buffers every bucket shares (sized for the largest), read back by traces after a step.
pub struct FrameBufs<B: LmOps> {
    /// `[rows, hidden]`: each song's last LM hidden, both rows (the frame's logits come from it).
    pub h: B::Buf,
    /// `[rows, 16385]`.
    pub logits: B::Buf,
    /// `[rows, hidden]`: the current depth position's input before `projection`.
    pub depth_in: B::Buf,
    /// 8 × `[rows, hidden]`: the depth decoder's normed output at each position.
    pub depth_out: Vec<B::Buf>,
    /// 7 × `[rows, audio_vocab]`.
    pub head_logits: Vec<B::Buf>,
    /// `[rows, hidden]`: the feedback embedding.
    pub feedback: B::Buf,
    /// `[songs, 8 * hidden]`.
    pub frame_hiddens: B::Buf,
    pub lm: LmActs<B>,
    pub depth: DepthActs<B>,
    pub depth_caches: Vec<LayerCache<B>>,
    /// 8 × `[rows]`: position `p` in every entry (the depth attention's start).
    pub depth_start: Vec<B::Ints>,
    /// `[rows]`: `r` (row `r` owns depth cache block `r`).
    pub depth_table: B::Ints,
    /// A prompt chunk's embedding and hand-over (`None`: the stage prefills whole prompts).
    pub chunk: Option<ChunkBufs<B>>,
}

impl<B: LmOps> FrameBufs<B> {
    /// Buffers for up to `songs` songs of the models `m` and, if `chunk` > 0, a prompt chunk of
    /// `chunk` tokens per row in the LM step.
    pub fn new(be: &B, m: &Models<'_, B>, songs: usize, chunk: usize) -> Result<Self> {
        let (lm, dc) = (m.lm, m.depth);
        let rows = 2 * songs;
        let h = lm.hidden_size;
        let levels = dc.num_codebooks;
        let z = |len: usize| be.zeros(len, BufRole::Activation);
        let mut depth_table = be.ints(rows, 0)?;
        for r in 0..rows {
            be.fill_ints(&mut depth_table, r, r as i32)?;
        }
        Ok(Self {
            h: z(rows * h)?,
            logits: z(rows * AUDIO_LOGITS)?,
            depth_in: z(rows * h)?,
            depth_out: (0..levels).map(|_| z(rows * h)).collect::<Result<_>>()?,
            head_logits: (1..levels)
                .map(|_| z(rows * dc.audio_vocab_size))
                .collect::<Result<_>>()?,
            feedback: z(rows * h)?,
            frame_hiddens: z(songs * levels * h)?,
            lm: lm_acts(be, lm, rows + 2 * chunk, m.w.lm_q8())?,
            depth: depth_acts(be, dc, rows, m.w.depth_q8())?,
            depth_caches: depth_caches(be, dc, rows)?,
            depth_start: (0..levels)
                .map(|p| be.ints(rows, p as i32))
                .collect::<Result<_>>()?,
            depth_table,
            chunk: (chunk > 0)
                .then(|| ChunkBufs::new(be, (chunk, 2), h))
                .transpose()?,
        })
    }
}

/// Everything a frame program touches besides the shared buffers.
pub struct FrameCall<'a, B: LmOps> {
    pub inputs: &'a mut FrameInputs<B>,
    pub outputs: &'a mut FrameOutputs<B>,
    /// `[slots + 1, 2 * hidden]`: each song's last hidden, both rows.
    pub hidden_state: &'a mut B::Buf,
    pub lm_caches: &'a mut [LayerCache<B>],
    pub songs: usize,
    pub block_size: usize,
    pub max_blocks: usize,
    /// A joining song's prompt chunk, prefilled in this frame's LM step after the songs' rows.
    pub chunk: Option<&'a mut ChunkInputs<B>>,
}

/// The models and their configs.
pub struct Models<'a, B: LmOps> {
    pub lm: &'a Qwen3Config,
    pub depth: &'a DepthConfig,
    pub w: &'a DeviceWeights<B>,
}

/// One frame for `call.songs` songs (see the module doc).
pub fn frame_program<B: LmOps>(
    be: &B,
    m: &Models<'_, B>,
    bufs: &mut FrameBufs<B>,
    call: FrameCall<'_, B>,
) -> Result<()> {
    let FrameCall {
        inputs,
        outputs,
        hidden_state,
        lm_caches,
        songs,
        block_size,
        max_blocks,
        mut chunk,
    } = call;
    let (h, rows) = (m.lm.hidden_size, 2 * songs);
    let levels = m.depth.num_codebooks;
    let vocab = m.depth.audio_vocab_size;
    inputs.stage(be)?;
    if let Some(c) = chunk.as_deref_mut() {
        c.stage(be)?;
    }
    // Each song's last hidden, both rows: state row `slot` is `[2, hidden]`.
    be.gather_rows(GatherArgs::lookup(
        hidden_state,
        &inputs.slots.dev,
        &mut bufs.h,
        (songs, 2 * h),
    ))?;
    // 1-5: audio logits, CFG restricted to the conditional top 50, top-50 draw of c0.
    be.fused_linear(FusedLinearArgs {
        x: &bufs.h,
        norm: None,
        w: LinearWeight::Dense(&m.w.audio_head),
        out: &mut bufs.logits,
        scratch: bufs.depth.scratch.view(),
        n: rows,
        k: h,
        m: AUDIO_LOGITS,
        epilogue: Epilogue::Store,
    })?;
    let draw = |col: usize, cond_top_k, end, v| (col, cond_top_k, end, v);
    let c0 = draw(0, Some(CFG_TOP_K), Some(END_COLUMN), AUDIO_LOGITS);
    cfg_draw(be, inputs, &bufs.logits, songs, c0)?;
    // 6: the depth decoder, position 0 on the LM hidden, then one position per level.
    for pos in 0..levels {
        let input = if pos == 0 {
            &bufs.h
        } else {
            let (table, offset) = if pos == 1 {
                (&m.w.embed_tokens, AUDIO_CODE_OFFSET)
            } else {
                (&m.w.audio_embeddings, (pos - 2) * vocab)
            };
            be.gather_rows(GatherArgs {
                table,
                ids: &inputs.codes.dev,
                out: &mut bufs.depth_in,
                rows,
                dim: h,
                rows_per_id: 2,
                ids_stride: levels,
                ids_col: pos - 1,
                offset,
                scale: 1.0,
            })?;
            &bufs.depth_in
        };
        depth_forward(
            be,
            m.depth,
            m.w,
            DepthCall {
                caches: &mut bufs.depth_caches,
                acts: &mut bufs.depth,
                input,
                start: &bufs.depth_start[pos],
                table: &bufs.depth_table,
                out: &mut bufs.depth_out[pos],
                pos,
                rows,
            },
        )?;
        if pos > 0 {
            let logits = &mut bufs.head_logits[pos - 1];
            let io = LinearIo::new(
                &bufs.depth_out[pos],
                logits,
                bufs.depth.scratch.view(),
                [rows, h, vocab],
                Epilogue::Store,
            );
            linear(be, &m.w.audio_heads[pos - 1], io)?;
            cfg_draw(be, inputs, logits, songs, draw(pos, None, None, vocab))?;
        }
    }
    // 7: frame hiddens of the conditional rows: the LM hidden, then depth positions 1..7.
    for pos in 0..levels {
        let src = if pos == 0 {
            &bufs.h
        } else {
            &bufs.depth_out[pos]
        };
        be.copy_rows(CopyRowsArgs {
            src,
            dst: &mut bufs.frame_hiddens,
            rows: songs,
            len: h,
            src_offset: 0,
            src_stride: 2 * h,
            dst_offset: pos * h,
            dst_stride: levels * h,
        })?;
    }
    // 8: the feedback embedding, the same for both rows.
    be.feedback_embed(FeedbackArgs {
        embed: &m.w.embed_tokens,
        audio: &m.w.audio_embeddings,
        codes: &inputs.codes.dev,
        out: &mut bufs.feedback,
        songs,
        dim: h,
        levels,
        codes_stride: levels,
        offset: AUDIO_CODE_OFFSET,
        cardinality: vocab,
        scale: (levels as f32).powf(-0.5),
    })?;
    be.copy_rows(CopyRowsArgs {
        src: &bufs.feedback,
        dst: &mut bufs.lm.residual,
        rows: 1,
        len: rows * h,
        src_offset: 0,
        src_stride: 0,
        dst_offset: 0,
        dst_stride: 0,
    })?;
    // A joining song's prompt chunk rides along after the songs' rows.
    let chunk = chunk.as_deref();
    if let (Some(c), Some(cb)) = (chunk, bufs.chunk.as_mut()) {
        embed_chunk(
            be,
            &m.w.embed_tokens,
            c,
            cb,
            (&mut bufs.lm.residual, rows, h),
        )?;
    }
    // 9: the LM step at position P + f; its final-normed output is the next frame's hidden.
    lm_forward(
        be,
        m.lm,
        m.w,
        DecoderCall {
            caches: lm_caches,
            acts: &mut bufs.lm,
            start: &inputs.start.dev,
            block_tables: &inputs.tables.dev,
            shape: PagedShape {
                rows,
                time: 1,
                block_size,
                max_blocks,
            },
            out: None,
            chunk: chunk.map(ChunkInputs::segment),
        },
    )?;
    be.scatter_rows(ScatterArgs {
        src: &bufs.lm.scratch.normed,
        ids: &inputs.slots.dev,
        table: hidden_state,
        rows: songs,
        dim: 2 * h,
    })?;
    if let (Some(c), Some(cb)) = (chunk, bufs.chunk.as_mut()) {
        store_chunk(be, c, cb, (&bufs.lm.scratch.normed, &mut *hidden_state, h))?;
    }
    be.copy_out_ints(&inputs.codes.dev, &mut outputs.codes, songs * levels)?;
    be.copy_out_floats(
        &bufs.frame_hiddens,
        &mut outputs.hiddens,
        songs * levels * h,
    )
}

/// One CFG draw into column `col` of the codes: `(col, cond_top_k, end, vocab)`.
fn cfg_draw<B: LmOps>(
    be: &B,
    inputs: &mut FrameInputs<B>,
    logits: &B::Buf,
    songs: usize,
    (col, cond_top_k, end, vocab): (usize, Option<usize>, Option<usize>, usize),
) -> Result<()> {
    let levels = inputs.codes.len / inputs.slots.len;
    be.cfg_draw(CfgDrawArgs {
        logits,
        codes: &mut inputs.codes.dev,
        mode: &inputs.mode.dev,
        seeds: &inputs.seeds.dev,
        draws: &inputs.draws.dev,
        allow_end: &inputs.allow_end.dev,
        songs,
        vocab,
        codes_stride: levels,
        col,
        draw_offset: col as u32,
        cfg_scale: Some(CFG_SCALE),
        temperature: 1.0,
        cond_top_k,
        top_k: SAMPLING_TOP_K,
        end,
        row_sampling: None,
    })
}
