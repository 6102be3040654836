//! Prompt prefill of one utterance: its `P` prompt frames (`CSM.md` §3.2) embedded (a text row,
//! or the sum of an audio frame's code rows), through the backbone at positions `0..P`, their
//! K/V into the utterance's own blocks, and the last position's final-normed hidden into its
//! state row. Nothing another utterance reads is written, so one can join between any two frames.

use chorus_core::lm_ops::EmbedSumArgs;
use chorus_core::{BufRole, LmOps, Result};
use chorus_lm::{
    decoder_stack, store_last_hidden, Acts, DecoderCall, IntInput, LastHidden, LayerCache,
    PagedShape,
};

use crate::config::CsmConfig;
use crate::frame::{decoder_acts, stack, Model};
use crate::prompt::PromptFrame;

/// Column of a prompt row's text id; the codes follow it.
pub const TEXT_COL: usize = 0;

/// Buffers of the prefill program, sized for the longest prompt.
pub struct PrefillBufs<B: LmOps> {
    /// `[max_prompt, 1 + codebooks]`: per row the text id (or -1), then the codes (or -1).
    pub ids: IntInput<B>,
    /// `[1]`: zero (the prompt starts at position 0).
    pub start: B::Ints,
    /// `[1, max_blocks]`.
    pub tables: IntInput<B>,
    /// `[1]`: the utterance's state slot.
    pub slot: IntInput<B>,
    pub acts: Acts<B>,
    /// `[1, backbone_hidden]`.
    pub last: B::Buf,
    pub max_prompt: usize,
}

impl<B: LmOps> PrefillBufs<B> {
    /// Buffers for prompts of up to `max_prompt` frames.
    pub fn new(be: &B, c: &CsmConfig, max_prompt: usize, max_blocks: usize) -> Result<Self> {
        Ok(Self {
            ids: IntInput::new(be, max_prompt * (1 + c.num_codebooks))?,
            start: be.ints(1, 0)?,
            tables: IntInput::new(be, max_blocks)?,
            slot: IntInput::new(be, 1)?,
            acts: decoder_acts(be, &c.backbone, max_prompt)?,
            last: be.zeros(c.backbone.hidden_size, BufRole::Activation)?,
            max_prompt,
        })
    }
}

/// Writes `prompt` as prefill id rows into `ids` (`[P, 1 + codebooks]`, validated frames).
pub fn prompt_rows(prompt: &[PromptFrame], codebooks: usize, ids: &mut [i32]) {
    let stride = 1 + codebooks;
    for (row, f) in ids.chunks_exact_mut(stride).zip(prompt) {
        row.fill(-1);
        match f {
            PromptFrame::Text(t) => row[TEXT_COL] = *t as i32,
            PromptFrame::Audio(codes) => {
                for (d, &c) in row[1..].iter_mut().zip(codes) {
                    *d = c as i32;
                }
            }
        }
    }
}

/// Program op: the backbone inputs of `rows` prompt id rows ([`prompt_rows`]) into `out`: a text
/// row's text embedding, an audio row's sum of its codes' embeddings.
pub fn embed_prompt<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    ids: &B::Ints,
    out: &mut B::Buf,
    rows: usize,
) -> Result<()> {
    let (c, w) = (m.c, m.w);
    be.embed_sum(EmbedSumArgs {
        text: Some(&w.text_embeddings),
        audio: &w.audio_embeddings,
        ids,
        out,
        rows,
        dim: c.backbone.hidden_size,
        stride: 1 + c.num_codebooks,
        text_col: TEXT_COL,
        codes_col: TEXT_COL + 1,
        levels: c.num_codebooks,
        cardinality: c.audio_vocab_size,
    })
}

/// Shape of one prefill.
pub struct PrefillCall<'a, B: LmOps> {
    pub caches: &'a mut [LayerCache<B>],
    pub hidden_state: &'a mut B::Buf,
    /// Prompt frames.
    pub len: usize,
    pub block_size: usize,
    pub max_blocks: usize,
}

/// The prefill program; the caller has filled ids, tables and slot on the host side.
pub fn prefill_program<B: LmOps>(
    be: &B,
    m: &Model<'_, B>,
    bufs: &mut PrefillBufs<B>,
    call: PrefillCall<'_, B>,
) -> Result<()> {
    let PrefillCall {
        caches,
        hidden_state,
        len,
        block_size,
        max_blocks,
    } = call;
    let (c, w) = (m.c, m.w);
    let h = c.backbone.hidden_size;
    bufs.ids.stage(be)?;
    bufs.tables.stage(be)?;
    bufs.slot.stage(be)?;
    embed_prompt(be, m, &bufs.ids.dev, &mut bufs.acts.residual, len)?;
    decoder_stack(
        be,
        &stack(&c.backbone, &w.backbone),
        DecoderCall {
            caches,
            acts: &mut bufs.acts,
            start: &bufs.start,
            block_tables: &bufs.tables.dev,
            shape: PagedShape {
                rows: 1,
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
            rows: 1,
            len,
            hidden: h,
        },
    )
}
