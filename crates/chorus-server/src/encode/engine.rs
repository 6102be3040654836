//! The encode engine: one worker thread owns the slot encoder; each step takes at most one frame
//! from every stream that has one, oldest-served stream first, up to the encoder's largest batch.
//!
//! Connections hold an [`EncodeStream`]: frames, resets and the end of the stream go to the worker
//! in the order they were sent, and codes come back on a bounded channel. A stream that does not
//! read its codes is cut off (`slow_consumer`), one whose client ran too far ahead is refused
//! (`queue_full`), and a failed step ends only the streams of that step; each slot is reset before
//! its next user.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chorus_core::{AudioFrame, FrameEncoder, FRAME_SAMPLES};
use tokio::sync::mpsc as tmpsc;

use super::metrics::EncodeMetrics;
use crate::stage::pool::{FaultSwitch, Health, DEFAULT_DEVICE};

/// How long an idle worker sleeps between checks that the engine is still wanted.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// Limits of an encode engine.
#[derive(Clone, Debug)]
pub struct EncodeConfig {
    /// Frames a stream may have submitted and not yet encoded.
    pub max_pending_frames: usize,
    /// Encoded frames that may wait for a connection to take them.
    pub max_undelivered: usize,
}

/// What the encoder tells every stream.
#[derive(Clone, Debug)]
pub struct EncodeInfo {
    pub description: String,
    pub max_streams: usize,
    pub max_codebooks: usize,
    pub latent_dim: usize,
    pub codebook_size: usize,
}

/// Why a stream could not be opened or has ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("every one of the {0} encoder slots is taken")]
    Busy(usize),
    #[error("the server is shutting down")]
    Draining,
    #[error("{0} frames are already waiting to be encoded (at most {1})")]
    QueueFull(usize, usize),
    #[error("the client did not read its codes: {0} frames waited")]
    SlowConsumer(usize),
    #[error("the encode step failed: {0}")]
    Failed(String),
    #[error("the stream has ended")]
    Finished,
    #[error("{0}")]
    Invalid(String),
}

/// An event of one stream, in order.
#[derive(Debug)]
pub enum EncodeEvent {
    /// Frame `index`'s `n_q` codes, and its latent when the stream asked for them.
    Codes {
        index: u64,
        codes: Vec<u32>,
        latent: Option<Vec<f32>>,
    },
    ResetDone {
        next_frame: u64,
    },
    Finished {
        frames: u64,
    },
    Failed(EncodeError),
}

enum Item {
    Frame(Vec<f32>),
    Reset,
    Finish,
}

enum Cmd {
    Open(Box<Opened>),
    Item(usize, Item),
    Drop(usize),
}

struct Opened {
    slot: usize,
    n_q: usize,
    latents: bool,
    events: tmpsc::Sender<EncodeEvent>,
    pending: Arc<AtomicUsize>,
    over: Arc<AtomicBool>,
}

/// Places of a stream's event channel kept for control events: a `reset_done` and the terminal
/// `closed` or error always fit, however many codes wait unread.
const CONTROL_EVENTS: usize = 2;

/// Builds the encoder on the worker thread (a CUDA encoder stays on the thread that made it).
pub type EncoderFactory = Box<dyn FnOnce() -> chorus_core::Result<Box<dyn FrameEncoder>> + Send>;

/// The engine: slots, the command channel and the worker.
pub struct EncodeEngine {
    tx: Mutex<Sender<Cmd>>,
    free: Arc<Mutex<Vec<usize>>>,
    info: EncodeInfo,
    config: EncodeConfig,
    metrics: Arc<EncodeMetrics>,
    draining: AtomicBool,
    next_id: AtomicU64,
    stop: Arc<AtomicBool>,
    worker: Mutex<Option<JoinHandle<()>>>,
    device: usize,
    /// Marked when the worker panics: streams then end with an error naming the device.
    health: Arc<Health>,
}

impl EncodeEngine {
    /// Starts the worker, which builds the encoder with `factory` and owns it from then on.
    pub fn start(factory: EncoderFactory, config: EncodeConfig) -> chorus_core::Result<Arc<Self>> {
        Self::start_on(DEFAULT_DEVICE, factory, config, None)
    }

    /// Like [`Self::start`], for device `device` (as its errors and metrics name it); `fault`
    /// makes the worker panic before its next step.
    pub fn start_on(
        device: usize,
        factory: EncoderFactory,
        config: EncodeConfig,
        fault: Option<FaultSwitch>,
    ) -> chorus_core::Result<Arc<Self>> {
        Self::start_watched(device, factory, config, fault, Arc::new(Health::default()))
    }

