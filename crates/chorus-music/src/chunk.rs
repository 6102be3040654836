//! Chunked prefill: a song that joins while others run has its prompt prefilled in chunks of `C`
//! tokens per row, each inside one frame of the running songs, its tokens after their decode
//! rows in the same products (one pass over the weights serves both), so a join costs the
//! running songs a few wider frames instead of one long stall.
//!
//! Chunk `i` covers positions `i C .. (i + 1) C`. The last one ends at the prompt's end: it
//! starts at `P - C` when `P >= C` (recomputing positions an earlier chunk wrote, from the same
//! tokens), or at 0 with padding tokens at `P .. C` when the prompt is shorter than a chunk.
//! Padding lands at positions its song's frames write before they read them (frame `f` writes
//! position `P + f` first and reads `0 ..= P + f`), or, past the song's blocks, in the null block. After the last chunk, its
//! final prompt token's hidden, both rows, goes to the song's state row, and the song runs frames.

use chorus_core::lm_ops::{CopyRowsArgs, GatherArgs, ScatterArgs};
use chorus_core::{BufRole, LmOps, Result};
use chorus_lm::{IntInput, Segment};

/// Prompt tokens per row a frame prefills for a joining song.
pub const PREFILL_CHUNK: usize = 64;

/// Token id of a padding position of a short prompt's chunk (any id of the vocabulary will do:
/// nothing reads what it writes).
pub const PAD_TOKEN: u32 = 0;

/// Where one chunk of a prompt of `len` tokens lies, given `done` tokens already prefilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Position of the chunk's first token.
    pub start: usize,
    /// Prompt tokens prefilled once it has run.
    pub done: usize,
    /// Index within the chunk of the prompt's last token when this chunk ends the prompt.
    pub last: Option<usize>,
}

/// The next chunk of `chunk` tokens of a prompt of `len` tokens with `done` prefilled
/// (`done < len`).
pub fn plan(done: usize, len: usize, chunk: usize) -> ChunkPlan {
    if done + chunk < len {
        return ChunkPlan {
            start: done,
            done: done + chunk,
            last: None,
        };
    }
    let start = len.saturating_sub(chunk);
    ChunkPlan {
        start,
        done: len,
        last: Some(len - 1 - start),
    }
}

/// The per-frame inputs of a chunk (one set per bucket half, like the frame's own).
pub struct ChunkInputs<B: LmOps> {
    /// `[2, chunk]`: the conditional row's tokens, then the unconditional row's.
    pub ids: IntInput<B>,
    /// `[2]`: both rows start at the chunk's position.
    pub start: IntInput<B>,
    /// `[2, max_blocks]`: the song's tables.
    pub tables: IntInput<B>,
    /// `[2]`: the LM output rows of the prompt's last token (any valid row if not the last chunk).
    pub pick: IntInput<B>,
    /// `[1]`: the song's state slot for the last chunk, else the dummy slot.
    pub slot: IntInput<B>,
    pub chunk: usize,
}

impl<B: LmOps> ChunkInputs<B> {
    /// Inputs for chunks of `chunk` tokens per row and block tables of `max_blocks`.
    pub fn new(be: &B, chunk: usize, max_blocks: usize) -> Result<Self> {
        Ok(Self {
            ids: IntInput::new(be, 2 * chunk)?,
            start: IntInput::new(be, 2)?,
            tables: IntInput::new(be, 2 * max_blocks)?,
            pick: IntInput::new(be, 2)?,
            slot: IntInput::new(be, 1)?,
            chunk,
        })
    }

    /// Program op: every input to the device.
    pub fn stage(&mut self, be: &B) -> Result<()> {
        for i in [
            &mut self.ids,
            &mut self.start,
            &mut self.tables,
            &mut self.pick,
            &mut self.slot,
        ] {
            i.stage(be)?;
        }
        Ok(())
    }

    /// The chunk's sequences as the decoder stack takes them after the frame's rows.
    pub fn segment(&self) -> Segment<'_, B> {
        Segment {
            start: &self.start.dev,
            block_tables: &self.tables.dev,
            rows: 2,
            time: self.chunk,
        }
    }
}

/// Shared buffers of the chunk's embedding and hand-over.
pub struct ChunkBufs<B: LmOps> {
    /// `[2 * chunk, hidden]`.
    pub embed: B::Buf,
    /// `[2, hidden]`.
    pub last: B::Buf,
}

impl<B: LmOps> ChunkBufs<B> {
    pub fn new(be: &B, chunk: usize, hidden: usize) -> Result<Self> {
        Ok(Self {
            embed: be.zeros(2 * chunk * hidden, BufRole::Activation)?,
            last: be.zeros(2 * hidden, BufRole::Activation)?,
        })
    }
}

/// Program op pair: the chunk's token embeddings into `residual` from token row `first_row`.
pub fn embed_chunk<B: LmOps>(
    be: &B,
    embed_tokens: &B::Buf,
    c: &ChunkInputs<B>,
    bufs: &mut ChunkBufs<B>,
    (residual, first_row, hidden): (&mut B::Buf, usize, usize),
) -> Result<()> {
    let rows = 2 * c.chunk;
    be.gather_rows(GatherArgs {
        table: embed_tokens,
        ids: &c.ids.dev,
        out: &mut bufs.embed,
        rows,
        dim: hidden,
        rows_per_id: 1,
        ids_stride: 1,
        ids_col: 0,
        offset: 0,
        scale: 1.0,
    })?;
    be.copy_rows(CopyRowsArgs {
        src: &bufs.embed,
        dst: residual,
        rows: 1,
        len: rows * hidden,
        src_offset: 0,
        src_stride: 0,
        dst_offset: first_row * hidden,
        dst_stride: 0,
    })
}

/// Program op pair: the picked rows of the LM's final-normed output into the state row `slot`
/// (the dummy row unless this chunk ends the prompt).
pub fn store_chunk<B: LmOps>(
    be: &B,
    c: &ChunkInputs<B>,
    bufs: &mut ChunkBufs<B>,
    (normed, state, hidden): (&B::Buf, &mut B::Buf, usize),
) -> Result<()> {
    be.gather_rows(GatherArgs {
        table: normed,
        ids: &c.pick.dev,
        out: &mut bufs.last,
        rows: 2,
        dim: hidden,
        rows_per_id: 1,
        ids_stride: 1,
        ids_col: 0,
        offset: 0,
        scale: 1.0,
    })?;
    be.scatter_rows(ScatterArgs {
        src: &bufs.last,
        ids: &c.slot.dev,
        table: state,
        rows: 1,
        dim: 2 * hidden,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_prompt_and_the_last_ends_at_its_last_token() {
        for (len, chunk) in [(300, 64), (64, 64), (65, 64), (3, 64), (128, 64), (10, 4)] {
            let mut done = 0;
            let mut covered = vec![false; len];
            let mut chunks = 0;
            loop {
                let p = plan(done, len, chunk);
                assert!(p.done > done && p.done <= len, "{len} {chunk} {p:?}");
                covered[p.start..(p.start + chunk).min(len)].fill(true);
                // Every position a chunk reads before it was written earlier or in this chunk.
                assert!(p.start <= done, "{len} {chunk} {p:?}");
                done = p.done;
                chunks += 1;
                if let Some(last) = p.last {
                    assert_eq!(p.start + last, len - 1);
                    assert_eq!(done, len);
                    break;
                }
            }
            assert!(covered.iter().all(|&c| c), "{len} {chunk}");
            assert_eq!(chunks, len.div_ceil(chunk), "{len} {chunk}");
        }
    }
}
