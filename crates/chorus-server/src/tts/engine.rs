//! The speech engine's front: starts one owner thread per device, validates utterances and
//! places each on the device with the most free KV blocks ([`crate::stage::pool`]).

use std::sync::Arc;
use std::time::Instant;

use chorus_core::{Error, LmOps, Result};
use chorus_csm::{CsmConfig, CsmTokenizer, DrawSettings, TtsOptions, TtsStage};

use super::job::{TtsJob, TtsOutcome};
use super::metrics::TtsMetrics;
use super::request::{build_utterance, UtteranceSpec};
use super::start::TtsStart;
use super::worker::{utterance_blocks, StartJob, Worker};
use super::{TtsError, TtsErrorCode};
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};
use crate::stage::pool::{
    start_pool, unplaced_error, Capacity, DeviceStage, Health, MemberStatus, Seat, Seated,
    StagePool, Tried, DEFAULT_DEVICE,
};

/// Default bound on start requests waiting for the owner thread (it takes them all between two
/// steps, so this only fills when many arrive within one step).
pub const DEFAULT_MAX_QUEUED_STARTS: usize = 64;
/// Default bound on an utterance's frames its client has not read yet: 10 s of audio.
pub const DEFAULT_MAX_UNDELIVERED_FRAMES: usize = 125;
/// Default length cap of a request that sets no `max_frames`: 20 s of audio.
pub const DEFAULT_MAX_FRAMES: usize = 250;
/// Default speaker ids a request may name (0..N). The model has no table of speakers (the id is
/// text in the prompt, `[0]Hello`); a bound makes a mistyped id an error rather than a voice.
pub const DEFAULT_SPEAKERS: usize = 10;
/// Default longest `text` (and context turn text), in bytes.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 4096;

/// Builds the stage on the owner thread (a device backend may have to stay on the thread that
/// made it); returns the stage with the options it was built with. The stage must decode audio.
pub type TtsStageFactory<B> = Box<dyn FnOnce() -> Result<(TtsStage<B>, TtsOptions)> + Send>;

/// Queue bounds and request limits of the speech engine.
#[derive(Clone, Debug)]
pub struct TtsConfig {
    /// Starts that may wait for the device's thread between two steps (at least its utterances).
    pub max_queued_starts: usize,
    /// Frames an utterance may have waiting for its client before it is cut off (`slow_consumer`).
    pub max_undelivered_frames: usize,
    /// The length cap of a request without `max_frames`.
    pub default_max_frames: usize,
    /// Speaker ids `0..speakers` are accepted.
    pub speakers: usize,
    pub max_text_bytes: usize,
}

impl Default for TtsConfig {
    fn default() -> Self {
        Self {
            max_queued_starts: DEFAULT_MAX_QUEUED_STARTS,
            max_undelivered_frames: DEFAULT_MAX_UNDELIVERED_FRAMES,
            default_max_frames: DEFAULT_MAX_FRAMES,
            speakers: DEFAULT_SPEAKERS,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
        }
    }
}

/// What the stage told the engine at start-up.
#[derive(Clone, Debug)]
pub struct TtsInfo {
    pub max_utterances: usize,
    pub max_context: usize,
    pub max_prompt: usize,
    pub block_size: usize,
    pub draws: DrawSettings,
    pub config: CsmConfig,
    pub kv_usable: usize,
    /// The device, in words.
    pub device: String,
}

impl Seated for TtsInfo {
    fn seats(&self) -> usize {
        self.max_utterances
    }
}

/// One device's owner thread.
struct TtsDevice {
    owner: OwnerThread<StartJob>,
    info: TtsInfo,
    metrics: Arc<TtsMetrics>,
}

impl TtsDevice {
    fn start<B: LmOps + 'static>(
        stage: DeviceStage<TtsStageFactory<B>>,
        config: &TtsConfig,
        health: Arc<Health>,
    ) -> Result<Self> {
        let metrics = Arc::new(TtsMetrics::default());
        let thread_metrics = metrics.clone();
        let (owner, info) = stage.spawn_owner(
            "tts",
            config.max_queued_starts,
            health,
            move |factory, device| {
                let (stage, opts) = factory()?;
                let worker = Worker::new(stage, &opts, thread_metrics, device)?;
                let info = worker.info().clone();
                Ok((worker, info))
            },
        )?;
        metrics.set_slots(info.max_utterances);
        Ok(Self {
            owner,
            info,
            metrics,
        })
    }
}

/// The speech engine: one owner thread per device. Dropping it stops them; running utterances
/// end with `draining`.
pub struct TtsEngine {
    pool: StagePool<TtsDevice>,
    /// The model's dimensions; `max_utterances` and `kv_usable` count every device.
    info: TtsInfo,
    config: TtsConfig,
    /// Requests refused before they reached a device (the device's own with one device).
    metrics: Arc<TtsMetrics>,
    tokenizer: Option<CsmTokenizer>,
}

