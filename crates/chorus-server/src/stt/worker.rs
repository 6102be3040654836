//! The owner thread's side: owns the stage, admits streams between steps (refusing at once, as
//! `busy`, what does not fit), moves each stream's audio from its input channel into the stage
//! (a few frames ahead at most, so a fast client waits on its own channel), steps while any
//! stream has a whole frame queued, and hands each stream's tokens, words and VAD to its own
//! bounded channel.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{LmOps, FRAME_MS, FRAME_SAMPLES};
use chorus_lm::Sampling;
use chorus_stt::{StreamEvent, StreamId, StreamRequest, SttStage, WordEvent};
use tokio::sync::mpsc::error::TrySendError;

use super::engine::SttInfo;
use super::job::{SttEvent, SttInput, SttOutcome, SttStarted};
use super::metrics::SttMetrics;
use crate::stage::error::{admission_error, StageError, StageErrorCode};
use crate::stage::input::InputRx;
use crate::stage::job::{CancelKind, CancelRequest, JobSide};
use crate::stage::owner::Owner;
use crate::stage::pool::Seat;

/// Frames of a stream the stage may hold queued before the owner thread stops taking its input:
/// enough to step it every step, few enough that a client sending faster than real time is held
/// back by its own channel rather than by memory.
pub(crate) const MAX_STAGED_FRAMES: usize = 4;
/// A flush's or an end's silence enters the stage one frame per this while other streams are
/// live, as audio would: all at once it would join every step back to back, and a live stream's
/// frame that arrives behind a step of every stream waits out two of them (the 2.6B at 850
/// streams missed 1,468 deadlines in the second its streams ended).
pub(crate) const SILENCE_PACE: Duration = Duration::from_millis(FRAME_MS);
/// A stream is live while its last audio came within this (its frames stepped by then): when
/// none is, silence goes at once. Only the audio's arrival counts, so that the last frames of a
/// stream that just ended are not left behind steps of every stream's silence (the 2.6B at 850
/// streams missed 185 deadlines as they ended while ending streams did not count as live).
pub(crate) const LIVE_WITHIN: Duration = Duration::from_millis(2 * FRAME_MS);
/// The VAD head read as the end of a turn (the 2 s pause horizon, `KYUTAI_STT.md` §1) and the
/// probability it must rise past (Kyutai's default rule).
pub const END_OF_TURN_HEAD: usize = 2;
pub const END_OF_TURN_THRESHOLD: f32 = 0.5;
/// Markers one stream may have waiting for their position: each waits in the owner thread's
/// memory, so a client sending markers without audio must be stopped, not stored forever.
pub const MAX_PENDING_MARKERS: usize = 1024;

/// A stream to admit, with where its events go and where its input comes from.
pub(crate) struct StartJob {
    pub side: JobSide<SttEvent, SttOutcome>,
    pub input: InputRx<SttInput>,
    /// Its share of the device, held while the stream is in the stage.
    pub seat: Seat,
}

/// An admitted stream's books.
struct Running {
    side: JobSide<SttEvent, SttOutcome>,
    input: InputRx<SttInput>,
    _seat: Seat,
    /// When each frame pushed and not yet stepped arrived, oldest first.
    arrivals: VecDeque<Instant>,
    /// Frames pushed since the stream (re)started.
    pushed: usize,
    /// The last position stepped.
    last: Option<usize>,
    /// The arrival of the frame the current position read (for its words' latency).
    decided: Option<Instant>,
    /// Positions that end each pending flush.
    flushes: VecDeque<usize>,
    /// Pending markers: the position each waits for, and its id.
    markers: VecDeque<(usize, i64)>,
    /// Frames of flush silence not yet in the stage (its later input waits behind them).
    silence_due: usize,
    /// When the next of them may enter ([`SILENCE_PACE`] apart).
    silence_at: Instant,
    /// The stream ends once its silence is in (`end`).
    end_after_silence: bool,
    /// When its last audio came (a live stream paces the others' silence).
    last_audio: Option<Instant>,
    words: usize,
    /// The end-of-turn head was above its threshold at the last step (true at the start: a turn
    /// ends only after speech).
    pausing: bool,
}

