//! The owner thread's side: owns the stage, admits utterances between steps (refusing at once,
//! as `busy`, what does not fit), steps every active utterance, and hands each one's frames to
//! its own bounded channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{Error, LmOps, Result};
use chorus_csm::{TtsOptions, TtsStage, UtteranceEvent, UtteranceId};
use tokio::sync::mpsc::error::TrySendError;

use super::engine::TtsInfo;
use super::job::{TtsEndReason, TtsEvent, TtsFrame, TtsOutcome, TtsStarted};
use super::metrics::{TtsGauges, TtsMetrics};
use super::request::UtteranceSpec;
use super::{TtsError, TtsErrorCode};
use crate::stage::error::admission_error;
use crate::stage::job::{CancelKind, CancelRequest, JobSide};
use crate::stage::owner::Owner;
use crate::stage::pool::Seat;

/// KV blocks an utterance reserves at admission: its prompt and every frame it may draw.
pub(crate) fn utterance_blocks(spec: &UtteranceSpec, block_size: usize) -> usize {
    chorus_lm::kv::blocks_for(spec.prompt_frames() + spec.request.max_frames, block_size)
}

/// An utterance to admit, with where its events go.
pub(crate) struct StartJob {
    pub spec: UtteranceSpec,
    pub side: JobSide<TtsEvent, TtsOutcome>,
    /// When the front accepted the request (time to first audio counts from here).
    pub received: Instant,
    /// Its share of the device, held while the utterance is in the stage.
    pub seat: Seat,
}

/// An admitted utterance's client side.
struct Running {
    side: JobSide<TtsEvent, TtsOutcome>,
    received: Instant,
    first_audio: Option<Duration>,
    /// Frames handed to the channel.
    sent: usize,
    _seat: Seat,
}

pub(crate) struct Worker<B: LmOps> {
    stage: TtsStage<B>,
    info: TtsInfo,
    /// Exactly the stage's active utterances.
    jobs: HashMap<UtteranceId, Running>,
    metrics: Arc<TtsMetrics>,
    step_utterances: usize,
    /// The device, as errors name it.
    device: usize,
}

fn slow_consumer(frames: usize) -> TtsError {
    TtsError::new(
        TtsErrorCode::SlowConsumer,
        format!(
            "the client did not read its audio in time: {frames} frames were waiting; the utterance was cancelled"
        ),
    )
}

impl<B: LmOps> Worker<B> {
    pub(crate) fn new(
        stage: TtsStage<B>,
        opts: &TtsOptions,
        metrics: Arc<TtsMetrics>,
        device: usize,
    ) -> Result<Self> {
        if !stage.decodes_audio() {
            return Err(Error::config(
                "tts::Worker::new",
                "the speech stage was built without a Mimi decoder: /v1/tts serves audio",
            ));
        }
        let info = TtsInfo {
            max_utterances: opts.max_utterances,
            max_context: opts.max_context,
            max_prompt: opts.max_prompt,
            block_size: opts.block_size,
            draws: opts.draws,
            config: stage.config().clone(),
            kv_usable: stage.kv_blocks().2,
            device: stage.backend().device_description(),
        };
        Ok(Self {
            stage,
            info,
            jobs: HashMap::new(),
            metrics,
            step_utterances: 0,
            device,
        })
    }

    pub(crate) fn info(&self) -> &TtsInfo {
        &self.info
    }

    /// Admits an utterance or refuses it at once (nothing waits for a seat).
    fn admit_utterance(&mut self, job: StartJob) {
        let StartJob {
            spec,
            side,
            received,
            seat,
        } = job;
        if side.events.is_closed() || side.shared.cancel_request() != CancelRequest::None {
            side.shared.set_outcome(TtsOutcome::Ended {
                reason: TtsEndReason::Cancelled,
                frames: 0,
                first_audio: None,
            });
            return;
        }
        if let Err(e) = self.fits(&spec) {
            side.shared.set_outcome(TtsOutcome::Failed(e));
            return;
        }
        let (max_frames, prompt_frames) = (spec.request.max_frames, spec.prompt_frames());
        match self.stage.add(spec.request) {
            Ok(id) => {
                // A fresh channel has room, so this fails only when the client is gone; the
                // next sweep then cancels the utterance.
                let _ = side.events.try_send(TtsEvent::Started(TtsStarted {
                    utterance: id,
                    max_frames,
                    prompt_frames,
                }));
                let running = Running {
                    side,
                    received,
                    first_audio: None,
                    sent: 0,
                    _seat: seat,
                };
                self.jobs.insert(id, running);
                // Gauges first, so that a started utterance is never seen as not active.
                self.publish_gauges();
                self.metrics.started();
            }
            Err(e) => side
                .shared
                .set_outcome(TtsOutcome::Failed(admission_error(&e))),
        }
    }

    /// Refuses, as `busy`, an utterance for which no seat or KV blocks are free now.
    fn fits(&self, spec: &UtteranceSpec) -> std::result::Result<(), TtsError> {
        if self.jobs.len() >= self.info.max_utterances {
            return Err(TtsError::new(
                TtsErrorCode::Busy,
                format!(
                    "busy: all {} utterance seats are in use",
                    self.info.max_utterances
                ),
            ));
        }
        let need = utterance_blocks(spec, self.info.block_size);
        let (_, available, usable) = self.stage.kv_blocks();
        if need > available {
            return Err(TtsError::new(
                TtsErrorCode::Busy,
                format!(
                    "busy: the utterance needs {need} KV blocks and {available} of {usable} are free"
                ),
            ));
        }
        Ok(())
    }

