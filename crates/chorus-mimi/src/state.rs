//! Per-slot streaming state: one buffer per stateful layer, a row per slot plus the dummy row.

use crate::prepare::{PreparedConv, PreparedConvTr, PreparedUp, PreparedWeights};
use crate::MimiConfig;
use chorus_core::{Backend, BufRole, Result, StateBytes};

/// A state buffer and the elements of one of its rows.
pub struct StateBuf<B: Backend> {
    pub buf: B::Buf,
    pub row_len: usize,
}

/// Every stateful layer's rows.
pub struct SlotState<B: Backend> {
    /// Upsample tail `[rows, kernel - stride, hidden]`.
    pub upsample: StateBuf<B>,
    /// One KV ring per layer `[rows, ring, 2, hidden]`.
    pub kv: Vec<StateBuf<B>>,
    /// Tokens seen by each slot `[rows]`.
    pub tokens: B::Ints,
    /// First conv history `[rows, history, c_in]`.
    pub conv_in: Option<StateBuf<B>>,
    /// Per stage: transposed-conv tail, then each residual block's first-conv history.
    pub stage_tails: Vec<StateBuf<B>>,
    pub res_history: Vec<Vec<Option<StateBuf<B>>>>,
    /// Last conv history.
    pub conv_out: Option<StateBuf<B>>,
    /// `max_slots + 1`.
    pub total_rows: usize,
    /// KV ring entries per slot: at least the window plus the tokens of one step, less one.
    pub ring: usize,
}

pub(crate) fn alloc<B: Backend>(be: &B, rows: usize, row_len: usize) -> Result<StateBuf<B>> {
    Ok(StateBuf {
        buf: be.zeros(rows * row_len, BufRole::State)?,
        row_len,
    })
}

pub(crate) fn conv_state<B: Backend>(
    be: &B,
    rows: usize,
    c: &PreparedConv<B>,
) -> Result<Option<StateBuf<B>>> {
    let history = (c.kernel - 1) * c.dilation;
    if history == 0 {
        return Ok(None);
    }
    alloc(be, rows, history * c.c_in).map(Some)
}

fn tail_state<B: Backend>(be: &B, rows: usize, c: &PreparedConvTr<B>) -> Result<StateBuf<B>> {
    alloc(be, rows, (c.kernel - c.stride) * c.c_out)
}

/// A stage's upsampling state: the output tail of a transposed convolution, or the one input
/// column the phase form looks back at.
fn up_state<B: Backend>(be: &B, rows: usize, up: &PreparedUp<B>) -> Result<StateBuf<B>> {
    match up {
        PreparedUp::Transposed(c) => tail_state(be, rows, c),
        PreparedUp::Phases { conv, .. } => alloc(be, rows, (conv.kernel - 1) * conv.c_in),
    }
}

impl<B: Backend> SlotState<B> {
    /// Allocates zeroed state for `max_slots` slots plus the dummy row, with `ring` KV entries.
    pub fn new(
        be: &B,
        cfg: &MimiConfig,
        w: &PreparedWeights<B>,
        max_slots: usize,
        ring: usize,
    ) -> Result<Self> {
        let rows = max_slots + 1;
        let kv = (0..w.layers.len())
            .map(|_| alloc(be, rows, ring * 2 * cfg.hidden_size))
            .collect::<Result<Vec<_>>>()?;
        let stage_tails = w
            .stages
            .iter()
            .map(|s| up_state(be, rows, &s.convtr))
            .collect::<Result<Vec<_>>>()?;
        let res_history = w
            .stages
            .iter()
            .map(|s| {
                s.resblocks
                    .iter()
                    .map(|b| conv_state(be, rows, &b.conv1))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            upsample: tail_state(be, rows, &w.upsample)?,
            kv,
            tokens: be.ints(rows, 0)?,
            conv_in: conv_state(be, rows, &w.conv_in)?,
            stage_tails,
            res_history,
            conv_out: conv_state(be, rows, &w.conv_out)?,
            total_rows: rows,
            ring,
        })
    }

    fn conv_bufs_mut(&mut self) -> impl Iterator<Item = &mut StateBuf<B>> {
        std::iter::once(&mut self.upsample)
            .chain(self.conv_in.iter_mut())
            .chain(self.stage_tails.iter_mut())
            .chain(self.res_history.iter_mut().flatten().flatten())
            .chain(self.conv_out.iter_mut())
    }

    /// Returns `row` to the zero state: conv rows zeroed, position 0. The KV ring keeps stale
    /// entries, which no query can see since positions restart at 0.
    pub fn reset_row(&mut self, be: &B, row: usize) -> Result<()> {
        zero_rows(be, self.conv_bufs_mut(), row)?;
        be.fill_ints(&mut self.tokens, row, 0)
    }

    /// Per-slot bytes, by kind.
    pub fn bytes_per_slot(&mut self, be: &B) -> StateBytes {
        let conv: usize = self.conv_bufs_mut().map(|s| s.row_len).sum();
        slot_bytes(be, conv, &self.kv)
    }
}

/// Zeroes `row` of every conv state buffer in `convs` (no host sync).
pub(crate) fn zero_rows<'a, B: Backend + 'a>(
    be: &B,
    convs: impl Iterator<Item = &'a mut StateBuf<B>>,
    row: usize,
) -> Result<()> {
    for s in convs {
        be.zero_row(&mut s.buf, row, s.row_len)?;
    }
    Ok(())
}

/// Per-slot bytes of `conv` conv-state elements and the KV rings `kv`.
pub(crate) fn slot_bytes<B: Backend>(be: &B, conv: usize, kv: &[StateBuf<B>]) -> StateBytes {
    let per = be.bytes_per_element(BufRole::State);
    let kv: usize = kv.iter().map(|s| s.row_len).sum();
    StateBytes {
        conv: conv * per,
        kv: kv * per,
        index: std::mem::size_of::<i32>(),
    }
}