impl Running {
    fn new(side: JobSide<SttEvent, SttOutcome>, input: InputRx<SttInput>, seat: Seat) -> Self {
        Self {
            side,
            input,
            _seat: seat,
            arrivals: VecDeque::new(),
            pushed: 0,
            last: None,
            decided: None,
            flushes: VecDeque::new(),
            markers: VecDeque::new(),
            silence_due: 0,
            silence_at: Instant::now(),
            end_after_silence: false,
            last_audio: None,
            words: 0,
            pausing: true,
        }
    }

    fn restart(&mut self) {
        self.arrivals.clear();
        self.pushed = 0;
        self.last = None;
        self.decided = None;
        self.flushes.clear();
        self.markers.clear();
        self.silence_due = 0;
        self.end_after_silence = false;
        self.pausing = true;
    }
}

pub(crate) struct Worker<B: LmOps> {
    stage: SttStage<B>,
    info: SttInfo,
    jobs: HashMap<StreamId, Running>,
    metrics: Arc<SttMetrics>,
    /// One frame of silence (a flush is `flush_frames` of them).
    silence: Vec<f32>,
    /// `SttStage::flush_frames`.
    flush_frames: usize,
    step_streams: usize,
    /// `SttServeConfig::text_seed`.
    text_seed: Option<u64>,
    /// `SttServeConfig::step_gather`.
    step_gather: Duration,
    /// When the last step that launched streams started.
    last_launch: Instant,
    /// Streams admitted so far (the per-stream seed's counter).
    admitted: u64,
    /// The device, as errors name it.
    device: usize,
}

/// A stage refusal of a stream's input, as the client's `bad_request`.
fn bad_input(e: chorus_core::Error) -> StageError {
    StageError::bad_request(e.to_string())
}

fn slow_consumer() -> StageError {
    StageError::new(
        StageErrorCode::SlowConsumer,
        "the client did not read its results in time; the stream was cancelled",
    )
}

/// What the engine's configuration tells each device's worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkerSettings {
    pub text_seed: Option<u64>,
    pub step_gather: Duration,
}

impl<B: LmOps> Worker<B> {
    pub(crate) fn new(
        stage: SttStage<B>,
        info: SttInfo,
        metrics: Arc<SttMetrics>,
        settings: WorkerSettings,
        device: usize,
    ) -> Self {
        let WorkerSettings {
            text_seed,
            step_gather,
        } = settings;
        let silence = vec![0.0; FRAME_SAMPLES];
        let flush_frames = stage.flush_frames();
        Self {
            flush_frames,
            device,
            stage,
            info,
            jobs: HashMap::new(),
            metrics,
            silence,
            step_streams: 0,
            text_seed,
            step_gather,
            last_launch: Instant::now(),
            admitted: 0,
        }
    }

    fn admit_stream(&mut self, job: StartJob) {
        let StartJob { side, input, seat } = job;
        if side.events.is_closed() || side.shared.cancel_request() != CancelRequest::None {
            side.shared.set_outcome(SttOutcome::Ended {
                positions: 0,
                words: 0,
                cancelled: true,
            });
            return;
        }
        if self.jobs.len() >= self.info.max_streams {
            // A client that just left may not be swept yet: its slot is free.
            Owner::sweep(self);
        }
        if self.jobs.len() >= self.info.max_streams {
            let e = StageError::new(
                StageErrorCode::Busy,
                format!(
                    "busy: all {} transcription streams are in use",
                    self.info.max_streams
                ),
            );
            side.shared.set_outcome(SttOutcome::Failed(e));
            return;
        }
        let sampling = match self.text_seed {
            Some(base) => Sampling::Seeded(base.wrapping_add(self.admitted)),
            None => Sampling::Greedy,
        };
        match self.stage.add(StreamRequest {
            sampling,
            forced: None,
        }) {
            Ok(id) => {
                self.admitted += 1;
                // A fresh channel has room: this fails only when the client is gone (then the
                // next sweep cancels the stream).
                let _ = side
                    .events
                    .try_send(SttEvent::Started(SttStarted { stream: id }));
                self.jobs.insert(id, Running::new(side, input, seat));
                self.publish_gauges();
                self.metrics.started();
            }
            Err(e) => side
                .shared
                .set_outcome(SttOutcome::Failed(admission_error(&e))),
        }
    }