impl TtsEngine {
    /// Starts the owner thread of one device, which builds the stage with `factory`; returns
    /// once the stage is ready, or with the factory's error. `tokenizer` serves `text` requests.
    pub fn start<B: LmOps + 'static>(
        factory: TtsStageFactory<B>,
        config: TtsConfig,
        tokenizer: Option<CsmTokenizer>,
    ) -> Result<Self> {
        Self::start_on(
            vec![DeviceStage::new(DEFAULT_DEVICE, factory)],
            config,
            tokenizer,
        )
    }

    /// Starts one owner thread per device (each building its own stage); a new utterance goes to
    /// the device with the most free KV blocks. Fails, naming the device, when any fails to
    /// start.
    pub fn start_on<B: LmOps + 'static>(
        devices: Vec<DeviceStage<TtsStageFactory<B>>>,
        config: TtsConfig,
        tokenizer: Option<CsmTokenizer>,
    ) -> Result<Self> {
        const OP: &str = "TtsEngine::start";
        if config.max_queued_starts == 0
            || config.max_undelivered_frames == 0
            || config.default_max_frames == 0
            || config.speakers == 0
            || config.max_text_bytes == 0
        {
            return Err(Error::config(
                OP,
                format!("bounds must be positive, got {config:?}"),
            ));
        }
        let pool = start_pool(devices, |d, health| {
            let m = TtsDevice::start(d, &config, health)?;
            let capacity = Capacity {
                seats: m.info.seats(),
                blocks: m.info.kv_usable,
            };
            Ok((m, capacity))
        })?;
        let metrics = pool.front_metrics(|m| &m.metrics);
        let info = TtsInfo {
            max_utterances: pool.total(|m| m.info.max_utterances),
            kv_usable: pool.total(|m| m.info.kv_usable),
            ..pool.first().info.clone()
        };
        Ok(Self {
            pool,
            info,
            config,
            metrics,
            tokenizer,
        })
    }

    /// The stage's dimensions; `max_utterances` and `kv_usable` count every device.
    pub fn info(&self) -> &TtsInfo {
        &self.info
    }

    pub fn config(&self) -> &TtsConfig {
        &self.config
    }

    /// Counters and gauges of a one-device engine; with several devices, the refusals counted
    /// before an utterance reached any of them (each device's own are in
    /// [`Self::render_metrics`]).
    pub fn metrics(&self) -> &Arc<TtsMetrics> {
        &self.metrics
    }

    /// Every device's seats, reserved KV blocks and health.
    pub fn devices(&self) -> Vec<MemberStatus> {
        self.pool.status()
    }

    /// Appends the speech metrics: one device's as they are, several labelled by device.
    pub fn render_metrics(&self, out: &mut String) {
        self.pool.render_metrics(
            out,
            |m, out| m.metrics.render(out),
            |out| self.metrics.render_refused(out),
        );
    }

    /// Whether `text` requests can be served.
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Checks `req` against the model and the stage, and builds its utterance (tokenising its
    /// text here, on the caller's thread).
    pub fn prepare(&self, req: &TtsStart) -> std::result::Result<UtteranceSpec, TtsError> {
        build_utterance(req, &self.info, &self.config, self.tokenizer.as_ref())
    }

    /// Hands an utterance to the device with the most free KV blocks. The job's first event is
    /// `Started`, or its outcome is a refusal (`busy` when no device has a seat and the blocks
    /// free): nothing is queued behind a full stage.
    pub fn submit(&self, spec: UtteranceSpec) -> std::result::Result<TtsJob, TtsError> {
        let blocks = utterance_blocks(&spec, self.info.block_size);
        let received = Instant::now();
        let mut spec = Some(spec);
        self.pool
            .place(blocks, |device, seat| {
                let Some(s) = spec.take() else {
                    return Tried::Final(TtsError::internal(
                        "the utterance was already handed over",
                    ));
                };
                match self.submit_to(device, s, seat, received) {
                    Ok(job) => Tried::Placed(job),
                    Err(back) => {
                        let (e, back) = *back;
                        spec = Some(back);
                        Tried::Next(e)
                    }
                }
            })
            .map_err(|u| unplaced_error(u, "utterances"))
    }

    /// Hands an utterance to one device's thread; one it cannot take comes back.
    fn submit_to(
        &self,
        device: &TtsDevice,
        spec: UtteranceSpec,
        seat: Seat,
        received: Instant,
    ) -> std::result::Result<TtsJob, Box<(TtsError, UtteranceSpec)>> {
        // One more than the frame bound: `Started` takes a place too.
        let (job, side) = Job::channel(
            self.config.max_undelivered_frames + 1,
            TtsOutcome::engine_stopped,
        );
        let start = StartJob {
            spec,
            side,
            received,
            seat,
        };
        match device.owner.try_submit(start) {
            Ok(()) => Ok(job),
            Err((SubmitFailed::Full, back)) => Err(Box::new((
                TtsError::new(
                    TtsErrorCode::Busy,
                    format!(
                        "busy: {} utterances are already waiting for the speech engine",
                        self.config.max_queued_starts
                    ),
                ),
                back.spec,
            ))),
            Err((SubmitFailed::Stopped, back)) => Err(Box::new((
                TtsError::internal("the speech engine has stopped"),
                back.spec,
            ))),
        }
    }
}
