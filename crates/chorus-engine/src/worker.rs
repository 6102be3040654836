//! The engine thread: picks the ready streams, runs resets and the step, hands out PCM.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{Error, Frame, FrameDecoder, FRAME_MS, FRAME_SAMPLES};

use crate::error::StreamError;
use crate::sched::{FrameData, Pending, Sched, Shared};
use crate::stream::Outbox;

/// One frame picked for the next step.
struct Picked {
    slot: usize,
    id: u64,
    index: u64,
    data: FrameData,
    arrived: Instant,
    outbox: Arc<Outbox>,
}

/// A reset to run before the step.
struct ResetJob {
    slot: usize,
    id: u64,
    ack: Option<u64>,
    outbox: Arc<Outbox>,
}

/// A stream the engine ends: its slot is released before it is told, so that a client that
/// reconnects at once finds the slot free.
struct Dropped {
    slot: usize,
    id: u64,
    outbox: Arc<Outbox>,
    err: StreamError,
}

/// The engine thread's state: the decoder and buffers reused across steps.
pub(crate) struct EngineLoop {
    shared: Arc<Shared>,
    decoder: Box<dyn FrameDecoder>,
    largest: usize,
    pcm: Vec<f32>,
    batch: Vec<Picked>,
    resets: Vec<ResetJob>,
    finishes: Vec<(Arc<Outbox>, u64)>,
    requeue: Vec<(usize, u64)>,
    /// Streams to end after the step (slow consumers, failures).
    dropped: Vec<Dropped>,
}

impl EngineLoop {
    pub(crate) fn new(shared: Arc<Shared>, decoder: Box<dyn FrameDecoder>) -> Self {
        let largest = shared.info.largest_batch;
        Self {
            shared,
            decoder,
            largest,
            pcm: vec![0.0; largest * FRAME_SAMPLES],
            batch: Vec::with_capacity(largest),
            resets: Vec::with_capacity(largest),
            finishes: Vec::with_capacity(largest),
            requeue: Vec::with_capacity(largest),
            dropped: Vec::with_capacity(largest),
        }
    }

    pub(crate) fn run(mut self) {
        loop {
            {
                let shared = self.shared.clone();
                let mut s = shared.lock();
                while s.ready.is_empty() && !s.stopped {
                    s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.stopped {
                    return;
                }
                self.select(&mut s);
            }
            self.run_resets();
            for (outbox, frames) in self.finishes.drain(..) {
                outbox.finish(frames);
            }
            if !self.batch.is_empty() {
                self.step();
            }
            if !self.dropped.is_empty() {
                let mut s = self.shared.lock();
                for d in &self.dropped {
                    Shared::release_locked(&mut s, d.slot, d.id);
                }
                drop(s);
                for d in self.dropped.drain(..) {
                    self.shared.metrics.errors.inc(d.err.code());
                    d.outbox.fail(d.err);
                }
            }
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
                    } => {
                        self.batch.push(Picked {
                            slot,
                            id,
                            index,
                            data,
                            arrived,
                            outbox: occ.outbox.clone(),
                        });
                        break;
                    }
                }
            }
            if ended {
                // Every earlier frame was delivered by an earlier step; the next owner's reset
                // runs on this thread, so releasing now is safe.
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
        for job in self.resets.drain(..) {
            match self.decoder.reset(job.slot) {
                Ok(()) => {
                    if let Some(next) = job.ack {
                        job.outbox.push_reset_done(next);
                    }
                }
                Err(e) => self.dropped.push(Dropped {
                    slot: job.slot,
                    id: job.id,
                    outbox: job.outbox,
                    err: StreamError::DecodeFailed(format!("reset failed: {e}")),
                }),
            }
        }
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
        let result = decoder.step(&frames, &mut pcm[..n * FRAME_SAMPLES]);
        metrics
            .step_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.batch_size.observe(n as f64);
        match result {
            Ok(()) => {
                for (i, p) in batch.iter().enumerate() {
                    deliver(
                        shared,
                        p,
                        &pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES],
                        dropped,
                    );
                }
            }
            Err(e) if leaves_state_unchanged(&e) => {
                // The step validated and refused the batch before touching any state: decode
                // each frame alone so that only the frame at fault fails.
                for (p, frame) in batch.iter().zip(&frames) {
                    let row = &mut pcm[..FRAME_SAMPLES];
                    match decoder.step(std::slice::from_ref(frame), row) {
                        Ok(()) => deliver(shared, p, row, dropped),
                        Err(e) => fail(p, &e, dropped),
                    }
                }
            }
            Err(e) => {
                // State of every slot in the batch may be half-updated: end those streams (their
                // slots are reset for the next owner) and keep every other stream.
                for p in batch.iter() {
                    fail(p, &e, dropped);
                }
            }
        }
        drop(frames);
        batch.clear();
    }
}

/// Hands decoded `samples` to the stream of `p`; a reader too far behind is cut off.
fn deliver(shared: &Shared, p: &Picked, samples: &[f32], dropped: &mut Vec<Dropped>) {
    let metrics = &shared.metrics;
    let latency = p.arrived.elapsed();
    metrics.frame_latency_seconds.observe(latency.as_secs_f64());
    if latency > Duration::from_millis(FRAME_MS) {
        metrics.deadline_misses.fetch_add(1, Ordering::Relaxed);
    }
    metrics.frames_decoded.fetch_add(1, Ordering::Relaxed);
    if !p.outbox.push_pcm(p.index, samples.to_vec()) {
        dropped.push(Dropped {
            slot: p.slot,
            id: p.id,
            outbox: p.outbox.clone(),
            err: StreamError::SlowConsumer {
                limit: shared.config.max_undelivered_frames,
            },
        });
    }
}

/// Ends the stream of `p` because its frame could not be decoded.
fn fail(p: &Picked, e: &Error, dropped: &mut Vec<Dropped>) {
    dropped.push(Dropped {
        slot: p.slot,
        id: p.id,
        outbox: p.outbox.clone(),
        err: StreamError::DecodeFailed(e.to_string()),
    });
}

/// Whether `FrameDecoder::step` refused with this error before changing any slot's state.
fn leaves_state_unchanged(e: &Error) -> bool {
    matches!(
        e,
        Error::Input { .. }
            | Error::CodeOutOfRange { .. }
            | Error::UnknownSlot { .. }
            | Error::BatchTooLarge { .. }
            | Error::Shape { .. }
    )
}