    /// Frees stream `id` now (a step in flight is discarded) with `outcome`.
    fn remove(&mut self, id: StreamId, outcome: SttOutcome) {
        let Some(r) = self.jobs.remove(&id) else {
            return;
        };
        let _ = self.stage.cancel(id);
        self.publish_gauges();
        r.side.shared.set_outcome(outcome);
    }

    fn cancel(&mut self, id: StreamId, kind: CancelKind) {
        self.metrics.cancelled(kind);
        let outcome = match kind {
            CancelKind::SlowConsumer => SttOutcome::Failed(slow_consumer()),
            CancelKind::Client | CancelKind::Disconnect => {
                let r = &self.jobs[&id];
                SttOutcome::Ended {
                    positions: r.last.map_or(0, |p| p + 1),
                    words: r.words,
                    cancelled: true,
                }
            }
        };
        self.remove(id, outcome);
    }

    /// Moves each stream's waiting input into the stage, up to [`MAX_STAGED_FRAMES`] queued, its
    /// flush silence first.
    fn take_streams_input(&mut self) {
        let mut failed = Vec::new();
        let now = Instant::now();
        let paced = self.any_live(now);
        let ids: Vec<StreamId> = self.jobs.keys().copied().collect();
        for id in ids {
            loop {
                match self.release_silence(id, now, paced) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        failed.push((id, e));
                        break;
                    }
                }
                let queued = self.stage.buffered_samples(id).unwrap_or(0);
                if queued >= MAX_STAGED_FRAMES * FRAME_SAMPLES {
                    break;
                }
                let Some(r) = self.jobs.get_mut(&id) else {
                    break;
                };
                let Some(msg) = r.input.try_recv() else {
                    break;
                };
                if let Err(e) = self.apply(id, msg) {
                    failed.push((id, e));
                    break;
                }
            }
        }
        for (id, e) in failed {
            self.metrics.failed();
            self.remove(id, SttOutcome::Failed(e));
        }
    }

    /// Whether some stream's audio came within [`LIVE_WITHIN`] (then silence is paced). A stream
    /// that just ended counts too: its last frames may still wait for their steps.
    fn any_live(&self, now: Instant) -> bool {
        self.jobs.values().any(|r| {
            r.last_audio
                .is_some_and(|t| now.saturating_duration_since(t) < LIVE_WITHIN)
        })
    }

    /// Pushes what is due of stream `id`'s flush silence (one frame per [`SILENCE_PACE`] while
    /// `paced`, else all of it), ending the stream after it if it asked; true once none is left,
    /// so its later input may follow.
    fn release_silence(
        &mut self,
        id: StreamId,
        now: Instant,
        paced: bool,
    ) -> std::result::Result<bool, StageError> {
        let Some(r) = self.jobs.get_mut(&id) else {
            return Ok(false);
        };
        if r.silence_due == 0 {
            return Ok(true);
        }
        let n = match (paced, now >= r.silence_at) {
            (false, _) => r.silence_due,
            (true, true) => 1,
            (true, false) => 0,
        };
        for _ in 0..n {
            self.stage.push_pcm(id, &self.silence).map_err(bad_input)?;
            r.pushed += 1;
            r.arrivals.push_back(now);
        }
        r.silence_due -= n;
        if n > 0 {
            r.silence_at = now + SILENCE_PACE;
        }
        if r.silence_due > 0 {
            return Ok(false);
        }
        if r.end_after_silence {
            self.stage.end(id).map_err(bad_input)?;
        }
        Ok(true)
    }

    /// Schedules a flush's silence: paced, its first frame enters a frame after the stream's last
    /// audio, as the next frame of audio would (at once, it made every ending stream's queue two
    /// frames deep, and 2,200 streams missed 1,572 deadlines in the second they ended).
    fn schedule_silence(r: &mut Running, frames: usize) {
        if r.silence_due == 0 {
            let now = Instant::now();
            r.silence_at = r.last_audio.map_or(now, |t| (t + SILENCE_PACE).max(now));
        }
        r.silence_due += frames;
    }

    /// One input message of stream `id`.
    fn apply(&mut self, id: StreamId, msg: SttInput) -> std::result::Result<(), StageError> {
        let (delay, max) = (self.info.config.text_delay_frames, self.info.max_frames);
        let (stage, flush_frames) = (&mut self.stage, self.flush_frames);
        let Some(r) = self.jobs.get_mut(&id) else {
            return Ok(());
        };
        let push = |stage: &mut SttStage<B>, r: &mut Running, pcm: &[f32], at: Instant| {
            stage.push_pcm(id, pcm).map_err(bad_input)?;
            let frames = pcm.len() / FRAME_SAMPLES;
            r.pushed += frames;
            r.arrivals.extend(std::iter::repeat_n(at, frames));
            Ok::<(), StageError>(())
        };
        match msg {
            SttInput::Audio { pcm, arrived } => {
                r.last_audio = Some(arrived);
                push(stage, r, &pcm, arrived)?;
            }
            SttInput::Flush => {
                // Refused here, not when its silence is due: paced silence lets flushes pile up.
                if r.pushed + r.silence_due + flush_frames > max {
                    return Err(StageError::bad_request(format!(
                        "`flush` adds {flush_frames} frames of silence to the stream's {} frames \
                         (silence of earlier flushes included): past the {max} one stream may send",
                        r.pushed + r.silence_due
                    )));
                }
                Self::schedule_silence(r, flush_frames);
                r.flushes.push_back(r.pushed + r.silence_due);
            }
            SttInput::Marker(m) => {
                if r.markers.len() >= MAX_PENDING_MARKERS {
                    return Err(StageError::bad_request(format!(
                        "Marker {m}: {MAX_PENDING_MARKERS} markers are already waiting for the \
                         stream to step past them (send audio after a marker)"
                    )));
                }
                r.markers.push_back((r.pushed + r.silence_due + delay, m))
            }
            SttInput::Reset => {
                stage.reset(id).map_err(bad_input)?;
                r.restart();
                let _ = r.side.events.try_send(SttEvent::ResetDone);
            }
            SttInput::End => {
                Self::schedule_silence(r, flush_frames);
                r.end_after_silence = true;
            }
        }
        Ok(())
    }

    /// Whether the next step should launch the streams with a frame queued now: every stream
    /// has one, or the gather time since the last launch is over (or nothing is queued: the
    /// step only reads what is in flight and retires ended streams).
    fn launch_due(&self) -> bool {
        let queued = self.stage.queued_streams();
        queued == 0
            || queued >= self.stage.active()
            || self.last_launch.elapsed() >= self.step_gather
    }

    /// One step of every stream with a frame queued, or, while streams are being gathered for
    /// the next one, the read of the step in flight alone.
    fn step_streams(&mut self) {
        let start = Instant::now();
        let launch = self.launch_due();
        let (mut frames, mut slow, mut ended) = (0usize, Vec::new(), Vec::new());
        let jobs = &mut self.jobs;
        let mut sink = |ev: StreamEvent<'_>| match ev {
            StreamEvent::Token {
                stream,
                position,
                token,
                vad,
                ..
            } => {
                let Some(r) = jobs.get_mut(&stream) else {
                    return;
                };
                if position > 0 {
                    frames += 1;
                    r.decided = r.arrivals.pop_front();
                }
                r.last = Some(position);
                let step = SttEvent::Step {
                    position,
                    token,
                    vad: vad.map(<[f32]>::to_vec),
                    buffered_samples: r.pushed.saturating_sub(position) * FRAME_SAMPLES,
                };
                hand(r, step, stream, &mut slow);
                if let Some(&p) = vad.and_then(|v| v.get(END_OF_TURN_HEAD)) {
                    let above = p > END_OF_TURN_THRESHOLD;
                    if above && !r.pausing {
                        let eot = SttEvent::EndOfTurn {
                            position,
                            probability: p,
                        };
                        hand(r, eot, stream, &mut slow);
                    }
                    r.pausing = above;
                }
            }
            StreamEvent::Word { stream, event } => {
                let Some(r) = jobs.get_mut(&stream) else {
                    return;
                };
                let ev = match event {
                    WordEvent::Word { tokens, start } => {
                        r.words += 1;
                        SttEvent::Word {
                            tokens,
                            start,
                            decided: r.decided,
                        }
                    }
                    WordEvent::EndWord { stop } => SttEvent::EndWord { stop },
                };
                hand(r, ev, stream, &mut slow);
            }
            StreamEvent::Ended { stream, positions } => ended.push((stream, positions)),
        };
        let result = if launch {
            self.stage.step(&mut sink)
        } else {
            self.stage.read_in_flight(&mut sink).map(|()| 0)
        };
        if launch {
            self.metrics.observe_step(start.elapsed().as_secs_f64());
        }
        self.metrics.frames(frames);
        match result {
            Ok(n) => {
                if n > 0 {
                    self.last_launch = start;
                }
                if launch {
                    self.step_streams = n;
                }
            }
            Err(e) => {
                self.fail_all(StageError::internal(format!(
                    "the transcription step failed on device {}: {e}",
                    self.device
                )));
                return;
            }
        }
        self.deliver_progress(&mut slow);
        for (id, positions) in ended {
            let Some(r) = self.jobs.remove(&id) else {
                continue;
            };
            if slow.contains(&id) {
                self.metrics.cancelled(CancelKind::SlowConsumer);
                r.side
                    .shared
                    .set_outcome(SttOutcome::Failed(slow_consumer()));
            } else {
                self.metrics.finished();
                r.side.shared.set_outcome(SttOutcome::Ended {
                    positions,
                    words: r.words,
                    cancelled: false,
                });
            }
        }
        self.publish_gauges();
        slow.sort_unstable();
        slow.dedup();
        for id in slow {
            if self.jobs.contains_key(&id) {
                self.cancel(id, CancelKind::SlowConsumer);
            }
        }
    }

    /// Flushes and markers whose position has been stepped.
    fn deliver_progress(&mut self, slow: &mut Vec<StreamId>) {
        for (&id, r) in self.jobs.iter_mut() {
            let Some(last) = r.last else { continue };
            while r.flushes.front().is_some_and(|&p| p <= last) {
                r.flushes.pop_front();
                hand(r, SttEvent::Flushed { position: last }, id, slow);
            }
            while let Some(&(p, m)) = r.markers.front() {
                if p > last {
                    break;
                }
                r.markers.pop_front();
                hand(r, SttEvent::Marker { id: m }, id, slow);
            }
        }
    }

    /// Ends every stream with `err` (a failed step may leave the stage's streams half-stepped).
    fn fail_all(&mut self, err: StageError) {
        let jobs = std::mem::take(&mut self.jobs);
        for &id in jobs.keys() {
            let _ = self.stage.cancel(id);
        }
        self.publish_gauges();
        for r in jobs.into_values() {
            self.metrics.failed();
            r.side.shared.set_outcome(SttOutcome::Failed(err.clone()));
        }
    }

    fn publish_gauges(&self) {
        self.metrics.set_active(self.jobs.len(), self.step_streams);
    }
}

