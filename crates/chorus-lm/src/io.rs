//! Per-step integer inputs: a pinned host copy the scheduler fills and a device copy the step
//! program reads, copied at the program's start.

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
