//! The engine thread: picks the ready streams, runs resets and the step, hands out PCM.
//!
//! With a pipelined decoder the thread keeps one step queued on the device: it picks and stages
//! step N + 1 and launches it behind step N, then waits for step N and hands its PCM out, so the
//! device never idles while the host works. Stream ends are told only after the step holding
//! their last frame has been handed out.
//!
//! A step that fails on the device ends the streams in it; the engine then resets one of their
//! slots, and when even that fails the device is taken as failed: every stream on it is ended
//! with an error naming the device and the thread stops (the other devices of a pool go on).

use std::fmt::Display;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{Error, Frame, FrameDecoder, StepDone};

use crate::error::StreamError;
use crate::handout::{deliver, deliver_all, fail, leaves_state_unchanged, Dropped, Picked};
use crate::pcm::{PcmFrame, PcmPool};
use crate::sched::{Pending, Sched, Shared};
use crate::stream::Outbox;

/// A reset to run before the step.
struct ResetJob {
    slot: usize,
    id: u64,
    ack: Option<u64>,
    outbox: Arc<Outbox>,
}

/// The engine thread's state: the decoder and buffers reused across steps.
pub(crate) struct EngineLoop {
    shared: Arc<Shared>,
    decoder: Box<dyn FrameDecoder>,
    largest: usize,
    /// See [`crate::EngineConfig::max_resets_per_step`].
    max_resets: usize,
    pcm: PcmPool,
    batch: Vec<Picked>,
    resets: Vec<ResetJob>,
    finishes: Vec<(Arc<Outbox>, u64)>,
    /// Reset acknowledgements, told with the ends: after the PCM of every frame before them.
    acks: Vec<(Arc<Outbox>, u64)>,
    requeue: Vec<(usize, u64)>,
    /// Streams to end after the step (slow consumers, failures).
    dropped: Vec<Dropped>,
    /// Pipelined decoders: the frames of the step queued on the device, and when it was launched.
    queued: Vec<Picked>,
    queued_at: Option<Instant>,
    pipelined: bool,
    /// Engine-thread host time spent since the last step was handed out.
    host: Duration,
    /// The device failed: every stream was told, nothing more is decoded.
    failed: bool,
}

impl EngineLoop {
    pub(crate) fn new(shared: Arc<Shared>, decoder: Box<dyn FrameDecoder>) -> Self {
        let largest = shared.info.largest_batch;
        let max_resets = shared.config.max_resets_per_step;
        let pipelined = decoder.pipeline_depth() >= 2;
        Self {
            shared,
            decoder,
            largest,
            max_resets,
            pcm: PcmPool::new(largest),
            batch: Vec::with_capacity(largest),
            resets: Vec::with_capacity(max_resets),
            finishes: Vec::with_capacity(largest),
            acks: Vec::with_capacity(largest),
            requeue: Vec::with_capacity(largest),
            dropped: Vec::with_capacity(largest),
            queued: Vec::with_capacity(largest),
            queued_at: None,
            pipelined,
            host: Duration::ZERO,
            failed: false,
        }
    }

