//! Who holds each slot of a decoder (or encoder): nobody, a stream (with the generation it was
//! opened with), or a running whole-sequence call.
//!
//! A stream's calls carry its generation and are checked on the decoder thread, in order with
//! the resets of newly opened streams, so a stream closed under a running call can never touch the
//! slot's next owner. A decode that finds no free slot, or a stream opening while decodes hold
//! every free one, waits for a decode to end; only slots held by streams make them fail.

use std::sync::{Condvar, Mutex, MutexGuard};

use chorus_core::{Error, Result};
use pyo3::{PyResult, Python};

use crate::errors::IntoPy;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    Free,
    Stream(u64),
    Decode,
}

struct Table {
    holders: Vec<Holder>,
    next_generation: u64,
}

/// The slot table of one decoder or encoder.
pub struct SlotTable {
    table: Mutex<Table>,
    freed: Condvar,
    /// Named in errors (`Decoder.slots`, `Encoder.slots`).
    op: &'static str,
}

/// Slots leased by a whole-sequence decode, returned however it ends.
pub struct Lease<'a> {
    owner: &'a SlotTable,
    pub slots: Vec<usize>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut t = self.owner.lock();
        for &s in &self.slots {
            t.holders[s] = Holder::Free;
        }
        drop(t);
        self.owner.freed.notify_all();
    }
}

impl SlotTable {
    pub fn new(slots: usize, op: &'static str) -> Self {
        Self {
            op,
            table: Mutex::new(Table {
                holders: vec![Holder::Free; slots],
                next_generation: 1,
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table is plain flags, consistent even after a panic elsewhere.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `pick` finds slots, or fails once only streams hold the rest.
    fn wait_for<T>(
        &self,
        mut pick: impl FnMut(&mut Table) -> Option<T>,
        full: impl Fn(usize) -> String,
    ) -> Result<T> {
        let mut t = self.lock();
        loop {
            if let Some(got) = pick(&mut t) {
                return Ok(got);
            }
            if !t.holders.contains(&Holder::Decode) {
                return Err(Error::input(self.op, full(t.holders.len())));
            }
            t = self.freed.wait(t).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Takes a free slot for a new stream: `(slot, generation)`.
    pub fn open(&self) -> Result<(usize, u64)> {
        self.wait_for(
            |t| {
                let slot = t.holders.iter().position(|h| *h == Holder::Free)?;
                let generation = t.next_generation;
                t.next_generation += 1;
                t.holders[slot] = Holder::Stream(generation);
                Some((slot, generation))
            },
            |n| format!("all {n} streams are open; close one or raise max_streams"),
        )
    }

    /// Takes a free slot for a new stream (waiting without the GIL) and readies it with `reset`,
    /// which runs on the model's thread; a slot whose reset fails goes back to the pool.
    pub fn open_reset(
        &self,
        py: Python<'_>,
        reset: impl FnOnce(usize) -> PyResult<()>,
    ) -> PyResult<(usize, u64)> {
        let (slot, generation) = py.detach(|| self.open()).py_err()?;
        if let Err(e) = reset(slot) {
            self.close(slot, generation).py_err()?;
            return Err(e);
        }
        Ok((slot, generation))
    }

    /// Leases up to `want` free slots (at least one) for a whole-sequence decode.
    pub fn lease(&self, want: usize) -> Result<Lease<'_>> {
        let slots = self.wait_for(
            |t| {
                let free: Vec<usize> = (0..t.holders.len())
                    .filter(|&s| t.holders[s] == Holder::Free)
                    .take(want.max(1))
                    .collect();
                if free.is_empty() {
                    return None;
                }
                for &s in &free {
                    t.holders[s] = Holder::Decode;
                }
                Some(free)
            },
            |n| {
                format!(
                    "all {n} slots are held by open streams; close a stream or raise max_streams"
                )
            },
        )?;
        Ok(Lease { owner: self, slots })
    }

    /// Fails unless the stream opened as `generation` still holds `slot`.
    pub fn check(&self, slot: usize, generation: u64) -> Result<()> {
        match self.lock().holders.get(slot) {
            Some(Holder::Stream(g)) if *g == generation => Ok(()),
            _ => Err(Error::input(
                self.op,
                format!("stream in slot {slot} is closed (or not a stream of this decoder)"),
            )),
        }
    }

    /// Returns a stream's slot to the pool.
    pub fn close(&self, slot: usize, generation: u64) -> Result<()> {
        self.check(slot, generation)?;
        self.lock().holders[slot] = Holder::Free;
        self.freed.notify_all();
        Ok(())
    }

    /// Streams open now (decode leases not counted).
    pub fn streams(&self) -> usize {
        self.lock()
            .holders
            .iter()
            .filter(|h| matches!(h, Holder::Stream(_)))
            .count()
    }
}