/// Hands `ev` to stream `id`'s channel; a full channel marks the client slow (a closed one is
/// the next sweep's business).
fn hand(r: &Running, ev: SttEvent, id: StreamId, slow: &mut Vec<StreamId>) {
    if let Err(TrySendError::Full(_)) = r.side.events.try_send(ev) {
        slow.push(id);
    }
}

impl<B: LmOps> Owner for Worker<B> {
    type Start = StartJob;

    fn admit(&mut self, job: StartJob) {
        self.admit_stream(job);
    }

    fn sweep(&mut self) {
        let gone: Vec<(StreamId, CancelKind)> = self
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

    fn take_input(&mut self) {
        self.take_streams_input();
    }

    fn has_work(&self) -> bool {
        self.stage.step_in_flight() || (self.stage.has_work() && self.launch_due())
    }

    fn wake_at(&self) -> Option<Instant> {
        let gather = (self.stage.queued_streams() > 0 && !self.launch_due())
            .then(|| self.last_launch + self.step_gather);
        let silence = self
            .jobs
            .values()
            .filter(|r| r.silence_due > 0)
            .map(|r| r.silence_at)
            .min();
        gather.into_iter().chain(silence).min()
    }

    fn step(&mut self) {
        self.step_streams();
    }

    fn publish(&self) {
        self.publish_gauges();
    }

    fn stop(&mut self) {
        self.fail_all(StageError::new(
            StageErrorCode::Draining,
            "the transcription engine stopped: the server is shutting down",
        ));
    }

    fn abort(&mut self, why: &str) {
        self.fail_all(StageError::internal(why));
    }
}
