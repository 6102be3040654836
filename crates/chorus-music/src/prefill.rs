//! Prompt prefill of one song: both rows (conditional, unconditional) through the LM at positions
//! `0..P`, their K/V into the song's own blocks, and the last position's final-normed hidden into
//! the song's state row. Nothing another song reads is written, so a song can join between any
//! two frames of the others.

use chorus_core::lm_ops::GatherArgs;
use chorus_core::{BufRole, LmOps, Result};
use chorus_lm::{store_last_hidden, DecoderCall, LastHidden, LayerCache, PagedShape};

use crate::frame::Models;
use crate::io::IntInput;
use crate::model::qwen3::{lm_acts, lm_forward, LmActs};

/// Buffers of the prefill program, sized for the longest prompt.
pub struct PrefillBufs<B: LmOps> {
    /// `[2 * max_prompt]`: the two rows' token ids, back to back.
    pub ids: IntInput<B>,
    /// `[2]`: zeros (both rows start at position 0).
    pub start: B::Ints,
    /// `[2, max_blocks]`.
    pub tables: IntInput<B>,
    /// `[1]`: the song's state slot.
    pub slot: IntInput<B>,
    pub acts: LmActs<B>,
    /// `[2, hidden]`: the last position's hidden of both rows.
    pub last: B::Buf,
    pub max_prompt: usize,
}

impl<B: LmOps> PrefillBufs<B> {
    /// Buffers for prompts of up to `max_prompt` tokens per row.
    pub fn new(be: &B, m: &Models<'_, B>, max_prompt: usize, max_blocks: usize) -> Result<Self> {
        Ok(Self {
            ids: IntInput::new(be, 2 * max_prompt)?,
            start: be.ints(2, 0)?,
            tables: IntInput::new(be, 2 * max_blocks)?,
            slot: IntInput::new(be, 1)?,
            acts: lm_acts(be, m.lm, 2 * max_prompt, m.w.lm_q8())?,
            last: be.zeros(2 * m.lm.hidden_size, BufRole::Activation)?,
            max_prompt,
        })
    }
}

/// Shape of one prefill.
pub struct PrefillCall<'a, B: LmOps> {
    pub lm_caches: &'a mut [LayerCache<B>],
    pub hidden_state: &'a mut B::Buf,
    /// Prompt tokens per row.
    pub len: usize,
    pub block_size: usize,
    pub max_blocks: usize,
}

/// The prefill program; the caller has staged ids, tables and slot on the host side.
pub fn prefill_program<B: LmOps>(
    be: &B,
    m: &Models<'_, B>,
    bufs: &mut PrefillBufs<B>,
    call: PrefillCall<'_, B>,
) -> Result<()> {
    let PrefillCall {
        lm_caches,
        hidden_state,
        len,
        block_size,
        max_blocks,
    } = call;
    let h = m.lm.hidden_size;
    bufs.ids.stage(be)?;
    bufs.tables.stage(be)?;
    bufs.slot.stage(be)?;
    be.gather_rows(GatherArgs::lookup(
        &m.w.embed_tokens,
        &bufs.ids.dev,
        &mut bufs.acts.residual,
        (2 * len, h),
    ))?;
    lm_forward(
        be,
        m.lm,
        m.w,
        DecoderCall {
            caches: lm_caches,
            acts: &mut bufs.acts,
            start: &bufs.start,
            block_tables: &bufs.tables.dev,
            shape: PagedShape {
                rows: 2,
                time: len,
                block_size,
                max_blocks,
            },
            out: None,
            chunk: None,
        },
    )?;
    store_last_hidden(
        be,
        LastHidden {
            normed: &bufs.acts.scratch.normed,
            last: &mut bufs.last,
            slot: &bufs.slot.dev,
            state: hidden_state,
            rows: 2,
            len,
            hidden: h,
        },
    )
}
