//! The speech engine's front: starts the owner thread, validates and submits utterances.

use std::sync::Arc;
use std::time::Instant;

use chorus_core::{Error, LmOps, Result};
use chorus_csm::{CsmConfig, CsmTokenizer, DrawSettings, TtsOptions, TtsStage};

use super::job::{TtsJob, TtsOutcome};
use super::metrics::TtsMetrics;
use super::request::{build_utterance, UtteranceSpec};
use super::start::TtsStart;
use super::worker::{StartJob, Worker};
use super::{TtsError, TtsErrorCode};
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};

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

/// The speech engine. Dropping it stops the owner thread; running utterances end with
/// `draining`.
pub struct TtsEngine {
    owner: OwnerThread<StartJob>,
    info: TtsInfo,
    config: TtsConfig,
    metrics: Arc<TtsMetrics>,
    tokenizer: Option<CsmTokenizer>,
}

impl TtsEngine {
    /// Starts the owner thread, which builds the stage with `factory`; returns once the stage is
    /// ready, or with the factory's error. `tokenizer` serves `text` requests.
    pub fn start<B: LmOps + 'static>(
        factory: TtsStageFactory<B>,
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
        let metrics = Arc::new(TtsMetrics::default());
        let thread_metrics = metrics.clone();
        let (owner, info) =
            OwnerThread::spawn("chorus-tts", config.max_queued_starts, move || {
                let (stage, opts) = factory()?;
                let worker = Worker::new(stage, &opts, thread_metrics)?;
                let info = worker.info().clone();
                Ok((worker, info))
            })?;
        metrics.set_slots(info.max_utterances);
        Ok(Self {
            owner,
            info,
            config,
            metrics,
            tokenizer,
        })
    }

    /// The stage's dimensions.
    pub fn info(&self) -> &TtsInfo {
        &self.info
    }

    pub fn config(&self) -> &TtsConfig {
        &self.config
    }

    /// Counters and gauges.
    pub fn metrics(&self) -> &Arc<TtsMetrics> {
        &self.metrics
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

    /// Hands an utterance to the owner thread. The job's first event is `Started`, or its
    /// outcome is a refusal (`busy` when every seat is taken): nothing is queued behind a full
    /// stage.
    pub fn submit(&self, spec: UtteranceSpec) -> std::result::Result<TtsJob, TtsError> {
        // One more than the frame bound: `Started` takes a place too.
        let (job, side) = Job::channel(
            self.config.max_undelivered_frames + 1,
            TtsOutcome::engine_stopped,
        );
        let start = StartJob {
            spec,
            side,
            received: Instant::now(),
        };
        match self.owner.try_submit(start) {
            Ok(()) => Ok(job),
            Err(SubmitFailed::Full) => Err(TtsError::new(
                TtsErrorCode::Busy,
                format!(
                    "busy: {} utterances are already waiting for the speech engine",
                    self.config.max_queued_starts
                ),
            )),
            Err(SubmitFailed::Stopped) => Err(TtsError::internal("the speech engine has stopped")),
        }
    }
}