    /// Like [`Self::start_on`], marking `health` when the worker panics.
    pub(crate) fn start_watched(
        device: usize,
        factory: EncoderFactory,
        config: EncodeConfig,
        fault: Option<FaultSwitch>,
        health: Arc<Health>,
    ) -> chorus_core::Result<Arc<Self>> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let metrics = Arc::new(EncodeMetrics::default());
        let stop = Arc::new(AtomicBool::new(false));
        let free = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let (metrics, stop, free, config) =
                (metrics.clone(), stop.clone(), free.clone(), config.clone());
            let mark = PanicMark {
                device,
                health: health.clone(),
            };
            std::thread::Builder::new()
                .name(format!("chorus-encode-{device}"))
                .spawn(move || {
                    let encoder = match factory() {
                        Ok(e) => e,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let info = EncodeInfo {
                        description: encoder.describe(),
                        max_streams: encoder.max_slots(),
                        max_codebooks: encoder.max_codebooks(),
                        latent_dim: encoder.latent_dim(),
                        codebook_size: encoder.codebook_size(),
                    };
                    *lock(&free) = (0..info.max_streams).rev().collect();
                    if ready_tx.send(Ok(info)).is_err() {
                        return;
                    }
                    let mut w = Worker::new(encoder, rx, metrics, config, mark);
                    w.run(&stop, fault, |slot| lock(&free).push(slot));
                })
                .map_err(|e| chorus_core::Error::io("EncodeEngine::start", "encode thread", e))?
        };
        let info = ready_rx.recv().map_err(|_| {
            chorus_core::Error::config(
                "EncodeEngine::start",
                "the encode thread ended while building the encoder",
            )
        })??;
        Ok(Arc::new(Self {
            tx: Mutex::new(tx),
            free,
            info,
            config,
            metrics,
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            stop,
            worker: Mutex::new(Some(handle)),
            device,
            health,
        }))
    }

    /// The device, as errors and metrics name it.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Why the engine takes no new streams, once its worker has failed.
    pub fn failure(&self) -> Option<String> {
        self.health.failure()
    }

    pub(crate) fn health(&self) -> &Arc<Health> {
        &self.health
    }

    pub fn info(&self) -> &EncodeInfo {
        &self.info
    }

    pub fn config(&self) -> &EncodeConfig {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<EncodeMetrics> {
        &self.metrics
    }

    /// Streams holding a slot.
    pub fn live_streams(&self) -> usize {
        self.info.max_streams - lock(&self.free).len()
    }

    /// Refuses new streams from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Opens a stream of `n_q` codes per frame (validated by the caller).
    pub fn open(self: &Arc<Self>, n_q: usize, latents: bool) -> Result<EncodeStream, EncodeError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(EncodeError::Draining);
        }
        let slot = lock(&self.free)
            .pop()
            .ok_or(EncodeError::Busy(self.info.max_streams))?;
        let (events_tx, events) =
            tmpsc::channel(self.config.max_undelivered.max(1) + CONTROL_EVENTS);
        let pending = Arc::new(AtomicUsize::new(0));
        let over = Arc::new(AtomicBool::new(false));
        let opened = Cmd::Open(Box::new(Opened {
            slot,
            n_q,
            latents,
            events: events_tx,
            pending: pending.clone(),
            over: over.clone(),
        }));
        if !self.send(opened) {
            lock(&self.free).push(slot);
            return Err(EncodeError::Failed("the encode worker has stopped".into()));
        }
        self.metrics.streams_opened.fetch_add(1, Ordering::Relaxed);
        Ok(EncodeStream {
            engine: self.clone(),
            slot,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            n_q,
            events,
            pending,
            over,
            finished: false,
        })
    }

    /// False when the worker is gone (it stopped with the engine, or panicked).
    fn send(&self, cmd: Cmd) -> bool {
        lock(&self.tx).send(cmd).is_ok()
    }
}

impl Drop for EncodeEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The worker sees the flag within one idle poll (or after its current step).
        if let Some(h) = lock(&self.worker).take() {
            let _ = h.join();
        }
    }
}

