//! Per-slot encoder state: conv histories, KV rings and positions, a row per slot plus the dummy.

use super::prepare::PreparedEncoder;
use crate::state::{alloc, conv_state, slot_bytes, zero_rows, StateBuf};
use crate::MimiConfig;
use chorus_core::{Backend, ResetRowsArgs, Result, StateBytes};

/// Every stateful layer's rows.
pub struct EncoderState<B: Backend> {
    pub conv_in: Option<StateBuf<B>>,
    /// Per stage: each residual block's first-conv history.
    pub res_history: Vec<Vec<Option<StateBuf<B>>>>,
    /// Per stage: the strided conv's history (super-columns).
    pub down: Vec<Option<StateBuf<B>>>,
    pub conv_out: Option<StateBuf<B>>,
    pub kv: Vec<StateBuf<B>>,
    /// Transformer tokens seen by each slot `[rows]`; 0 marks a fresh slot.
    pub tokens: B::Ints,
    /// The downsampling conv's history, replicate-filled on a slot's first step.
    pub downsample: Option<StateBuf<B>>,
    pub total_rows: usize,
    pub ring: usize,
}

impl<B: Backend> EncoderState<B> {
    /// Allocates zeroed state for `max_slots` slots plus the dummy row.
    pub fn new(
        be: &B,
        cfg: &MimiConfig,
        w: &PreparedEncoder<B>,
        max_slots: usize,
        ring: usize,
    ) -> Result<Self> {
        let rows = max_slots + 1;
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
        let down = w
            .stages
            .iter()
            .map(|s| conv_state(be, rows, &s.down))
            .collect::<Result<Vec<_>>>()?;
        let kv = (0..w.layers.len())
            .map(|_| alloc(be, rows, ring * 2 * cfg.hidden_size))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            conv_in: conv_state(be, rows, &w.conv_in)?,
            res_history,
            down,
            conv_out: conv_state(be, rows, &w.conv_out)?,
            kv,
            tokens: be.ints(rows, 0)?,
            downsample: conv_state(be, rows, &w.downsample)?,
            total_rows: rows,
            ring,
        })
    }

    fn conv_bufs_mut(&mut self) -> impl Iterator<Item = &mut StateBuf<B>> {
        self.conv_in
            .iter_mut()
            .chain(self.res_history.iter_mut().flatten().flatten())
            .chain(self.down.iter_mut().flatten())
            .chain(self.conv_out.iter_mut())
            .chain(self.downsample.iter_mut())
    }

    /// Returns `row` to the zero state at position 0 (stale KV entries are out of every window).
    pub fn reset_row(&mut self, be: &B, row: usize) -> Result<()> {
        zero_rows(be, self.conv_bufs_mut(), row)?;
        be.fill_ints(&mut self.tokens, row, 0)
    }

    /// Program op: the rows listed in `list[..count]` ([`ResetRowsArgs`]) return to the zero state
    /// at position 0, inside a step (the slots it admits), one launch per state buffer.
    pub fn reset_listed(&mut self, be: &B, list: &B::Ints, count: usize) -> Result<()> {
        for s in self.conv_bufs_mut() {
            be.reset_rows(ResetRowsArgs {
                buf: &mut s.buf,
                row_len: s.row_len,
                list,
                count,
                src: None,
            })?;
        }
        be.reset_ints(&mut self.tokens, list, count, 0)
    }

    /// Per-slot bytes, by kind.
    pub fn bytes_per_slot(&mut self, be: &B) -> StateBytes {
        let conv: usize = self.conv_bufs_mut().map(|s| s.row_len).sum();
        slot_bytes(be, conv, &self.kv)
    }
}
