//! One `/v1/stt` WebSocket: `start`, then audio as binary messages (any chunk size, cut into
//! whole frames here) and `flush` / `reset` / `end` / `cancel`; the stream's steps, words and
//! turn ends come back as JSON until `end`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};

use super::engine::SttEngine;
use super::job::{SttEvent, SttInput, SttJob, SttOutcome, SttUpdate};
use super::protocol::{
    parse_stt_message, SttClientMessage, SttServerMessage, SttStart, PARSE_START,
};
use crate::encode::wire::{AudioIn, Framer};
use crate::gate::ws::LimitedUpgrade;
use crate::protocol::{ErrorCode, PcmFormat, ProtocolError};
use crate::server::AppState;
use crate::stage::conn::{await_start, draining, error, finish, read_failed, End};
use crate::stage::error::{error_response, StageError, StageErrorCode};
use crate::stage::input::InputTx;
use crate::stage::job::Job;
use crate::stage::socket::{self, SendFailed};
use crate::ws::stopping;

/// What a transcription connection's errors call its jobs.
const JOBS: &str = "streams";
/// Input messages a connection holds while the owner thread's channel is full; past it the
/// socket is not read (TCP holds the client back).
const MAX_HELD_INPUT: usize = 4;

pub(crate) fn not_enabled() -> Response {
    error_response(&StageError::new(
        StageErrorCode::NotEnabled,
        "this server runs without a speech-to-text model (start it with --stt-model)",
    ))
}

