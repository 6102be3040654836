//! `/api/asr-streaming`: moshi-server's ASR WebSocket over the same stage as `/v1/stt`. A
//! connection is a stream at once (no `start`): `Ready` once admitted, then `Word`, `EndWord`,
//! `Step` (models with VAD heads) and `Marker` as the audio is stepped. Keys are the gate's
//! (`kyutai-api-key` header or `auth_id` query, as moshi-server takes them).

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::asr_wire::{decode_in, encode_out, AsrIn, AsrOut};
use super::engine::SttEngine;
use super::job::{SttEvent, SttInput, SttJob, SttOutcome, SttUpdate};
use super::ws::{audio_error, not_enabled, Feed};
use crate::encode::wire::{AudioIn, Framer};
use crate::gate::ws::LimitedUpgrade;
use crate::protocol::close_code;
use crate::server::AppState;
use crate::stage::conn::{read_failed, End};
use crate::stage::error::{StageError, StageErrorCode};
use crate::stage::socket::{self, SendFailed};
use crate::ws::stopping;

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
        AsrConn { socket, stt, state }.run().await;
    })
}

struct AsrConn {
    socket: WebSocket,
    stt: Arc<SttEngine>,
    state: AppState,
}

/// An error as this protocol carries it: one `message`, its code first.
fn error_text(e: &StageError) -> String {
    let code = e.code.as_str();
    if e.message.starts_with(code) {
        e.message.clone()
    } else {
        format!("{code}: {}", e.message)
    }
}

impl AsrConn {
    async fn run(mut self) {
        let end = match self.open() {
            Ok(job) => self.stream(job).await,
            Err(e) => {
                self.stt.metrics().refused(e.code);
                End::Error(e)
            }
        };
        self.finish(end).await;
    }

    fn open(&self) -> Result<(SttJob, Feed), StageError> {
        if *self.state.shutdown.borrow() {
            return Err(StageError::new(
                StageErrorCode::Draining,
                "the server is shutting down and starts no new streams",
            ));
        }
        let max = self.stt.config().max_frames_per_message;
        let framer = Framer::new(AudioIn::F32, max).map_err(audio_error)?;
        Ok((self.stt.submit()?, Feed::new(framer)))
    }

