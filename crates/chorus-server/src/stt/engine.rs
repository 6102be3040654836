//! The transcription engine's front: starts one owner thread per device and places each new
//! stream on the device with the most free slots ([`crate::stage::pool`]).

use std::sync::Arc;

use chorus_core::{Error, LmOps, Result};
use chorus_stt::{SttConfig, SttOptions, SttStage, SttTokenizer};

use super::job::{SttJob, SttOutcome};
use super::metrics::SttMetrics;
use super::worker::{StartJob, Worker, WorkerSettings};
use crate::stage::error::{StageError, StageErrorCode};
use crate::stage::input::input_channel;
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};
use crate::stage::pool::{
    start_pool, unplaced_error, Capacity, DeviceStage, Health, MemberStatus, Seat, Seated,
    StagePool, Tried, DEFAULT_DEVICE,
};

/// Default bound on start requests waiting for the owner thread (it takes them all between two
/// steps, so this only fills when many arrive within one step).
pub const DEFAULT_MAX_QUEUED_STARTS: usize = 64;
/// The default [`SttServeConfig::step_gather`]: a quarter of a frame, so a frame waits at most
/// 20 ms more for company.
pub const DEFAULT_STEP_GATHER: std::time::Duration = std::time::Duration::from_millis(20);
/// Default bound on a stream's events its client has not read: each step sends one, so about
/// 20 s of steps with their words.
pub const DEFAULT_MAX_UNDELIVERED_EVENTS: usize = 512;
/// Default bound on a stream's input messages the owner thread has not taken (a client past it
/// waits: its socket is not read).
pub const DEFAULT_MAX_QUEUED_INPUT: usize = 16;
/// Default most frames one audio message may carry: 10 s.
pub const DEFAULT_MAX_FRAMES_PER_MESSAGE: usize = 125;

/// Builds the stage on the owner thread (a device backend may have to stay on the thread that
/// made it); returns the stage with the options it was built with. The stage must take PCM
/// (built with Mimi's encoder).
pub type SttStageFactory<B> = Box<dyn FnOnce() -> Result<(SttStage<B>, SttOptions)> + Send>;

/// Queue bounds of the transcription engine.
#[derive(Clone, Debug)]
pub struct SttServeConfig {
    /// Starts that may wait for the device's thread between two steps (at least its streams).
    pub max_queued_starts: usize,
    /// Events a stream may have waiting for its client before it is cut off (`slow_consumer`).
    pub max_undelivered_events: usize,
    pub max_queued_input: usize,
    pub max_frames_per_message: usize,
    /// Sampled text tokens (the stage's `draws` hold the temperature): the n-th stream the
    /// engine admits draws with `Sampling::Seeded(base + n)`, a seed of its own that replays;
    /// `None`: greedy.
    pub text_seed: Option<u64>,
    /// How long a step may wait, after the last one launched, for streams whose frames have not
    /// arrived yet (it goes at once when every stream has one): a step of many streams reads the
    /// weights once for all of them. Zero: each step takes whatever has arrived.
    pub step_gather: std::time::Duration,
}

impl Default for SttServeConfig {
    fn default() -> Self {
        Self {
            max_queued_starts: DEFAULT_MAX_QUEUED_STARTS,
            max_undelivered_events: DEFAULT_MAX_UNDELIVERED_EVENTS,
            max_queued_input: DEFAULT_MAX_QUEUED_INPUT,
            max_frames_per_message: DEFAULT_MAX_FRAMES_PER_MESSAGE,
            text_seed: None,
            step_gather: DEFAULT_STEP_GATHER,
        }
    }
}

/// What the stage told the engine at start-up.
#[derive(Clone, Debug)]
pub struct SttInfo {
    pub max_streams: usize,
    /// Frames one stream may send in its life (the stage's `max_frames`, flushes included).
    pub max_frames: usize,
    pub config: SttConfig,
    /// Frames of silence a flush adds (the text delay plus one second).
    pub flush_frames: usize,
    /// The device, in words.
    pub device: String,
}

impl Seated for SttInfo {
    fn seats(&self) -> usize {
        self.max_streams
    }
}

/// One device's owner thread.
struct SttDevice {
    owner: OwnerThread<StartJob>,
    info: SttInfo,
    metrics: Arc<SttMetrics>,
}

impl SttDevice {
    fn start<B: LmOps + 'static>(
        stage: DeviceStage<SttStageFactory<B>>,
        config: &SttServeConfig,
        health: Arc<Health>,
    ) -> Result<Self> {
        let metrics = Arc::new(SttMetrics::default());
        let thread_metrics = metrics.clone();
        let settings = WorkerSettings {
            text_seed: config.text_seed,
            step_gather: config.step_gather,
        };
        let (owner, info) = stage.spawn_owner(
            "stt",
            config.max_queued_starts,
            health,
            move |factory, device| {
                let (stage, opts) = factory()?;
                if !stage.encodes_pcm() {
                    return Err(Error::config(
                        "stt::Worker::new",
                        "the transcription stage was built without Mimi's encoder: /v1/stt takes audio",
                    ));
                }
                let info = SttInfo {
                    max_streams: opts.max_streams,
                    max_frames: opts.max_frames,
                    config: stage.config().clone(),
                    flush_frames: stage.flush_frames(),
                    device: stage.backend().device_description(),
                };
                let worker = Worker::new(stage, info.clone(), thread_metrics, settings, device);
                Ok((worker, info))
            },
        )?;
        metrics.set_slots(info.max_streams);
        Ok(Self {
            owner,
            info,
            metrics,
        })
    }
}

