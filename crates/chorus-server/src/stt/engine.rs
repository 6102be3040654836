//! The transcription engine's front: starts the owner thread, submits streams.

use std::sync::Arc;

use chorus_core::{Error, LmOps, Result};
use chorus_stt::{SttConfig, SttOptions, SttStage, SttTokenizer};

use super::job::{SttJob, SttOutcome};
use super::metrics::SttMetrics;
use super::worker::{StartJob, Worker};
use crate::stage::error::{StageError, StageErrorCode};
use crate::stage::input::input_channel;
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};

/// Default bound on start requests waiting for the owner thread (it takes them all between two
/// steps, so this only fills when many arrive within one step).
pub const DEFAULT_MAX_QUEUED_STARTS: usize = 64;
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
    pub max_queued_starts: usize,
    /// Events a stream may have waiting for its client before it is cut off (`slow_consumer`).
    pub max_undelivered_events: usize,
    pub max_queued_input: usize,
    pub max_frames_per_message: usize,
    /// Sampled text tokens (the stage's `draws` hold the temperature): the n-th stream the
    /// engine admits draws with `Sampling::Seeded(base + n)`, a seed of its own that replays;
    /// `None`: greedy.
    pub text_seed: Option<u64>,
}

impl Default for SttServeConfig {
    fn default() -> Self {
        Self {
            max_queued_starts: DEFAULT_MAX_QUEUED_STARTS,
            max_undelivered_events: DEFAULT_MAX_UNDELIVERED_EVENTS,
            max_queued_input: DEFAULT_MAX_QUEUED_INPUT,
            max_frames_per_message: DEFAULT_MAX_FRAMES_PER_MESSAGE,
            text_seed: None,
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

/// The transcription engine. Dropping it stops the owner thread; running streams end with
/// `draining`.
pub struct SttEngine {
    owner: OwnerThread<StartJob>,
    info: SttInfo,
    config: SttServeConfig,
    metrics: Arc<SttMetrics>,
    tokenizer: Arc<SttTokenizer>,
}

impl SttEngine {
    /// Starts the owner thread, which builds the stage with `factory`; returns once the stage is
    /// ready, or with the factory's error. `tokenizer` spells the words.
    pub fn start<B: LmOps + 'static>(
        factory: SttStageFactory<B>,
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
        let metrics = Arc::new(SttMetrics::default());
        let thread_metrics = metrics.clone();
        let text_seed = config.text_seed;
        let (owner, info) = OwnerThread::spawn(
            "chorus-stt",
            config.max_queued_starts,
            move || {
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
                Ok((
                    Worker::new(stage, info.clone(), thread_metrics, text_seed),
                    info,
                ))
            },
        )?;
        metrics.set_slots(info.max_streams);
        Ok(Self {
            owner,
            info,
            config,
            metrics,
            tokenizer: Arc::new(tokenizer),
        })
    }

    pub fn info(&self) -> &SttInfo {
        &self.info
    }

    pub fn config(&self) -> &SttServeConfig {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<SttMetrics> {
        &self.metrics
    }

    pub fn tokenizer(&self) -> &SttTokenizer {
        &self.tokenizer
    }

    /// Hands a new stream to the owner thread. The job's first event is `Started`, or its
    /// outcome is a refusal (`busy` when every slot is taken): nothing is queued behind a full
    /// stage.
    pub fn submit(&self) -> std::result::Result<SttJob, StageError> {
        let (job, side) = Job::channel(
            self.config.max_undelivered_events,
            SttOutcome::engine_stopped,
        );
        let (tx, rx) = input_channel(self.config.max_queued_input, self.owner.waker());
        match self.owner.try_submit(StartJob { side, input: rx }) {
            Ok(()) => Ok(SttJob { job, input: tx }),
            Err(SubmitFailed::Full) => Err(StageError::new(
                StageErrorCode::Busy,
                format!(
                    "busy: {} streams are already waiting for the transcription engine",
                    self.config.max_queued_starts
                ),
            )),
            Err(SubmitFailed::Stopped) => {
                Err(StageError::internal("the transcription engine has stopped"))
            }
        }
    }
}