/// One open encode stream, as its connection holds it.
pub struct EncodeStream {
    engine: Arc<EncodeEngine>,
    slot: usize,
    id: u64,
    n_q: usize,
    events: tmpsc::Receiver<EncodeEvent>,
    pending: Arc<AtomicUsize>,
    /// Set by the worker once the stream has ended: later input is refused as `Finished`.
    over: Arc<AtomicBool>,
    finished: bool,
}

impl EncodeStream {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn n_q(&self) -> usize {
        self.n_q
    }

    /// Queues whole frames (`samples.len()` a multiple of 1920, validated by the caller),
    /// within `max_pending_frames` (frames and resets not yet handled).
    pub fn submit(&self, samples: &[f32]) -> Result<(), EncodeError> {
        self.submit_frames(samples, true)
    }

    /// Queues the padded last frame at `close`, `reset` or a drain: it may pass the bound by one,
    /// so that a client at the limit still gets every code it sent audio for.
    pub fn submit_tail(&self, samples: &[f32]) -> Result<(), EncodeError> {
        self.submit_frames(samples, false)
    }

    fn submit_frames(&self, samples: &[f32], bounded: bool) -> Result<(), EncodeError> {
        self.admit(samples.len() / FRAME_SAMPLES, bounded)?;
        for f in samples.chunks_exact(FRAME_SAMPLES) {
            if !self
                .engine
                .send(Cmd::Item(self.slot, Item::Frame(f.to_vec())))
            {
                return Err(EncodeError::Failed("the encode worker has stopped".into()));
            }
        }
        Ok(())
    }

    /// Counts `items` more queued items, or says why not.
    fn admit(&self, items: usize, bounded: bool) -> Result<(), EncodeError> {
        if self.finished || self.over.load(Ordering::SeqCst) {
            return Err(EncodeError::Finished);
        }
        let max = self.engine.config.max_pending_frames;
        let pending = self.pending.load(Ordering::SeqCst);
        if bounded && pending + items > max {
            return Err(EncodeError::QueueFull(pending + items, max));
        }
        self.pending.fetch_add(items, Ordering::SeqCst);
        Ok(())
    }

    /// Frames after this one are encoded from the zero state (a reset counts as a pending item).
    pub fn reset(&self) -> Result<(), EncodeError> {
        self.admit(1, true)?;
        if !self.engine.send(Cmd::Item(self.slot, Item::Reset)) {
            return Err(EncodeError::Failed("the encode worker has stopped".into()));
        }
        Ok(())
    }

    /// Ends the stream after every frame sent so far is encoded and delivered.
    pub fn finish(&mut self) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished);
        }
        self.finished = true;
        if !self.engine.send(Cmd::Item(self.slot, Item::Finish)) {
            return Err(EncodeError::Failed("the encode worker has stopped".into()));
        }
        Ok(())
    }

    /// The next event; once the worker is gone, `Failed` naming the device when it failed, else
    /// `Failed(Finished)`.
    pub async fn recv(&mut self) -> EncodeEvent {
        match self.events.recv().await {
            Some(ev) => ev,
            None => EncodeEvent::Failed(match self.engine.failure() {
                Some(why) => EncodeError::Failed(why),
                None => EncodeError::Finished,
            }),
        }
    }
}

/// True for errors a step returns before changing any slot's state (its validation).
fn refused_whole(e: &chorus_core::Error) -> bool {
    matches!(
        e,
        chorus_core::Error::Input { .. } | chorus_core::Error::UnknownSlot { .. }
    )
}

