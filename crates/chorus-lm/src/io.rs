//! Per-step integer inputs: a pinned host copy the scheduler fills and a device copy the step
//! program reads, copied at the program's start; and the prefill's hand-over of its last hidden
//! to the request's state row.

use chorus_core::lm_ops::{CopyRowsArgs, ScatterArgs};
use chorus_core::{LmOps, Result};

/// One named integer input: host side (pinned) and device side.
pub struct IntInput<B: LmOps> {
    pub host: B::PinnedInts,
    pub dev: B::Ints,
    pub len: usize,
}

impl<B: LmOps> IntInput<B> {
    /// `len` ints on both sides, zero-filled.
    pub fn new(be: &B, len: usize) -> Result<Self> {
        Ok(Self {
            host: be.pinned_ints(len)?,
            dev: be.ints(len, 0)?,
            len,
        })
    }

    /// The host side, for the scheduler to fill before a step.
    pub fn host<'a>(&'a mut self, be: &B) -> Result<&'a mut [i32]> {
        be.pinned_ints_mut(&mut self.host)
    }

    /// Program op: host to device.
    pub fn stage(&mut self, be: &B) -> Result<()> {
        be.copy_in_ints(&self.host, &mut self.dev, self.len)
    }
}

/// A prefill's last hidden into its request's state row ([`store_last_hidden`]).
pub struct LastHidden<'a, B: LmOps> {
    /// `[rows * len, hidden]`: the final-normed hidden of every prompt token, row-major.
    pub normed: &'a B::Buf,
    /// `[rows, hidden]` scratch.
    pub last: &'a mut B::Buf,
    /// `[1]`: the request's state slot.
    pub slot: &'a B::Ints,
    /// `[slots + 1, rows * hidden]`: each request's last hidden, all its rows.
    pub state: &'a mut B::Buf,
    pub rows: usize,
    pub len: usize,
    pub hidden: usize,
}

/// Program op pair: the last prompt token's hidden of each row, into the request's state row.
pub fn store_last_hidden<B: LmOps>(be: &B, a: LastHidden<'_, B>) -> Result<()> {
    let (rows, len, h) = (a.rows, a.len, a.hidden);
    be.copy_rows(CopyRowsArgs {
        src: a.normed,
        dst: a.last,
        rows,
        len: h,
        src_offset: (len - 1) * h,
        src_stride: len * h,
        dst_offset: 0,
        dst_stride: h,
    })?;
    be.scatter_rows(ScatterArgs {
        src: a.last,
        ids: a.slot,
        table: a.state,
        rows: 1,
        dim: rows * h,
    })
}
