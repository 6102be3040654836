//! The music engine's front: starts one engine thread per device, validates songs and places
//! each on the device with the most free KV blocks ([`crate::stage::pool`]).

use std::sync::Arc;

use chorus_core::{Error, LmOps, Result};
use chorus_music::prompt::PromptTokenizer;
use chorus_music::{SemanticStage, StageOptions};

use super::error::{MusicError, MusicErrorCode};
use super::job::{MusicJob, Outcome};
use super::metrics::MusicMetrics;
use super::request::{build_song, SongSpec};
use super::start::StartRequest;
use super::worker::{song_blocks, StartJob, Worker};
use crate::stage::job::Job;
use crate::stage::owner::{OwnerThread, SubmitFailed};
use crate::stage::pool::{
    start_pool, unplaced_error, Capacity, DeviceStage, Health, MemberStatus, Seat, Seated,
    StagePool, Tried, DEFAULT_DEVICE,
};

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
    /// Starts that may wait for the device's thread between two steps (at least its songs).
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

impl Seated for MusicInfo {
    fn seats(&self) -> usize {
        self.max_songs
    }
}

/// One device's engine thread.
struct MusicDevice {
    owner: OwnerThread<StartJob>,
    info: MusicInfo,
    metrics: Arc<MusicMetrics>,
}

impl MusicDevice {
    fn start<B: LmOps + 'static>(
        stage: DeviceStage<StageFactory<B>>,
        config: &MusicConfig,
        health: Arc<Health>,
    ) -> Result<Self> {
        let metrics = Arc::new(MusicMetrics::default());
        let thread_metrics = metrics.clone();
        let (owner, info) = stage.spawn_owner(
            "music",
            config.max_queued_starts,
            health,
            move |factory, device| {
                let (stage, opts) = factory()?;
                let worker = Worker::new(stage, &opts, thread_metrics, device);
                let info = worker.info().clone();
                Ok((worker, info))
            },
        )?;
        metrics.set_song_slots(info.max_songs);
        Ok(Self {
            owner,
            info,
            metrics,
        })
    }
}

/// The music engine: one engine thread per device. Dropping it stops them; running songs end
/// with `draining`.
pub struct MusicEngine {
    pool: StagePool<MusicDevice>,
    /// The model's dimensions; `max_songs` and `kv_usable` count every device.
    info: MusicInfo,
    config: MusicConfig,
    /// Requests refused before they reached a device (the device's own with one device).
    metrics: Arc<MusicMetrics>,
    tokenizer: Option<PromptTokenizer>,
}

impl MusicEngine {
    /// Starts the engine thread of one device, which builds the stage with `factory`; returns
    /// once the stage is ready, or with the factory's error. `tokenizer` serves
    /// `caption`/`lyrics` requests.
    pub fn start<B: LmOps + 'static>(
        factory: StageFactory<B>,
        config: MusicConfig,
        tokenizer: Option<PromptTokenizer>,
    ) -> Result<Self> {
        Self::start_on(
            vec![DeviceStage::new(DEFAULT_DEVICE, factory)],
            config,
            tokenizer,
        )
    }

    /// Starts one engine thread per device (each building its own stage); a new song goes to the
    /// device with the most free KV blocks. Fails, naming the device, when any fails to start.
    pub fn start_on<B: LmOps + 'static>(
        devices: Vec<DeviceStage<StageFactory<B>>>,
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
        let pool = start_pool(devices, |d, health| {
            let m = MusicDevice::start(d, &config, health)?;
            let capacity = Capacity {
                seats: m.info.seats(),
                blocks: m.info.kv_usable,
            };
            Ok((m, capacity))
        })?;
        let metrics = pool.front_metrics(|m| &m.metrics);
        let info = MusicInfo {
            max_songs: pool.total(|m| m.info.max_songs),
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

    /// The stage's dimensions; `max_songs` and `kv_usable` count every device.
    pub fn info(&self) -> &MusicInfo {
        &self.info
    }

    /// Counters and gauges of a one-device engine; with several devices, the refusals counted
    /// before a song reached any of them (each device's own are in [`Self::render_metrics`]).
    pub fn metrics(&self) -> &Arc<MusicMetrics> {
        &self.metrics
    }

    /// Every device's slots, reserved KV blocks and health.
    pub fn devices(&self) -> Vec<MemberStatus> {
        self.pool.status()
    }

    /// Appends the music metrics: one device's as they are, several labelled by device.
    pub fn render_metrics(&self, out: &mut String) {
        self.pool.render_metrics(
            out,
            |m, out| m.metrics.render(out),
            |out| self.metrics.render_refused(out),
        );
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

    /// Hands a song to the device with the most free KV blocks. The job's first event is
    /// `Started`, or its outcome is a refusal (`busy` when no device has a slot and the blocks
    /// free): nothing is queued behind a full stage.
    pub fn submit(&self, spec: SongSpec) -> std::result::Result<MusicJob, MusicError> {
        let blocks = song_blocks(&spec, self.info.block_size);
        let mut spec = Some(spec);
        self.pool
            .place(blocks, |device, seat| {
                let Some(s) = spec.take() else {
                    return Tried::Final(MusicError::internal("the song was already handed over"));
                };
                match self.submit_to(device, s, seat) {
                    Ok(job) => Tried::Placed(job),
                    Err(back) => {
                        let (e, back) = *back;
                        spec = Some(back);
                        Tried::Next(e)
                    }
                }
            })
            .map_err(|u| unplaced_error(u, "songs"))
    }

    /// Hands a song to one device's thread; a song it cannot take comes back.
    fn submit_to(
        &self,
        device: &MusicDevice,
        spec: SongSpec,
        seat: Seat,
    ) -> std::result::Result<MusicJob, Box<(MusicError, SongSpec)>> {
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
            seat,
        };
        match device.owner.try_submit(start) {
            Ok(()) => Ok(MusicJob { job, hiddens }),
            Err((SubmitFailed::Full, back)) => Err(Box::new((
                MusicError::new(
                    MusicErrorCode::Busy,
                    format!(
                        "busy: {} song requests are already waiting for the music engine",
                        self.config.max_queued_starts
                    ),
                ),
                back.spec,
            ))),
            Err((SubmitFailed::Stopped, back)) => Err(Box::new((
                MusicError::internal("the music engine has stopped"),
                back.spec,
            ))),
        }
    }
}