impl Drop for EncodeStream {
    fn drop(&mut self) {
        if !self.engine.send(Cmd::Drop(self.slot)) {
            // No worker to free it: the slot returns here (the engine is stopping anyway).
            lock(&self.engine.free).push(self.slot);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a thread panicked while holding it; the data stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream as the worker sees it.
struct Live {
    n_q: usize,
    latents: bool,
    events: tmpsc::Sender<EncodeEvent>,
    pending: Arc<AtomicUsize>,
    over_flag: Arc<AtomicBool>,
    queue: VecDeque<Item>,
    next_index: u64,
    /// The stream has ended (finished, failed or dropped): its slot waits to be freed.
    over: bool,
}

/// Marks the device failed when the worker unwinds from a panic; the first field of [`Worker`],
/// so it is dropped (and the failure recorded) before any stream's channel closes.
struct PanicMark {
    device: usize,
    health: Arc<Health>,
}

impl Drop for PanicMark {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.health.fail(format!(
                "device {} failed: the encode worker panicked",
                self.device
            ));
        }
    }
}

struct Worker {
    _mark: PanicMark,
    encoder: Box<dyn FrameEncoder>,
    rx: Receiver<Cmd>,
    metrics: Arc<EncodeMetrics>,
    config: EncodeConfig,
    live: Vec<Option<Live>>,
    /// Slots whose state a previous user left: reset before the next user's first frame.
    dirty: Vec<bool>,
    /// Round-robin start: the slot after the last one served.
    cursor: usize,
    codes: Vec<u32>,
    latents: Vec<f32>,
}

impl Worker {
    fn new(
        encoder: Box<dyn FrameEncoder>,
        rx: Receiver<Cmd>,
        metrics: Arc<EncodeMetrics>,
        config: EncodeConfig,
        mark: PanicMark,
    ) -> Self {
        let n = encoder.max_slots();
        let batch = encoder.largest_batch();
        let (nq, dim) = (encoder.max_codebooks(), encoder.latent_dim());
        Self {
            _mark: mark,
            encoder,
            rx,
            metrics,
            config,
            live: (0..n).map(|_| None).collect(),
            dirty: vec![false; n],
            cursor: 0,
            codes: vec![0; batch * nq],
            latents: vec![0.0; batch * dim],
        }
    }

