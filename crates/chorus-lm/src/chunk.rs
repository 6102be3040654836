//! Chunked prefill, for every model: a request that joins while others run has its prompt
//! prefilled in chunks of `C` tokens per row, each inside one frame of the running requests, its
//! tokens after their decode rows in the same products (one pass over the weights serves both),
//! so a join costs the running requests a few wider frames instead of one long stall.
//!
//! Chunk `i` covers positions `i C .. (i + 1) C`. The last one ends at the prompt's end: it
//! starts at `P - C` when `P >= C` (recomputing positions an earlier chunk wrote, from the same
//! tokens), or at 0 with padding tokens at `P .. C` when the prompt is shorter than a chunk.
//! Padding lands at positions the request's frames write before they read them (frame `f` writes
//! position `P + f` first and reads `0 ..= P + f`), or, past its blocks, in the null block. After
//! the last chunk, its final prompt token's hidden, every row of the request, goes to the
//! request's state row, and the request runs frames.
//!
//! A request has `rows` sequences (2 for a model with classifier-free guidance, 1 otherwise);
//! each prompt position is `width` ids (1 token id, or a model's own columns, such as text and
//! codes). The model embeds the chunk into `ChunkBufs::embed` its own way ([`embed_chunk`] for
//! token ids); the rest is here.

use chorus_core::lm_ops::{CopyRowsArgs, GatherArgs, ScatterArgs};
use chorus_core::{BufRole, LmOps, Result};

use crate::io::IntInput;
use crate::seats::{Seat, Seats};
use crate::Segment;

/// Prompt tokens per row a frame prefills for a joining request.
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
    /// `[rows, chunk, width]`: each row's ids, row after row (a model with guidance: the
    /// conditional row, then the unconditional one).
    pub ids: IntInput<B>,
    /// `[rows]`: every row starts at the chunk's position.
    pub start: IntInput<B>,
    /// `[rows, max_blocks]`: the request's tables.
    pub tables: IntInput<B>,
    /// `[rows]`: the LM output rows of the prompt's last token (any valid row if not the last
    /// chunk).
    pub pick: IntInput<B>,
    /// `[1]`: the request's state slot for the last chunk, else the dummy slot.
    pub slot: IntInput<B>,
    pub chunk: usize,
    pub rows: usize,
    pub width: usize,
}

/// Where a staged chunk goes ([`ChunkInputs::fill`]).
pub struct ChunkTarget<'a> {
    pub plan: ChunkPlan,
    /// The joining request's seat (`None`: a chunk of padding alone, for warm-up).
    pub seat: Option<&'a Seat>,
    /// Rows of the frame the chunk's tokens follow in the LM step.
    pub frame_rows: usize,
    /// The dummy state slot (the hand-over's target unless the chunk ends the prompt).
    pub dummy_slot: usize,
}

impl<B: LmOps> ChunkInputs<B> {
    /// Inputs for chunks of `chunk` positions of `width` ids for each of a request's `rows`
    /// rows, and block tables of `max_blocks`.
    pub fn new(
        be: &B,
        (chunk, rows, width): (usize, usize, usize),
        max_blocks: usize,
    ) -> Result<Self> {
        Ok(Self {
            ids: IntInput::new(be, rows * chunk * width)?,
            start: IntInput::new(be, rows)?,
            tables: IntInput::new(be, rows * max_blocks)?,
            pick: IntInput::new(be, rows)?,
            slot: IntInput::new(be, 1)?,
            chunk,
            rows,
            width,
        })
    }

    /// Writes everything but the ids (the model writes those): the chunk's position, the seat's
    /// tables, the rows of its last token and the state slot that takes them.
    pub fn fill(&mut self, be: &B, seats: &Seats, t: &ChunkTarget<'_>) {
        let n = self.chunk;
        be.pinned_ints_nowait(&mut self.start.host)
            .fill(t.plan.start as i32);
        seats.fill_tables(t.seat, be.pinned_ints_nowait(&mut self.tables.host));
        let last = t.plan.last.unwrap_or(0);
        for (r, v) in be
            .pinned_ints_nowait(&mut self.pick.host)
            .iter_mut()
            .enumerate()
        {
            // Row `r`'s tokens follow the frame's rows in the LM step.
            *v = (t.frame_rows + r * n + last) as i32;
        }
        let slot = match (t.seat, t.plan.last) {
            (Some(s), Some(_)) => s.slot,
            _ => t.dummy_slot,
        };
        be.pinned_ints_nowait(&mut self.slot.host)[0] = slot as i32;
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
            rows: self.rows,
            time: self.chunk,
        }
    }
}

/// Shared buffers of the chunk's embedding and hand-over.
pub struct ChunkBufs<B: LmOps> {
    /// `[rows * chunk, hidden]`.
    pub embed: B::Buf,
    /// `[rows, hidden]`.
    pub last: B::Buf,
    pub rows: usize,
}

impl<B: LmOps> ChunkBufs<B> {
    /// Buffers for chunks of `chunk` positions of a request's `rows` rows.
    pub fn new(be: &B, (chunk, rows): (usize, usize), hidden: usize) -> Result<Self> {
        Ok(Self {
            embed: be.zeros(rows * chunk * hidden, BufRole::Activation)?,
            last: be.zeros(rows * hidden, BufRole::Activation)?,
            rows,
        })
    }
}

/// Program op pair: the chunk's token embeddings (`width` 1) into `residual` from token row
/// `first_row`.
pub fn embed_chunk<B: LmOps>(
    be: &B,
    embed_tokens: &B::Buf,
    c: &ChunkInputs<B>,
    bufs: &mut ChunkBufs<B>,
    (residual, first_row, hidden): (&mut B::Buf, usize, usize),
) -> Result<()> {
    be.gather_rows(GatherArgs::lookup(
        embed_tokens,
        &c.ids.dev,
        &mut bufs.embed,
        (c.rows * c.chunk, hidden),
    ))?;
    place_chunk(be, c, bufs, (residual, first_row, hidden))
}

/// Program op: the chunk's embedded positions (`bufs.embed`, however the model made them) into
/// `residual` from token row `first_row`, after the frame's rows.
pub fn place_chunk<B: LmOps>(
    be: &B,
    c: &ChunkInputs<B>,
    bufs: &ChunkBufs<B>,
    (residual, first_row, hidden): (&mut B::Buf, usize, usize),
) -> Result<()> {
    let rows = c.rows * c.chunk;
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
    be.gather_rows(GatherArgs::lookup(
        normed,
        &c.pick.dev,
        &mut bufs.last,
        (c.rows, hidden),
    ))?;
    be.scatter_rows(ScatterArgs {
        src: &bufs.last,
        ids: &c.slot.dev,
        table: state,
        rows: 1,
        dim: c.rows * hidden,
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
