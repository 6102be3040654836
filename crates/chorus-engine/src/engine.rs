//! The engine: stream admission and the thread that runs every decode step.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use chorus_core::{Error, Result};

use crate::error::StreamError;
use crate::metrics::Metrics;
use crate::sched::{Occupant, Pending, Sched, Shared};
use crate::stream::{Outbox, Stream, StreamInput};
use crate::worker::EngineLoop;
use crate::{
    DecoderFactory, DEFAULT_MAX_PENDING_FRAMES, DEFAULT_MAX_RESETS_PER_STEP,
    DEFAULT_MAX_UNDELIVERED_FRAMES,
};

/// Queue bounds of every stream, and of the resets before one step.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Items (frames, resets) a stream may have queued and not yet decoded.
    pub max_pending_frames: usize,
    /// Decoded frames a stream's reader may leave uncollected before it is cut off.
    pub max_undelivered_frames: usize,
    /// Slot resets run before one step (at least 1); streams whose reset would pass it wait for
    /// the next step, while open streams keep stepping.
    pub max_resets_per_step: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_pending_frames: DEFAULT_MAX_PENDING_FRAMES,
            max_undelivered_frames: DEFAULT_MAX_UNDELIVERED_FRAMES,
            max_resets_per_step: DEFAULT_MAX_RESETS_PER_STEP,
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
    /// The device failed (see [`Engine::failure`]); `stopped` is then set too.
    pub failed: bool,
}

/// Device number of an engine started with [`Engine::start`]: a server's only device.
pub const DEFAULT_DEVICE: usize = 0;

/// The scheduler. Dropping it stops the engine thread.
pub struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread, which builds the decoder with `factory`; returns once the decoder
    /// is ready, or with the factory's error.
    pub fn start(factory: DecoderFactory, config: EngineConfig) -> Result<Self> {
        Self::start_on(DEFAULT_DEVICE, factory, config)
    }

    /// Like [`Engine::start`] for the engine of device `device`, the number that names it in
    /// errors, health and metrics.
    pub fn start_on(device: usize, factory: DecoderFactory, config: EngineConfig) -> Result<Self> {
        if config.max_pending_frames == 0
            || config.max_undelivered_frames == 0
            || config.max_resets_per_step == 0
        {
            return Err(Error::config(
                "Engine::start",
                format!("queue bounds must be positive, got {config:?}"),
            ));
        }
        let (tx, rx) = mpsc::channel::<Result<Arc<Shared>>>();
        let thread = std::thread::Builder::new()
            .name(format!("chorus-engine-{device}"))
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
                        failure: None,
                    }),
                    wake: Condvar::new(),
                    metrics: Arc::new(Metrics::default()),
                    config,
                    info,
                    device,
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

    /// The device number it was started on.
    pub fn device(&self) -> usize {
        self.shared.device
    }

    /// Why the device failed, once it has: its streams were ended and it takes no new ones.
    pub fn failure(&self) -> Option<String> {
        self.shared.lock().failure.clone()
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
            last_due: None,
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
            failed: s.failure.is_some(),
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

/// Marks the engine stopped however its thread ends, and a decoder panic as a failed device, so
/// no stream waits forever.
struct StopOnExit(Arc<Shared>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail_device("the decoder panicked");
        }
        self.0.stop();
    }
}