/// The transcription engine: one owner thread per device. Dropping it stops them; running
/// streams end with `draining`.
pub struct SttEngine {
    pool: StagePool<SttDevice>,
    /// The model's dimensions; `max_streams` counts every device.
    info: SttInfo,
    config: SttServeConfig,
    /// Requests refused before they reached a device (the device's own with one device).
    metrics: Arc<SttMetrics>,
    tokenizer: Arc<SttTokenizer>,
}

impl SttEngine {
    /// Starts the owner thread of one device, which builds the stage with `factory`; returns
    /// once the stage is ready, or with the factory's error. `tokenizer` spells the words.
    pub fn start<B: LmOps + 'static>(
        factory: SttStageFactory<B>,
        config: SttServeConfig,
        tokenizer: SttTokenizer,
    ) -> Result<Self> {
        Self::start_on(
            vec![DeviceStage::new(DEFAULT_DEVICE, factory)],
            config,
            tokenizer,
        )
    }

    /// Starts one owner thread per device (each building its own stage); a new stream goes to
    /// the device with the most free slots. Fails, naming the device, when any fails to start.
    pub fn start_on<B: LmOps + 'static>(
        devices: Vec<DeviceStage<SttStageFactory<B>>>,
        config: SttServeConfig,
        tokenizer: SttTokenizer,
    ) -> Result<Self> {
        const OP: &str = "SttEngine::start";
        if config.max_queued_starts == 0
            || config.max_undelivered_events == 0
            || config.max_queued_input == 0
            || config.max_frames_per_message == 0
        {
            return Err(Error::config(
                OP,
                format!("bounds must be positive, got {config:?}"),
            ));
        }
        let pool = start_pool(devices, |d, health| {
            let m = SttDevice::start(d, &config, health)?;
            let capacity = Capacity {
                seats: m.info.seats(),
                blocks: 0,
            };
            Ok((m, capacity))
        })?;
        let metrics = pool.front_metrics(|m| &m.metrics);
        let info = SttInfo {
            max_streams: pool.total(|m| m.info.max_streams),
            ..pool.first().info.clone()
        };
        Ok(Self {
            pool,
            info,
            config,
            metrics,
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// The model's dimensions; `max_streams` counts every device.
    pub fn info(&self) -> &SttInfo {
        &self.info
    }

    pub fn config(&self) -> &SttServeConfig {
        &self.config
    }

    /// Counters and gauges of a one-device engine; with several devices, the refusals counted
    /// before a stream reached any of them (each device's own are in [`Self::render_metrics`]).
    pub fn metrics(&self) -> &Arc<SttMetrics> {
        &self.metrics
    }

    /// Streams running now, over every device.
    pub fn active(&self) -> usize {
        self.pool
            .members()
            .iter()
            .map(|m| m.engine.metrics.active())
            .sum()
    }

    /// Every device's slots and health.
    pub fn devices(&self) -> Vec<MemberStatus> {
        self.pool.status()
    }

    /// Appends the transcription metrics: one device's as they are, several labelled by device.
    pub fn render_metrics(&self, out: &mut String) {
        self.pool.render_metrics(
            out,
            |m, out| m.metrics.render(out),
            |out| self.metrics.render_refused(out),
        );
    }

    pub fn tokenizer(&self) -> &SttTokenizer {
        &self.tokenizer
    }

    /// Hands a new stream to the device with the most free slots. The job's first event is
    /// `Started`, or its outcome is a refusal (`busy` when every device is full): nothing is
    /// queued behind a full stage.
    pub fn submit(&self) -> std::result::Result<SttJob, StageError> {
        self.pool
            .place(0, |device, seat| match self.submit_to(device, seat) {
                Ok(job) => Tried::Placed(job),
                Err(e) => Tried::Next(e),
            })
            .map_err(|u| unplaced_error(u, "streams"))
    }

    fn submit_to(&self, device: &SttDevice, seat: Seat) -> std::result::Result<SttJob, StageError> {
        let (job, side) = Job::channel(
            self.config.max_undelivered_events,
            SttOutcome::engine_stopped,
        );
        let (tx, rx) = input_channel(self.config.max_queued_input, device.owner.waker());
        let start = StartJob {
            side,
            input: rx,
            seat,
        };
        match device.owner.try_submit(start) {
            Ok(()) => Ok(SttJob { job, input: tx }),
            Err((SubmitFailed::Full, _)) => Err(StageError::new(
                StageErrorCode::Busy,
                format!(
                    "busy: {} streams are already waiting for the transcription engine",
                    self.config.max_queued_starts
                ),
            )),
            Err((SubmitFailed::Stopped, _)) => {
                Err(StageError::internal("the transcription engine has stopped"))
            }
        }
    }
}