    fn cancel(&mut self, id: UtteranceId, kind: CancelKind) {
        let Some(r) = self.jobs.remove(&id) else {
            return;
        };
        // The stage frees the seat and its blocks now; a frame in flight is discarded.
        let _ = self.stage.cancel(id);
        self.publish_gauges();
        self.metrics.cancelled(kind);
        r.side.shared.set_outcome(match kind {
            CancelKind::SlowConsumer => TtsOutcome::Failed(slow_consumer(r.sent)),
            CancelKind::Client | CancelKind::Disconnect => TtsOutcome::Ended {
                reason: TtsEndReason::Cancelled,
                frames: r.sent,
                first_audio: r.first_audio,
            },
        });
    }

    /// One frame of every active utterance.
    fn step_utterances(&mut self) {
        let start = Instant::now();
        let (mut frames, mut slow, mut ended) = (0usize, Vec::new(), Vec::new());
        let (jobs, metrics) = (&mut self.jobs, &self.metrics);
        let result = self.stage.step(&mut |ev| match ev {
            UtteranceEvent::Frame {
                utterance,
                index,
                pcm,
                ..
            } => {
                frames += 1;
                let Some(r) = jobs.get_mut(&utterance) else {
                    return;
                };
                let frame = TtsFrame {
                    index,
                    pcm: pcm.map(<[f32]>::to_vec).unwrap_or_default(),
                };
                match r.side.events.try_send(TtsEvent::Frame(frame)) {
                    Ok(()) => {
                        r.sent += 1;
                        if r.first_audio.is_none() {
                            let t = r.received.elapsed();
                            r.first_audio = Some(t);
                            metrics.observe_first_audio(t.as_secs_f64());
                        }
                    }
                    Err(TrySendError::Full(_)) => slow.push(utterance),
                    // The client is gone: the next sweep cancels the utterance.
                    Err(TrySendError::Closed(_)) => {}
                }
            }
            UtteranceEvent::Ended {
                utterance, reason, ..
            } => ended.push((utterance, reason)),
        });
        self.metrics.observe_step(start.elapsed().as_secs_f64());
        self.metrics.frames(frames);
        match result {
            Ok(n) => self.step_utterances = n,
            Err(e) => {
                self.fail_all(TtsError::internal(format!(
                    "the speech step failed on device {}: {e}",
                    self.device
                )));
                return;
            }
        }
        // Gauges before counters (ended utterances are already out of the stage).
        self.publish_gauges();
        for (id, reason) in ended {
            let Some(r) = self.jobs.remove(&id) else {
                continue;
            };
            if slow.contains(&id) {
                self.metrics.cancelled(CancelKind::SlowConsumer);
                r.side
                    .shared
                    .set_outcome(TtsOutcome::Failed(slow_consumer(r.sent)));
            } else {
                self.metrics.finished();
                r.side.shared.set_outcome(TtsOutcome::Ended {
                    reason: reason.into(),
                    frames: r.sent,
                    first_audio: r.first_audio,
                });
            }
        }
        for id in slow {
            self.cancel(id, CancelKind::SlowConsumer);
        }
    }

    /// Ends every utterance with `err` (a failed step may leave the stage's utterances
    /// half-stepped).
    fn fail_all(&mut self, err: TtsError) {
        let jobs = std::mem::take(&mut self.jobs);
        for &id in jobs.keys() {
            let _ = self.stage.cancel(id);
        }
        self.publish_gauges();
        for r in jobs.into_values() {
            self.metrics.failed();
            r.side.shared.set_outcome(TtsOutcome::Failed(err.clone()));
        }
    }

    fn publish_gauges(&self) {
        let (in_use, available, _) = self.stage.kv_blocks();
        self.metrics.set_gauges(TtsGauges {
            active_utterances: self.stage.active(),
            step_utterances: self.step_utterances,
            kv_in_use: in_use,
            kv_available: available,
        });
    }
}

impl<B: LmOps> Owner for Worker<B> {
    type Start = StartJob;

    fn admit(&mut self, job: StartJob) {
        self.admit_utterance(job);
    }

    fn sweep(&mut self) {
        let gone: Vec<(UtteranceId, CancelKind)> = self
            .jobs
            .iter()
            .filter_map(|(&id, r)| Some((id, r.side.shared.gone(&r.side.events)?)))
            .collect();
        for (id, kind) in gone {
            self.cancel(id, kind);
        }
    }

    fn has_jobs(&self) -> bool {
        !self.jobs.is_empty()
    }

    fn step(&mut self) {
        self.step_utterances();
    }

    fn publish(&self) {
        self.publish_gauges();
    }

    fn stop(&mut self) {
        self.fail_all(TtsError::new(
            TtsErrorCode::Draining,
            "the speech engine stopped: the server is shutting down",
        ));
    }

    fn abort(&mut self, why: &str) {
        self.fail_all(TtsError::internal(why));
    }
}