    async fn stream(&mut self, (job, mut feed): (SttJob, Feed)) -> End {
        let SttJob { mut job, input } = job;
        let mut started = false;
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                update = job.next() => {
                    match self.forward(update, &mut started).await {
                        Ok(None) => {}
                        Ok(Some(end)) => return end,
                        Err(SendFailed::Closed) => return End::Quiet,
                        Err(SendFailed::TimedOut) => {
                            job.cut_off_slow();
                            input.wake();
                            return End::Quiet;
                        }
                    }
                }
                permit = input.reserve(), if !feed.held.is_empty() => {
                    match (permit, feed.held.pop_front()) {
                        (Ok(p), Some(i)) => p.send(i),
                        _ => feed.held.clear(),
                    }
                }
                msg = self.socket.recv(), if feed.reading() => {
                    if let Some(end) = self.handle(msg, &mut feed) {
                        return end;
                    }
                }
                _ = stopping(&mut shutdown) => {
                    return End::Error(StageError::new(
                        StageErrorCode::Draining,
                        "the server is shutting down",
                    ));
                }
            }
        }
    }

    /// One client message; `Some` ends the connection (and the stream).
    fn handle(
        &mut self,
        msg: Option<Result<Message, axum::Error>>,
        feed: &mut Feed,
    ) -> Option<End> {
        let bytes = match msg {
            Some(Err(e)) => return Some(read_failed(&self.state, &e)),
            None | Some(Ok(Message::Close(_))) => return Some(End::Quiet),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => return None,
            Some(Ok(Message::Text(_))) => {
                return Some(End::Error(StageError::bad_request(
                    "text messages are not part of this protocol: send MessagePack maps in binary messages",
                )))
            }
            Some(Ok(Message::Binary(b))) => b,
        };
        match decode_in(&bytes) {
            Ok(AsrIn::Audio { pcm }) => match feed.framer.push_samples(&pcm) {
                Ok(()) => feed.hold_frames(),
                Err(e) => return Some(End::Error(audio_error(e))),
            },
            Ok(AsrIn::Marker { id }) => feed.held.push_back(SttInput::Marker(id)),
            Ok(AsrIn::Init) => {}
            Ok(AsrIn::OggOpus { .. }) => {
                return Some(End::Error(StageError::bad_request(
                    "OggOpus is not served on this endpoint: send Audio {pcm} (24 kHz floats), or Opus packets on /v1/stt",
                )))
            }
            Err(e) => {
                return Some(End::Error(StageError::new(
                    StageErrorCode::UnknownMessage,
                    e,
                )))
            }
        }
        None
    }

    /// Sends one update to the client; `Some` ends the connection.
    async fn forward(
        &mut self,
        update: SttUpdate,
        started: &mut bool,
    ) -> Result<Option<End>, SendFailed> {
        let msg = match update {
            SttUpdate::Event(SttEvent::Started(_)) => {
                *started = true;
                AsrOut::Ready
            }
            SttUpdate::Event(SttEvent::Step {
                position,
                vad: Some(prs),
                buffered_samples,
                ..
            }) => AsrOut::Step {
                step_idx: position,
                prs,
                buffered_pcm: buffered_samples,
            },
            SttUpdate::Event(SttEvent::Word {
                tokens,
                start,
                decided,
            }) => {
                let text = match self.stt.tokenizer().decode(&tokens) {
                    Ok(t) => t,
                    Err(e) => {
                        let e = StageError::internal(format!("spelling a word: {e}"));
                        return Ok(Some(End::Error(e)));
                    }
                };
                let msg = AsrOut::Word {
                    text,
                    start_time: f64::from(start),
                };
                self.send(&msg).await?;
                let latency = decided.map(|t| t.elapsed().as_secs_f64());
                self.stt.metrics().word_sent(latency);
                return Ok(None);
            }
            SttUpdate::Event(SttEvent::EndWord { stop }) => AsrOut::EndWord {
                stop_time: f64::from(stop),
            },
            SttUpdate::Event(SttEvent::Marker { id }) => AsrOut::Marker { id },
            // Not in this protocol: steps of models without heads, turn ends (clients read
            // `prs`), flushes and resets (never asked for here).
            SttUpdate::Event(
                SttEvent::Step { vad: None, .. }
                | SttEvent::EndOfTurn { .. }
                | SttEvent::Flushed { .. }
                | SttEvent::ResetDone,
            ) => return Ok(None),
            SttUpdate::Done(SttOutcome::Ended { .. }) => return Ok(Some(End::Ended)),
            SttUpdate::Done(SttOutcome::Failed(e)) => {
                if !*started {
                    self.stt.metrics().refused(e.code);
                }
                return Ok(Some(End::Error(e)));
            }
        };
        self.send(&msg).await.map(|()| None)
    }

    async fn send(&mut self, msg: &AsrOut) -> Result<(), SendFailed> {
        let bytes = encode_out(msg);
        let timeout = self.state.config.write_timeout;
        socket::send(&mut self.socket, Message::Binary(bytes.into()), timeout).await
    }

    /// An error is sent as `Error{message}`, then the close code of its error code.
    async fn finish(&mut self, end: End) {
        let timeout = self.state.config.write_timeout;
        match end {
            End::Quiet => {}
            End::Ended => {
                socket::close(
                    &mut self.socket,
                    close_code::NORMAL,
                    "stream ended",
                    timeout,
                )
                .await
            }
            End::Error(e) => {
                let msg = AsrOut::Error {
                    message: error_text(&e),
                };
                if self.send(&msg).await.is_ok() {
                    socket::close(
                        &mut self.socket,
                        e.code.close_code(),
                        e.code.as_str(),
                        timeout,
                    )
                    .await;
                }
            }
        }
    }
}