    pub(crate) fn run(mut self) {
        loop {
            {
                let shared = self.shared.clone();
                let mut s = shared.lock();
                // With a step queued, take whatever is ready now rather than wait for more.
                while s.ready.is_empty() && !s.stopped && self.queued_at.is_none() {
                    s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.stopped {
                    drop(s);
                    if self.queued_at.is_some() {
                        self.finish_queued();
                    }
                    return;
                }
                let picking = Instant::now();
                self.select(&mut s);
                self.host += picking.elapsed();
            }
            let started = Instant::now();
            let stepped = !self.batch.is_empty();
            self.run_resets();
            if self.failed {
                // Their streams were told: nothing more runs on this device.
                self.batch.clear();
            }
            if self.pipelined {
                // Launch this step behind the queued one, then hand the queued one out.
                let launched = !self.batch.is_empty() && self.launch();
                self.host += started.elapsed();
                if self.queued_at.is_some() {
                    self.finish_queued();
                }
                if launched {
                    std::mem::swap(&mut self.queued, &mut self.batch);
                    self.queued_at = Some(started);
                }
            } else if !self.batch.is_empty() {
                self.tell_acks();
                self.step();
            }
            // Failures first: a stream whose last frames failed must not be told a clean end.
            self.end_dropped();
            // Acks and ends come after the PCM of every frame before them has been handed out.
            self.tell_acks();
            for (outbox, frames) in self.finishes.drain(..) {
                outbox.finish(frames);
            }
            if !self.pipelined && stepped {
                // One step a loop: the host work is the picking and resets before it.
                let metrics = &self.shared.metrics;
                metrics.host_seconds.observe(self.host.as_secs_f64());
                self.host = Duration::ZERO;
            }
        }
    }

    /// Releases the slots of the streams ended by failures or slow reading, then tells them.
    fn end_dropped(&mut self) {
        if self.dropped.is_empty() {
            return;
        }
        let mut s = self.shared.lock();
        for d in &self.dropped {
            Shared::release_locked(&mut s, d.slot, d.id);
        }
        drop(s);
        for d in self.dropped.drain(..) {
            // A stream already ended (its device failed) keeps its first reason and count.
            d.outbox.fail_counted(d.err, &self.shared.metrics.errors);
        }
    }

    /// Queues the picked frames as one step; `false` when nothing was queued (a refused batch is
    /// then decoded frame by frame, after the queued step, so that only the frame at fault fails).
    fn launch(&mut self) -> bool {
        let now = Instant::now();
        for p in &self.batch {
            let delay = now.duration_since(p.arrived).as_secs_f64();
            self.shared.metrics.queue_delay_seconds.observe(delay);
        }
        let frames: Vec<Frame<'_>> = self
            .batch
            .iter()
            .map(|p| Frame {
                slot: p.slot,
                input: p.data.as_input(),
            })
            .collect();
        let result = self.decoder.launch_step(&frames);
        drop(frames);
        match result {
            Ok(()) => true,
            Err(e) if leaves_state_unchanged(&e) => {
                if self.queued_at.is_some() {
                    self.finish_queued();
                }
                self.tell_acks();
                self.decode_one_by_one();
                self.batch.clear();
                false
            }
            Err(e) => {
                for p in &self.batch {
                    fail(p, &e, &mut self.dropped);
                }
                let first = self.batch.first().map(|p| p.slot);
                self.batch.clear();
                if let Some(slot) = first {
                    self.check_device(slot, &e);
                }
                false
            }
        }
    }

    /// Waits for the queued step and hands its PCM out.
    fn finish_queued(&mut self) {
        let Some(launched) = self.queued_at.take() else {
            return;
        };
        let Self {
            shared,
            decoder,
            pcm,
            queued,
            dropped,
            host,
            ..
        } = self;
        let metrics = &shared.metrics;
        let mut fault = None;
        let result = decoder.finish_step(pcm.writable(queued.len()));
        let handing = Instant::now();
        metrics
            .step_seconds
            .observe(launched.elapsed().as_secs_f64());
        metrics.batch_size.observe(queued.len() as f64);
        match result {
            Ok(StepDone { device_seconds, .. }) => {
                metrics.device_seconds.observe(device_seconds);
                deliver_all(shared, queued, pcm, dropped);
            }
            Err(e) => {
                for p in queued.iter() {
                    fail(p, &e, dropped);
                }
                fault = queued.first().map(|p| (p.slot, e));
            }
        }
        queued.clear();
        *host += handing.elapsed();
        metrics.host_seconds.observe(host.as_secs_f64());
        *host = Duration::ZERO;
        if let Some((slot, e)) = fault {
            self.check_device(slot, &e);
        }
        // A stream this step failed is told so before any reset ack or end picked behind it.
        self.end_dropped();
        // Resets picked with the next step follow every frame of this one.
        self.tell_acks();
    }

    /// Tells the streams whose reset ran that it is done, in order with their PCM: called after
    /// the last step holding frames from before the reset was handed out, and before any frame
    /// from after it.
    fn tell_acks(&mut self) {
        for (outbox, next) in self.acks.drain(..) {
            outbox.push_reset_done(next);
        }
    }

    /// Decodes each picked frame alone (synchronously), so that only a frame at fault fails.
    fn decode_one_by_one(&mut self) {
        let Self {
            shared,
            decoder,
            pcm,
            batch,
            dropped,
            ..
        } = self;
        let mut fault = None;
        for p in batch.iter() {
            let frame = Frame {
                slot: p.slot,
                input: p.data.as_input(),
            };
            let row = pcm.writable(1);
            match decoder.step(std::slice::from_ref(&frame), row) {
                // A copy: one row must not hold a whole block (this path is rare).
                Ok(()) => deliver(shared, p, PcmFrame::from_samples(row), dropped),
                Err(e) => {
                    fail(p, &e, dropped);
                    if fault.is_none() && !leaves_state_unchanged(&e) {
                        fault = Some((p.slot, e));
                    }
                }
            }
        }
        if let Some((slot, e)) = fault {
            self.check_device(slot, &e);
        }
    }

    /// Takes one frame from each ready stream, oldest-ready first, up to the largest batch; runs
    /// the resets and ends that precede each stream's frame in its FIFO.
    fn select(&mut self, s: &mut Sched) {
        while self.batch.len() < self.largest {
            let Some((slot, id)) = s.ready.pop_front() else {
                break;
            };
            let Some(occ) = s.slots[slot].as_mut().filter(|o| o.id == id) else {
                continue;
            };
            occ.in_ready = false;
            let mut ended = false;
            while let Some(item) = occ.queue.pop_front() {
                if matches!(item, Pending::Reset { .. }) && self.resets.len() >= self.max_resets {
                    // This step's resets are spent: the stream waits, its reset first, for the
                    // next step (it is requeued below, behind the streams already waiting).
                    occ.queue.push_front(item);
                    break;
                }
                if item.counts() {
                    occ.counted -= 1;
                }
                match item {
                    Pending::Reset { ack } => self.resets.push(ResetJob {
                        slot,
                        id,
                        ack,
                        outbox: occ.outbox.clone(),
                    }),
                    Pending::End { frames } => {
                        self.finishes.push((occ.outbox.clone(), frames));
                        ended = true;
                        break;
                    }
                    Pending::Frame {
                        index,
                        data,
                        arrived,
                        due,
                    } => {
                        self.batch.push(Picked {
                            slot,
                            id,
                            index,
                            data,
                            arrived,
                            due,
                            outbox: occ.outbox.clone(),
                        });
                        break;
                    }
                }
            }
            if ended {
                // Every earlier frame was decoded by an earlier step or is queued ahead of
                // anything the next owner sends (its reset runs behind it on the device), and
                // the end is told only after that step's PCM: releasing now is safe.
                Shared::release_locked(s, slot, id);
            } else if !occ.queue.is_empty() {
                occ.in_ready = true;
                self.requeue.push((slot, id));
            }
        }
        // Streams with more queued go behind everyone already waiting.
        s.ready.extend(self.requeue.drain(..));
    }

    fn run_resets(&mut self) {
        let mut fault = None;
        for job in self.resets.drain(..) {
            if fault.is_some() {
                // The device failed: every stream on it is told so below.
                continue;
            }
            match self.decoder.reset(job.slot) {
                Ok(()) => {
                    if let Some(next) = job.ack {
                        self.acks.push((job.outbox, next));
                    }
                }
                Err(e) if leaves_state_unchanged(&e) => self.dropped.push(Dropped {
                    slot: job.slot,
                    id: job.id,
                    outbox: job.outbox,
                    err: StreamError::DecodeFailed(format!("reset failed: {e}")),
                }),
                // A device that cannot zero a slot cannot decode anything.
                Err(e) => fault = Some(format!("resetting slot {}: {e}", job.slot)),
            }
        }
        if let Some(cause) = fault {
            self.device_failed(cause);
        }
    }

    /// After a step failed on the device with `cause`: resets `slot` (one of the failed streams',
    /// reset again before its next owner anyway) to learn whether the device still works.
    fn check_device(&mut self, slot: usize, cause: &Error) {
        if self.failed {
            return;
        }
        if let Err(probe) = self.decoder.reset(slot) {
            self.device_failed(format!("{cause}; then resetting slot {slot}: {probe}"));
        }
    }

    /// Ends every stream on the device with an error naming it; the loop stops after this pass.
    fn device_failed(&mut self, cause: impl Display) {
        self.failed = true;
        self.shared.fail_device(cause);
    }

    fn step(&mut self) {
        let Self {
            shared,
            decoder,
            pcm,
            batch,
            dropped,
            ..
        } = self;
        let n = batch.len();
        let metrics = &shared.metrics;
        let started = Instant::now();
        for p in batch.iter() {
            metrics
                .queue_delay_seconds
                .observe(started.duration_since(p.arrived).as_secs_f64());
        }
        let frames: Vec<Frame<'_>> = batch
            .iter()
            .map(|p| Frame {
                slot: p.slot,
                input: p.data.as_input(),
            })
            .collect();
        let result = decoder.step(&frames, pcm.writable(n));
        let took = started.elapsed().as_secs_f64();
        metrics.step_seconds.observe(took);
        // A synchronous step's device time is its whole time.
        metrics.device_seconds.observe(took);
        metrics.batch_size.observe(n as f64);
        match result {
            Ok(()) => deliver_all(shared, batch, pcm, dropped),
            Err(e) if leaves_state_unchanged(&e) => {
                // The step validated and refused the batch before touching any state: decode
                // each frame alone so that only the frame at fault fails.
                drop(frames);
                self.decode_one_by_one();
                self.batch.clear();
                return;
            }
            Err(e) => {
                // State of every slot in the batch may be half-updated: end those streams (their
                // slots are reset for the next owner) and keep every other stream.
                for p in batch.iter() {
                    fail(p, &e, dropped);
                }
                let first = batch.first().map(|p| p.slot);
                drop(frames);
                batch.clear();
                if let Some(slot) = first {
                    self.check_device(slot, &e);
                }
                return;
            }
        }
        drop(frames);
        batch.clear();
    }
}