    fn run(&mut self, stop: &AtomicBool, fault: Option<FaultSwitch>, mut free: impl FnMut(usize)) {
        while !stop.load(Ordering::SeqCst) {
            let busy = self.live.iter().flatten().any(|l| !l.queue.is_empty());
            if !busy {
                match self.rx.recv_timeout(IDLE_POLL) {
                    Ok(cmd) => self.apply(cmd, &mut free),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            while let Ok(cmd) = self.rx.try_recv() {
                self.apply(cmd, &mut free);
            }
            if fault.as_ref().is_some_and(FaultSwitch::tripped) {
                panic!("its fault switch was tripped");
            }
            self.step();
        }
    }

    fn apply(&mut self, cmd: Cmd, free: &mut impl FnMut(usize)) {
        match cmd {
            Cmd::Open(o) => {
                self.live[o.slot] = Some(Live {
                    n_q: o.n_q,
                    latents: o.latents,
                    events: o.events,
                    pending: o.pending,
                    over_flag: o.over,
                    queue: VecDeque::new(),
                    next_index: 0,
                    over: false,
                });
            }
            Cmd::Item(slot, item) => {
                if let Some(l) = self.live[slot].as_mut().filter(|l| !l.over) {
                    l.queue.push_back(item);
                }
            }
            Cmd::Drop(slot) => {
                if self.live[slot].take().is_some() {
                    self.dirty[slot] = true;
                    free(slot);
                }
            }
        }
    }

    /// Handles resets and ends at the head of each queue, then encodes one frame per stream.
    fn step(&mut self) {
        let n = self.live.len();
        let batch_max = self.encoder.largest_batch();
        let mut rows: Vec<usize> = Vec::with_capacity(batch_max);
        for k in 0..n {
            let slot = (self.cursor + k) % n;
            if rows.len() == batch_max {
                break;
            }
            if self.ready(slot) {
                rows.push(slot);
            }
        }
        if rows.is_empty() {
            return;
        }
        self.cursor = (rows[rows.len() - 1] + 1) % n;
        for &slot in &rows {
            if std::mem::replace(&mut self.dirty[slot], false) {
                if let Err(e) = self.encoder.reset(slot) {
                    self.fail(slot, EncodeError::Failed(e.to_string()));
                }
            }
        }
        rows.retain(|&s| self.live[s].as_ref().is_some_and(|l| !l.over));
        let frames: Vec<(usize, Vec<f32>, usize)> = rows
            .iter()
            .filter_map(|&slot| {
                let l = self.live[slot].as_mut()?;
                match l.queue.pop_front() {
                    Some(Item::Frame(pcm)) => Some((slot, pcm, l.n_q)),
                    _ => None,
                }
            })
            .collect();
        if frames.is_empty() {
            return;
        }
        match self.encode(&frames) {
            Ok(()) => self.deliver(&frames),
            // Refused before any state changed (validation): each frame alone, so that only a
            // frame that fails by itself ends its stream.
            Err(e) if refused_whole(&e) && frames.len() > 1 => {
                for one in frames.chunks(1) {
                    match self.encode(one) {
                        Ok(()) => self.deliver(one),
                        Err(e) => self.fail(one[0].0, EncodeError::Failed(e.to_string())),
                    }
                }
            }
            Err(e) => {
                // The device may have changed any of these rows: each ends, its slot reset later.
                for (slot, _, _) in &frames {
                    self.fail(*slot, EncodeError::Failed(e.to_string()));
                }
            }
        }
    }

    /// One encoder step over `frames`, into the worker's code and latent buffers.
    fn encode(&mut self, frames: &[(usize, Vec<f32>, usize)]) -> chorus_core::Result<()> {
        let step: Vec<AudioFrame<'_>> = frames
            .iter()
            .map(|(slot, pcm, n_q)| AudioFrame {
                slot: *slot,
                pcm,
                n_q: *n_q,
            })
            .collect();
        let started = Instant::now();
        let (nq, dim) = (self.encoder.max_codebooks(), self.encoder.latent_dim());
        let (codes, latents) = (
            &mut self.codes[..step.len() * nq],
            &mut self.latents[..step.len() * dim],
        );
        let result = self.encoder.step(&step, codes, Some(latents));
        self.metrics.record_step(step.len(), started.elapsed());
        result
    }

    /// Hands each frame's codes to its stream; a stream whose channel has no room but for its
    /// control events is cut off as a slow consumer.
    fn deliver(&mut self, frames: &[(usize, Vec<f32>, usize)]) {
        let (nq, dim) = (self.encoder.max_codebooks(), self.encoder.latent_dim());
        for (r, (slot, _, n_q)) in frames.iter().enumerate() {
            let Some(l) = self.live[*slot].as_mut() else {
                continue;
            };
            l.pending.fetch_sub(1, Ordering::SeqCst);
            if l.over {
                continue;
            }
            if l.events.capacity() <= CONTROL_EVENTS {
                if !l.events.is_closed() {
                    let waited = self.config.max_undelivered;
                    self.fail(*slot, EncodeError::SlowConsumer(waited));
                }
                continue;
            }
            let latent = l
                .latents
                .then(|| self.latents[r * dim..(r + 1) * dim].to_vec());
            let ev = EncodeEvent::Codes {
                index: l.next_index,
                codes: self.codes[r * nq..r * nq + n_q].to_vec(),
                latent,
            };
            l.next_index += 1;
            // Room was checked above; a closed channel means the connection is gone.
            let _ = l.events.try_send(ev);
        }
        self.metrics
            .frames_encoded
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
    }

    /// Handles one control item at the head of `slot`'s queue; true when a frame is next. A
    /// reset takes the stream's turn in this step, so a flood of resets cannot stall the others.
    fn ready(&mut self, slot: usize) -> bool {
        let Some(l) = self.live[slot].as_mut() else {
            return false;
        };
        if l.over {
            return false;
        }
        match l.queue.front() {
            None => false,
            Some(Item::Frame(_)) => true,
            Some(Item::Reset) => {
                l.queue.pop_front();
                l.pending.fetch_sub(1, Ordering::SeqCst);
                let next_frame = l.next_index;
                // One control place stays free for the terminal event.
                if l.events.capacity() < CONTROL_EVENTS {
                    let waited = self.config.max_undelivered;
                    self.fail(slot, EncodeError::SlowConsumer(waited));
                    return false;
                }
                let _ = l.events.try_send(EncodeEvent::ResetDone { next_frame });
                if let Err(e) = self.encoder.reset(slot) {
                    self.fail(slot, EncodeError::Failed(e.to_string()));
                }
                false
            }
            Some(Item::Finish) => {
                l.queue.pop_front();
                l.over = true;
                l.over_flag.store(true, Ordering::SeqCst);
                let frames = l.next_index;
                let _ = l.events.try_send(EncodeEvent::Finished { frames });
                self.dirty[slot] = true;
                false
            }
        }
    }

    fn fail(&mut self, slot: usize, e: EncodeError) {
        if let Some(l) = self.live[slot].as_mut() {
            if !l.over {
                l.over = true;
                l.over_flag.store(true, Ordering::SeqCst);
                let dropped = l
                    .queue
                    .iter()
                    .filter(|i| matches!(i, Item::Frame(_) | Item::Reset))
                    .count();
                l.pending.fetch_sub(dropped, Ordering::SeqCst);
                l.queue.clear();
                self.metrics.count_error(&e);
                let _ = l.events.try_send(EncodeEvent::Failed(e));
            }
        }
        self.dirty[slot] = true;
    }
}
