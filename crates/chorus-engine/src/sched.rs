//! State shared between stream handles and the engine thread, under one mutex.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use chorus_core::FrameInput;

use crate::engine::{DecoderInfo, EngineConfig};
use crate::error::StreamError;
use crate::metrics::Metrics;
use crate::stream::Outbox;

/// One frame's input, owned.
pub(crate) enum FrameData {
    Codes(Vec<u32>),
    Latent(Vec<f32>),
}

impl Pending {
    /// Whether the item counts against the queue bound.
    pub(crate) fn counts(&self) -> bool {
        !matches!(self, Pending::Reset { ack: None })
    }
}

impl FrameData {
    pub(crate) fn as_input(&self) -> FrameInput<'_> {
        match self {
            Self::Codes(c) => FrameInput::Codes(c),
            Self::Latent(l) => FrameInput::Latent(l),
        }
    }
}

/// An item of a stream's FIFO.
pub(crate) enum Pending {
    Frame {
        index: u64,
        data: FrameData,
        arrived: Instant,
        /// When the frame fell due: its arrival, or one frame period after the stream's previous
        /// frame fell due if it came sooner. Its deadline is one frame period later.
        due: Instant,
    },
    /// Return the slot to the zero state; `ack` is the next frame index for a client reset and
    /// `None` for the reset that starts a new owner.
    Reset { ack: Option<u64> },
    /// Release the slot after every earlier item; `frames` is the count submitted.
    End { frames: u64 },
}

/// The stream that holds a slot.
pub(crate) struct Occupant {
    pub id: u64,
    pub queue: VecDeque<Pending>,
    /// Items of `queue` that count against the bound (all but the new owner's reset).
    pub counted: usize,
    /// Whether `(slot, id)` is in [`Sched::ready`] (a stream is there at most once).
    pub in_ready: bool,
    pub outbox: Arc<Outbox>,
}

pub(crate) struct Sched {
    pub slots: Vec<Option<Occupant>>,
    pub free: VecDeque<usize>,
    /// Streams with queued items, oldest-ready first; entries of released streams are skipped.
    pub ready: VecDeque<(usize, u64)>,
    pub next_id: u64,
    pub draining: bool,
    pub stopped: bool,
    /// Why the device failed: every stream on it was ended and no new one is taken.
    pub failure: Option<String>,
}

pub(crate) struct Shared {
    pub sched: Mutex<Sched>,
    pub wake: Condvar,
    pub metrics: Arc<Metrics>,
    pub config: EngineConfig,
    pub info: DecoderInfo,
    /// The device number that names this engine in errors, health and metrics.
    pub device: usize,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Sched> {
        // A panic elsewhere while holding the lock leaves the queues consistent (no multi-step
        // invariants are broken mid-update), so the poisoned state is still usable.
        self.sched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `items` to the stream's FIFO, all or none.
    pub(crate) fn push(
        &self,
        slot: usize,
        id: u64,
        items: impl ExactSizeIterator<Item = Pending>,
    ) -> Result<(), StreamError> {
        let mut s = self.lock();
        if s.failure.is_some() {
            // Every stream was told the device failed: its outbox says so.
            return Err(StreamError::Finished);
        }
        if s.stopped {
            return Err(StreamError::Stopped);
        }
        let limit = self.config.max_pending_frames;
        let occ = match s.slots[slot].as_mut() {
            Some(o) if o.id == id => o,
            // Released by the engine (slow consumer, failure): the outbox says why.
            _ => return Err(StreamError::Finished),
        };
        if occ.counted + items.len() > limit {
            return Err(StreamError::QueueFull { limit });
        }
        occ.counted += items.len();
        occ.queue.extend(items);
        let enqueue = !occ.in_ready && !occ.queue.is_empty();
        if enqueue {
            occ.in_ready = true;
            s.ready.push_back((slot, id));
            drop(s);
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Frees the slot if `id` still holds it; returns whether it did.
    pub(crate) fn release_locked(s: &mut Sched, slot: usize, id: u64) -> bool {
        if s.slots[slot].as_ref().is_some_and(|o| o.id == id) {
            s.slots[slot] = None;
            s.free.push_back(slot);
            true
        } else {
            false
        }
    }

    pub(crate) fn release(&self, slot: usize, id: u64) -> bool {
        Self::release_locked(&mut self.lock(), slot, id)
    }

    /// The device can no longer decode: ends every stream on it with an error that names the
    /// device and stops the engine (the first failure is the one kept).
    pub(crate) fn fail_device(&self, cause: impl std::fmt::Display) {
        let mut s = self.lock();
        if s.failure.is_some() {
            return;
        }
        let reason = format!("device {} failed: {cause}", self.device);
        for occ in s.slots.iter().flatten() {
            let err = StreamError::DecodeFailed(format!("{reason}; its streams are closed"));
            occ.outbox.fail_counted(err, &self.metrics.errors);
        }
        s.failure = Some(reason);
        s.stopped = true;
        drop(s);
        self.wake.notify_all();
    }

    /// Stops the engine: no more streams or items; every open stream is told.
    pub(crate) fn stop(&self) {
        let mut s = self.lock();
        s.stopped = true;
        for occ in s.slots.iter().flatten() {
            occ.outbox.fail(StreamError::Stopped);
        }
        drop(s);
        self.wake.notify_all();
    }
}
