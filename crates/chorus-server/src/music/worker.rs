//! The engine thread: owns the stage, admits songs between steps, steps every active song, and
//! hands each song's events to its own bounded channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use chorus_core::LmOps;
use chorus_music::{EndReason, SemanticStage, SongEvent, SongId, StageOptions};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::Sender;

use super::engine::MusicInfo;
use super::error::{MusicError, MusicErrorCode};
use super::job::{MusicEvent, MusicFrame, Outcome};
use super::metrics::{MusicGauges, MusicMetrics};
use super::request::SongSpec;
use crate::stage::job::{CancelKind, JobShared};
use crate::stage::owner::Owner;
use crate::stage::pool::Seat;

/// KV blocks a song reserves at admission: its worst case (prompt, every frame and the END
/// position) in both rows (conditional and unconditional).
pub(crate) fn song_blocks(spec: &SongSpec, block_size: usize) -> usize {
    let positions = spec.prompt_tokens() + spec.request.max_frames + 1;
    2 * chorus_lm::kv::blocks_for(positions, block_size)
}

/// A song to admit, with where its events go.
pub(crate) struct StartJob {
    pub spec: SongSpec,
    pub events: Sender<MusicEvent>,
    pub shared: Arc<JobShared<Outcome>>,
    /// Its share of the device, held while the song is in the stage.
    pub seat: Seat,
}

/// An admitted song's client side.
pub(super) struct Running {
    pub(super) events: Sender<MusicEvent>,
    pub(super) shared: Arc<JobShared<Outcome>>,
    pub(super) hiddens: bool,
    /// Frames handed to the channel.
    pub(super) sent: usize,
    pub(super) _seat: Seat,
}

pub(crate) struct Worker<B: LmOps> {
    pub(super) stage: SemanticStage<B>,
    pub(super) info: MusicInfo,
    /// Exactly the stage's active songs.
    pub(super) jobs: HashMap<SongId, Running>,
    pub(super) metrics: Arc<MusicMetrics>,
    pub(super) step_songs: usize,
    /// The device, as errors name it.
    pub(super) device: usize,
}

fn slow_consumer(frames: usize) -> MusicError {
    MusicError::new(
        MusicErrorCode::SlowConsumer,
        format!("the client did not read its frames in time: {frames} were waiting; the song was cancelled"),
    )
}

impl<B: LmOps> Worker<B> {
    pub(crate) fn new(
        stage: SemanticStage<B>,
        opts: &StageOptions,
        metrics: Arc<MusicMetrics>,
        device: usize,
    ) -> Self {
        let info = MusicInfo {
            max_songs: opts.max_songs,
            max_context: opts.max_context,
            max_prompt: opts.max_prompt,
            block_size: opts.block_size,
            vocab_size: stage.lm_config().vocab_size,
            hidden_size: stage.lm_config().hidden_size,
            kv_usable: stage.kv_blocks().2,
        };
        Self {
            stage,
            info,
            jobs: HashMap::new(),
            metrics,
            step_songs: 0,
            device,
        }
    }

    pub(crate) fn info(&self) -> &MusicInfo {
        &self.info
    }

    /// Cancels the songs whose clients cancelled, went away, or were too slow.
    fn sweep_songs(&mut self) {
        let gone: Vec<(SongId, CancelKind)> = self
            .jobs
            .iter()
            .filter_map(|(&id, r)| Some((id, r.shared.gone(&r.events)?)))
            .collect();
        for (id, kind) in gone {
            self.cancel(id, kind);
        }
    }

    fn cancel(&mut self, id: SongId, kind: CancelKind) {
        let Some(r) = self.jobs.remove(&id) else {
            return;
        };
        let frames = self.stage.cancel(id).unwrap_or(r.sent);
        self.publish_gauges();
        self.metrics.song_cancelled(kind);
        r.shared.set_outcome(match kind {
            CancelKind::SlowConsumer => Outcome::Failed(slow_consumer(r.sent)),
            CancelKind::Client | CancelKind::Disconnect => Outcome::Ended {
                reason: EndReason::Cancelled,
                frames,
            },
        });
    }

    /// One frame of every active song.
    fn step_songs(&mut self) {
        let start = Instant::now();
        let (mut frames, mut slow, mut ended) = (0usize, Vec::new(), Vec::new());
        let jobs = &mut self.jobs;
        let result = self.stage.step(&mut |ev| match ev {
            SongEvent::Frame {
                song,
                index,
                codes,
                hidden,
            } => {
                frames += 1;
                let Some(r) = jobs.get_mut(&song) else {
                    return;
                };
                let frame = MusicFrame {
                    index,
                    codes,
                    hidden: r.hiddens.then(|| hidden.to_vec()),
                };
                match r.events.try_send(MusicEvent::Frame(frame)) {
                    Ok(()) => r.sent += 1,
                    Err(TrySendError::Full(_)) => slow.push(song),
                    // The client is gone: the next sweep cancels the song.
                    Err(TrySendError::Closed(_)) => {}
                }
            }
            SongEvent::Ended {
                song,
                reason,
                frames,
            } => ended.push((song, reason, frames)),
        });
        self.metrics.observe_step(start.elapsed().as_secs_f64());
        self.metrics.frames(frames);
        match result {
            Ok(n) => self.step_songs = n,
            Err(e) => {
                self.fail_all(MusicError::internal(format!(
                    "the music step failed on device {}: {e}",
                    self.device
                )));
                return;
            }
        }
        // Gauges before counters (ended songs are already out of the stage).
        self.publish_gauges();
        for (song, reason, frames) in ended {
            let Some(r) = self.jobs.remove(&song) else {
                continue;
            };
            if slow.contains(&song) {
                self.metrics.song_cancelled(CancelKind::SlowConsumer);
                r.shared.set_outcome(Outcome::Failed(slow_consumer(r.sent)));
            } else {
                self.metrics.song_finished();
                r.shared.set_outcome(Outcome::Ended { reason, frames });
            }
        }
        for song in slow {
            self.cancel(song, CancelKind::SlowConsumer);
        }
    }

    /// Ends every song with `err` (a failed step may leave the stage's songs half-stepped).
    fn fail_all(&mut self, err: MusicError) {
        let jobs = std::mem::take(&mut self.jobs);
        for &id in jobs.keys() {
            let _ = self.stage.cancel(id);
        }
        self.publish_gauges();
        for r in jobs.into_values() {
            self.metrics.song_failed();
            r.shared.set_outcome(Outcome::Failed(err.clone()));
        }
    }

    pub(super) fn publish_gauges(&self) {
        let (in_use, available, usable) = self.stage.kv_blocks();
        self.metrics.set_gauges(MusicGauges {
            active_songs: self.stage.active(),
            step_songs: self.step_songs,
            kv_in_use: in_use,
            kv_available: available,
            kv_usable: usable,
        });
    }
}

impl<B: LmOps> Owner for Worker<B> {
    type Start = StartJob;

    fn admit(&mut self, job: StartJob) {
        self.admit_song(job);
    }

    fn sweep(&mut self) {
        self.sweep_songs();
    }

    fn has_jobs(&self) -> bool {
        !self.jobs.is_empty()
    }

    fn step(&mut self) {
        self.step_songs();
    }

    fn publish(&self) {
        self.publish_gauges();
    }

    fn stop(&mut self) {
        self.fail_all(MusicError::new(
            MusicErrorCode::Draining,
            "the music engine stopped: the server is shutting down",
        ));
    }

    fn abort(&mut self, why: &str) {
        self.fail_all(MusicError::internal(why));
    }
}
