//! The music engine's front: starts the engine thread, validates and submits songs.

use std::sync::Arc;

use chorus_core::{Error, LmOps, Result};
use chorus_music::prompt::PromptTokenizer;
use chorus_music::{SemanticStage, StageOptions};

use super::error::{MusicError, MusicErrorCode};
use super::job::{MusicJob, Outcome};
use super::metrics::MusicMetrics;
use super::request::{build_song, SongSpec};
use super::start::StartRequest;
use super::worker::{StartJob, Worker};
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};

/// Default bound on start requests waiting for the engine thread (it takes them all between two
/// steps, so this only fills when many arrive within one step).
pub const DEFAULT_MAX_QUEUED_STARTS: usize = 64;
/// Default bound on a song's frames its client has not read yet: 10 s of music at 25 frames/s.
pub const DEFAULT_MAX_UNDELIVERED_FRAMES: usize = 250;

/// Builds the stage on the engine thread (a device backend may have to stay on the thread that
/// made it); returns the stage with the options it was built with.
pub type StageFactory<B> = Box<dyn FnOnce() -> Result<(SemanticStage<B>, StageOptions)> + Send>;

/// Queue bounds of the music engine.
#[derive(Clone, Debug)]
pub struct MusicConfig {
    pub max_queued_starts: usize,
    /// Frames a song may have waiting for its client before the song is cut off (`slow_consumer`).
    pub max_undelivered_frames: usize,
}

impl Default for MusicConfig {
    fn default() -> Self {
        Self {
            max_queued_starts: DEFAULT_MAX_QUEUED_STARTS,
            max_undelivered_frames: DEFAULT_MAX_UNDELIVERED_FRAMES,
        }
    }
}

/// What the stage told the engine at start-up.
#[derive(Clone, Debug)]
pub struct MusicInfo {
    pub max_songs: usize,
    pub max_context: usize,
    pub max_prompt: usize,
    pub block_size: usize,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub kv_usable: usize,
}

/// The music engine. Dropping it stops the engine thread; running songs end with `draining`.
pub struct MusicEngine {
    owner: OwnerThread<StartJob>,
    info: MusicInfo,
    config: MusicConfig,
    metrics: Arc<MusicMetrics>,
    tokenizer: Option<PromptTokenizer>,
}

impl MusicEngine {
    /// Starts the engine thread, which builds the stage with `factory`; returns once the stage is
    /// ready, or with the factory's error. `tokenizer` serves `caption`/`lyrics` requests.
    pub fn start<B: LmOps + 'static>(
        factory: StageFactory<B>,
        config: MusicConfig,
        tokenizer: Option<PromptTokenizer>,
    ) -> Result<Self> {
        const OP: &str = "MusicEngine::start";
        if config.max_queued_starts == 0 || config.max_undelivered_frames == 0 {
            return Err(Error::config(
                OP,
                format!("queue bounds must be positive, got {config:?}"),
            ));
        }
        let metrics = Arc::new(MusicMetrics::default());
        let thread_metrics = metrics.clone();
        let (owner, info) =
            OwnerThread::spawn("chorus-music", config.max_queued_starts, move || {
                let (stage, opts) = factory()?;
                let worker = Worker::new(stage, &opts, thread_metrics);
                let info = worker.info().clone();
                Ok((worker, info))
            })?;
        metrics.set_song_slots(info.max_songs);
        Ok(Self {
            owner,
            info,
            config,
            metrics,
            tokenizer,
        })
    }

    /// The stage's dimensions.
    pub fn info(&self) -> &MusicInfo {
        &self.info
    }

    /// Counters and gauges.
    pub fn metrics(&self) -> &Arc<MusicMetrics> {
        &self.metrics
    }

    /// Whether `caption`/`lyrics` requests can be served.
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Checks `req` against the model and the stage, and builds its song (tokenising a text
    /// prompt here, on the caller's thread).
    pub fn prepare(
        &self,
        req: &StartRequest,
        hiddens: bool,
    ) -> std::result::Result<SongSpec, MusicError> {
        build_song(req, hiddens, &self.info, self.tokenizer.as_ref())
    }

    /// Hands a song to the engine thread. The job's first event is `Started`, or its outcome is
    /// a refusal (`busy` when no slot or KV blocks are free): nothing is queued behind a full stage.
    pub fn submit(&self, spec: SongSpec) -> std::result::Result<MusicJob, MusicError> {
        // One more than the frame bound: `Started` takes a place too.
        let (job, side) = Job::channel(
            self.config.max_undelivered_frames + 1,
            Outcome::engine_stopped,
        );
        let hiddens = spec.hiddens;
        let start = StartJob {
            spec,
            events: side.events,
            shared: side.shared,
        };
        match self.owner.try_submit(start) {
            Ok(()) => Ok(MusicJob { job, hiddens }),
            Err(SubmitFailed::Full) => Err(MusicError::new(
                MusicErrorCode::Busy,
                format!(
                    "busy: {} song requests are already waiting for the music engine",
                    self.config.max_queued_starts
                ),
            )),
            Err(SubmitFailed::Stopped) => Err(MusicError::internal("the music engine has stopped")),
        }
    }
}
