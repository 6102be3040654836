//! The engine: stream admission and the thread that runs every decode step.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chorus_core::{Error, Frame, FrameDecoder, Result, FRAME_MS, FRAME_SAMPLES};

use crate::error::StreamError;
use crate::metrics::Metrics;
use crate::sched::{FrameData, Occupant, Pending, Sched, Shared};
use crate::stream::{Outbox, Stream, StreamInput};
use crate::{DecoderFactory, DEFAULT_MAX_PENDING_FRAMES, DEFAULT_MAX_UNDELIVERED_FRAMES};

/// Queue bounds of every stream.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Items (frames, resets) a stream may have queued and not yet decoded.
    pub max_pending_frames: usize,
    /// Decoded frames a stream's reader may leave uncollected before it is cut off.
    pub max_undelivered_frames: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_pending_frames: DEFAULT_MAX_PENDING_FRAMES,
            max_undelivered_frames: DEFAULT_MAX_UNDELIVERED_FRAMES,
        }
    }
}

/// What the decoder told the engine at start-up.
#[derive(Clone, Debug)]
pub struct DecoderInfo {
    pub max_slots: usize,
    pub largest_batch: usize,
    pub codebook_size: usize,
    pub max_codebooks: usize,
    pub latent_dim: usize,
    pub description: String,
}

/// Live gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineStatus {
    pub live_streams: usize,
    pub free_slots: usize,
    pub draining: bool,
    pub stopped: bool,
}

/// The scheduler. Dropping it stops the engine thread.
pub struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread, which builds the decoder with `factory`; returns once the decoder
    /// is ready, or with the factory's error.
    pub fn start(factory: DecoderFactory, config: EngineConfig) -> Result<Self> {
        if config.max_pending_frames == 0 || config.max_undelivered_frames == 0 {
            return Err(Error::config(
                "Engine::start",
                format!("queue bounds must be positive, got {config:?}"),
            ));
        }
        let (tx, rx) = mpsc::channel::<Result<Arc<Shared>>>();
        let thread = std::thread::Builder::new()
            .name("chorus-engine".into())
            .spawn(move || {
                let decoder = match factory() {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let info = DecoderInfo {
                    max_slots: decoder.max_slots(),
                    largest_batch: decoder.largest_batch().min(decoder.max_slots()),
                    codebook_size: decoder.codebook_size(),
                    max_codebooks: decoder.max_codebooks(),
                    latent_dim: decoder.latent_dim(),
                    description: decoder.describe(),
                };
                let shared = Arc::new(Shared {
                    sched: Mutex::new(Sched {
                        slots: (0..info.max_slots).map(|_| None).collect(),
                        free: (0..info.max_slots).collect(),
                        ready: VecDeque::with_capacity(info.max_slots),
                        next_id: 0,
                        draining: false,
                        stopped: false,
                    }),
                    wake: Condvar::new(),
                    metrics: Arc::new(Metrics::default()),
                    config,
                    info,
                });
                if tx.send(Ok(shared.clone())).is_err() {
                    return;
                }
                let _stop = StopOnExit(shared.clone());
                EngineLoop::new(shared, decoder).run();
            })
            .map_err(|e| Error::io("Engine::start", "engine thread", e))?;
        let shared = match rx.recv() {
            Ok(r) => r?,
            Err(_) => {
                let _ = thread.join();
                return Err(Error::config(
                    "Engine::start",
                    "the decoder factory panicked",
                ));
            }
        };
        if shared.info.max_slots == 0 || shared.info.largest_batch == 0 {
            return Err(Error::config(
                "Engine::start",
                format!("decoder has no slots or batch: {:?}", shared.info),
            ));
        }
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// The decoder's dimensions.
    pub fn info(&self) -> &DecoderInfo {
        &self.shared.info
    }

    /// The queue bounds.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Counters and histograms (the server adds its own error kinds).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Opens a stream on a free slot, or says at once why not.
    pub fn open(&self, input: StreamInput) -> std::result::Result<Stream, StreamError> {
        if let StreamInput::Codes { n_q } = input {
            let max = self.shared.info.max_codebooks;
            if n_q == 0 || n_q > max {
                return Err(StreamError::InvalidFrame(format!(
                    "n_q = {n_q} is outside [1, {max}]"
                )));
            }
        }
        let mut s = self.shared.lock();
        if s.stopped {
            return Err(StreamError::Stopped);
        }
        if s.draining {
            return Err(StreamError::Draining);
        }
        let Some(slot) = s.free.pop_front() else {
            return Err(StreamError::Busy {
                max_slots: self.shared.info.max_slots,
            });
        };
        let id = s.next_id;
        s.next_id += 1;
        let outbox = Arc::new(Outbox::new(self.shared.config.max_undelivered_frames));
        // The new owner's first item resets the slot, on the engine thread, after any step
        // still using it for the previous owner.
        s.slots[slot] = Some(Occupant {
            id,
            queue: VecDeque::from([Pending::Reset { ack: None }]),
            counted: 0,
            in_ready: true,
            outbox: outbox.clone(),
        });
        s.ready.push_back((slot, id));
        drop(s);
        self.shared.wake.notify_one();
        self.shared
            .metrics
            .streams_opened
            .fetch_add(1, Ordering::Relaxed);
        Ok(Stream {
            id,
            slot,
            input,
            shared: self.shared.clone(),
            outbox,
            next_index: 0,
            finished: false,
        })
    }

    /// Refuses new streams from now on; open streams carry on.
    pub fn drain(&self) {
        self.shared.lock().draining = true;
    }

    /// Live gauges.
    pub fn status(&self) -> EngineStatus {
        let s = self.shared.lock();
        EngineStatus {
            live_streams: self.shared.info.max_slots - s.free.len(),
            free_slots: s.free.len(),
            draining: s.draining,
            stopped: s.stopped,
        }
    }

    /// Stops the engine thread; open streams receive [`StreamError::Stopped`].
    pub fn shutdown(&mut self) {
        self.shared.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Marks the engine stopped however its thread ends (a decoder panic included), so no stream
/// waits forever.
struct StopOnExit(Arc<Shared>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.stop();
    }
}

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
struct EngineLoop {
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
    fn new(shared: Arc<Shared>, decoder: Box<dyn FrameDecoder>) -> Self {
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

    fn run(mut self) {
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