pub(crate) async fn upgrade(
    ws: Result<LimitedUpgrade, WebSocketUpgradeRejection>,
    State(state): State<AppState>,
) -> Response {
    let Some(stt) = state.stt.clone() else {
        return not_enabled();
    };
    let ws = match ws {
        Ok(LimitedUpgrade(ws)) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    ws.on_upgrade(move |socket| async move {
        let _guard = state.connections.enter();
        SttConn { socket, stt, state }.run().await;
    })
}

/// A framer error as a stage error.
pub(crate) fn audio_error(e: ProtocolError) -> StageError {
    let code = match e.code {
        ErrorCode::BadFrameSize => StageErrorCode::BadFrameSize,
        ErrorCode::BadAudio => StageErrorCode::BadAudio,
        _ => StageErrorCode::Internal,
    };
    StageError::new(code, e.message)
}

/// The audio format of a `start`.
pub(crate) fn audio_in(format: PcmFormat) -> AudioIn {
    match format {
        PcmFormat::S16 => AudioIn::S16,
        PcmFormat::F32 => AudioIn::F32,
        PcmFormat::Opus => AudioIn::Opus,
    }
}

/// A stream's input on its way: cut into frames here, held while the owner thread's channel is
/// full.
pub(crate) struct Feed {
    pub framer: Framer,
    pub held: VecDeque<SttInput>,
    frames: Vec<f32>,
    /// `end` was sent (or the server drains): nothing more is read.
    pub closing: bool,
}

impl Feed {
    pub(crate) fn new(framer: Framer) -> Self {
        Self {
            framer,
            held: VecDeque::new(),
            frames: Vec::new(),
            closing: false,
        }
    }

    /// Holds the whole frames buffered so far as one input.
    pub(crate) fn hold_frames(&mut self) {
        self.framer.take_frames(&mut self.frames);
        self.hold_taken();
    }

    /// Holds the partial frame, completed with silence, then `then`.
    pub(crate) fn hold_tail_then(&mut self, then: SttInput) {
        self.framer.take_padded_tail(&mut self.frames);
        self.hold_taken();
        self.held.push_back(then);
    }

    fn hold_taken(&mut self) {
        if !self.frames.is_empty() {
            let pcm = std::mem::take(&mut self.frames);
            self.held.push_back(SttInput::Audio {
                pcm,
                arrived: Instant::now(),
            });
        }
    }

    /// Whether the socket may be read now.
    pub(crate) fn reading(&self) -> bool {
        !self.closing && self.held.len() < MAX_HELD_INPUT
    }
}

struct SttConn {
    socket: WebSocket,
    stt: Arc<SttEngine>,
    state: AppState,
}

impl SttConn {
    async fn run(mut self) {
        let started = await_start(&mut self.socket, &self.state, PARSE_START, JOBS).await;
        let end = match started.and_then(|req| self.submit(&req)) {
            Ok((job, feed)) => self.stream(job, feed).await,
            Err(end) => {
                if let End::Error(e) = &end {
                    self.stt.metrics().refused(e.code);
                }
                end
            }
        };
        finish(&mut self.socket, &self.state, end, "stream ended").await;
    }

    fn submit(&self, req: &SttStart) -> Result<(SttJob, (Feed, PcmFormat)), End> {
        if *self.state.shutdown.borrow() {
            return Err(draining(JOBS));
        }
        let max = self.stt.config().max_frames_per_message;
        let framer =
            Framer::new(audio_in(req.format), max).map_err(|e| End::Error(audio_error(e)))?;
        let job = self.stt.submit().map_err(End::Error)?;
        Ok((job, (Feed::new(framer), req.format)))
    }

    /// Forwards the stream's events until it ends; reads audio and control messages and hands
    /// them on in order.
    async fn stream(&mut self, job: SttJob, (mut feed, format): (Feed, PcmFormat)) -> End {
        let SttJob { mut job, input } = job;
        let mut started = false;
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                update = job.next() => {
                    match self.forward(update, format, &mut started).await {
                        Ok(None) => {}
                        Ok(Some(end)) => return end,
                        Err(SendFailed::Closed) => return End::Quiet,
                        Err(SendFailed::TimedOut) => {
                            // The client stopped reading and its socket is full: cut it off.
                            job.cut_off_slow();
                            input.wake();
                            return End::Quiet;
                        }
                    }
                }
                permit = input.reserve(), if !feed.held.is_empty() => {
                    match (permit, feed.held.pop_front()) {
                        (Ok(p), Some(i)) => p.send(i),
                        // The stream ended: its outcome comes next.
                        _ => feed.held.clear(),
                    }
                }
                msg = self.socket.recv(), if feed.reading() => {
                    if let Some(end) = self.handle(msg, &mut feed, &job, &input) {
                        return end;
                    }
                }
                _ = stopping(&mut shutdown), if !feed.closing => {
                    // Draining: the audio received so far is transcribed and delivered.
                    feed.closing = true;
                    feed.hold_tail_then(SttInput::End);
                }
            }
        }
    }

    /// One client message; `Some` ends the connection (and the stream).
    fn handle(
        &mut self,
        msg: Option<Result<Message, axum::Error>>,
        feed: &mut Feed,
        job: &Job<SttEvent, SttOutcome>,
        input: &InputTx<SttInput>,
    ) -> Option<End> {
        match msg {
            Some(Err(e)) => Some(read_failed(&self.state, &e)),
            None | Some(Ok(Message::Close(_))) => Some(End::Quiet),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
            Some(Ok(Message::Binary(bytes))) => match feed.framer.push(&bytes) {
                Ok(()) => {
                    feed.hold_frames();
                    None
                }
                Err(e) => Some(End::Error(audio_error(e))),
            },
            Some(Ok(Message::Text(text))) => match parse_stt_message(&text) {
                Ok(SttClientMessage::Flush) => {
                    feed.hold_tail_then(SttInput::Flush);
                    None
                }
                Ok(SttClientMessage::End) => {
                    feed.closing = true;
                    feed.hold_tail_then(SttInput::End);
                    None
                }
                Ok(SttClientMessage::Reset) => {
                    // Audio not yet framed belongs to the stream being restarted.
                    feed.framer.clear();
                    feed.held.push_back(SttInput::Reset);
                    None
                }
                Ok(SttClientMessage::Cancel) => {
                    job.cancel();
                    input.wake();
                    None
                }
                Ok(SttClientMessage::Start(_)) => Some(error(
                    StageErrorCode::AlreadyStarted,
                    "a connection carries one stream: `start` was already sent",
                )),
                Err(e) => Some(End::Error(e)),
            },
        }
    }

    /// Sends one update to the client; `Some` ends the connection.
    async fn forward(
        &mut self,
        update: SttUpdate,
        format: PcmFormat,
        started: &mut bool,
    ) -> Result<Option<End>, SendFailed> {
        let info = self.stt.info();
        let msg = match update {
            SttUpdate::Event(SttEvent::Started(s)) => {
                *started = true;
                SttServerMessage::Started {
                    stream: s.stream,
                    sample_rate: SAMPLE_RATE,
                    frame_samples: FRAME_SAMPLES,
                    format,
                    text_delay_frames: info.config.text_delay_frames,
                    silence_prefix_seconds: info.config.silence_prefix_seconds,
                    vad_heads: info.config.extra_heads,
                    flush_frames: info.flush_frames,
                    max_frames: info.max_frames,
                }
            }
            SttUpdate::Event(SttEvent::Step {
                position,
                token,
                vad,
                buffered_samples,
            }) => SttServerMessage::Step {
                position,
                token,
                vad,
                buffered_samples,
            },
            SttUpdate::Event(SttEvent::Word {
                tokens,
                start,
                decided,
            }) => {
                let text = match self.stt.tokenizer().decode(&tokens) {
                    Ok(t) => t,
                    Err(e) => {
                        return Ok(Some(End::Error(StageError::internal(format!(
                            "spelling a word: {e}"
                        )))))
                    }
                };
                let msg = SttServerMessage::Word {
                    text,
                    tokens,
                    start,
                };
                self.send_json(&msg).await?;
                let latency = decided.map(|t| t.elapsed().as_secs_f64());
                self.stt.metrics().word_sent(latency);
                return Ok(None);
            }
            SttUpdate::Event(SttEvent::EndWord { stop }) => SttServerMessage::EndWord { stop },
            SttUpdate::Event(SttEvent::EndOfTurn {
                position,
                probability,
            }) => SttServerMessage::EndOfTurn {
                position,
                probability,
            },
            SttUpdate::Event(SttEvent::Flushed { position }) => {
                SttServerMessage::Flushed { position }
            }
            SttUpdate::Event(SttEvent::ResetDone) => SttServerMessage::ResetDone,
            // Markers are `/api/asr-streaming`'s.
            SttUpdate::Event(SttEvent::Marker { .. }) => return Ok(None),
            SttUpdate::Done(SttOutcome::Ended {
                positions,
                words,
                cancelled,
            }) => {
                let msg = SttServerMessage::End {
                    reason: if cancelled { "cancelled" } else { "end" },
                    positions,
                    words,
                };
                return Ok(Some(match self.send_json(&msg).await {
                    Ok(()) => End::Ended,
                    Err(_) => End::Quiet,
                }));
            }
            SttUpdate::Done(SttOutcome::Failed(e)) => {
                if !*started {
                    self.stt.metrics().refused(e.code);
                }
                return Ok(Some(End::Error(e)));
            }
        };
        self.send_json(&msg).await.map(|()| None)
    }

    async fn send_json(&mut self, msg: &SttServerMessage) -> Result<(), SendFailed> {
        socket::send_json(&mut self.socket, msg, self.state.config.write_timeout).await
    }
}
