//! One `/v1/music` WebSocket: `start`, then the song's frames (and hiddens) until `end`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chorus_music::song::LEVELS;
use tokio::sync::watch;

use super::engine::MusicEngine;
use super::error::{MusicError, MusicErrorCode};
use super::http::not_enabled;
use super::job::{JobUpdate, MusicEvent, MusicJob, Outcome};
use super::protocol::{parse_music_message, MusicClientMessage, MusicServerMessage};
use super::start::StartRequest;
use crate::gate::ws::{too_big, LimitedUpgrade};
use crate::protocol::close_code;
use crate::server::AppState;

/// How long a closing connection waits for the client's close reply, so that the client reads
/// the last message before the socket goes.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

pub(crate) async fn upgrade(
    ws: Result<LimitedUpgrade, WebSocketUpgradeRejection>,
    State(state): State<AppState>,
) -> Response {
    let Some(music) = state.music.clone() else {
        return not_enabled();
    };
    let ws = match ws {
        Ok(LimitedUpgrade(ws)) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    ws.on_upgrade(move |socket| async move {
        let _guard = state.connections.enter();
        MusicConn {
            socket,
            music,
            state,
        }
        .run()
        .await;
    })
}

/// Why the connection ends.
enum End {
    /// The peer is gone; just drop the socket (and with it the job, which cancels the song).
    Quiet,
    /// `end` was sent: close normally.
    Ended,
    /// Send this error, then close.
    Error(MusicError),
}

/// A failed write.
enum SendFailed {
    Closed,
    TimedOut,
}

struct MusicConn {
    socket: WebSocket,
    music: Arc<MusicEngine>,
    state: AppState,
}

impl MusicConn {
    async fn run(mut self) {
        let end = match self.await_start().await {
            Ok(job) => self.stream(job).await,
            Err(end) => {
                if let End::Error(e) = &end {
                    self.music.metrics().refused(e.code);
                }
                end
            }
        };
        match end {
            End::Quiet => {}
            End::Ended => self.close(close_code::NORMAL, "song ended").await,
            End::Error(err) => {
                let code = err.code;
                let msg = MusicServerMessage::Error {
                    code,
                    message: err.message,
                };
                if self.send_json(&msg).await.is_ok() {
                    self.close(code.close_code(), code.as_str()).await;
                }
            }
        }
    }

    /// Waits for `start` and submits its song.
    async fn await_start(&mut self) -> Result<MusicJob, End> {
        let timeout = self.state.config.open_timeout;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut shutdown = self.state.shutdown.clone();
        loop {
            let msg = tokio::select! {
                _ = &mut deadline => return Err(error(
                    MusicErrorCode::StartTimeout,
                    format!("no `start` message within {} s", timeout.as_secs_f64()),
                )),
                _ = stopping(&mut shutdown) => return Err(draining()),
                msg = self.socket.recv() => msg,
            };
            match msg {
                Some(Err(e)) => return Err(read_failed(&self.state, &e)),
                None | Some(Ok(Message::Close(_))) => return Err(End::Quiet),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Binary(_))) => {
                    return Err(error(
                        MusicErrorCode::NotStarted,
                        "binary message before `start` (the client sends JSON text only)",
                    ))
                }
                Some(Ok(Message::Text(text))) => {
                    return match parse_music_message(&text).map_err(End::Error)? {
                        MusicClientMessage::Start(req) => self.submit(&req),
                        MusicClientMessage::Cancel => {
                            Err(error(MusicErrorCode::NotStarted, "`cancel` before `start`"))
                        }
                    }
                }
            }
        }
    }

    fn submit(&self, req: &StartRequest) -> Result<MusicJob, End> {
        if *self.state.shutdown.borrow() {
            return Err(draining());
        }
        let spec = self
            .music
            .prepare(req, req.hiddens.unwrap_or(false))
            .map_err(End::Error)?;
        self.music.submit(spec).map_err(End::Error)
    }

    /// Forwards the song's events until it ends; reads `cancel` and notices a disconnect.
    async fn stream(&mut self, mut job: MusicJob) -> End {
        let mut started = false;
        loop {
            tokio::select! {
                update = job.next() => {
                    if let Some(end) = self.forward(&job, update, &mut started).await {
                        return end;
                    }
                }
                msg = self.socket.recv() => {
                    if let Some(end) = handle_input(&self.state, &job, msg) {
                        return end;
                    }
                }
            }
        }
    }

    /// Sends one update to the client; `Some` ends the connection.
    async fn forward(
        &mut self,
        job: &MusicJob,
        update: JobUpdate,
        started: &mut bool,
    ) -> Option<End> {
        let sent = match update {
            JobUpdate::Event(MusicEvent::Started(s)) => {
                *started = true;
                let msg = MusicServerMessage::Started {
                    song: s.song,
                    max_frames: s.max_frames,
                    prompt_tokens: s.prompt_tokens,
                    levels: LEVELS,
                    hidden_size: self.music.info().hidden_size,
                    hiddens: job.hiddens(),
                };
                self.send_json(&msg).await
            }
            JobUpdate::Event(MusicEvent::Frame(f)) => {
                let msg = MusicServerMessage::Frame {
                    index: f.index,
                    codes: f.codes,
                };
                match (self.send_json(&msg).await, f.hidden) {
                    (Ok(()), Some(h)) => self.send(Message::Binary(bf16_bytes(&h).into())).await,
                    (sent, _) => sent,
                }
            }
            JobUpdate::Done(Outcome::Ended { reason, frames }) => {
                let msg = MusicServerMessage::End {
                    reason: reason.into(),
                    frames,
                };
                return Some(match self.send_json(&msg).await {
                    Ok(()) => End::Ended,
                    Err(_) => End::Quiet,
                });
            }
            JobUpdate::Done(Outcome::Failed(e)) => {
                if !*started {
                    self.music.metrics().refused(e.code);
                }
                return Some(End::Error(e));
            }
        };
        match sent {
            Ok(()) => None,
            Err(SendFailed::Closed) => Some(End::Quiet),
            Err(SendFailed::TimedOut) => {
                // The client stopped reading and its socket is full: cut it off.
                job.cut_off_slow();
                Some(End::Quiet)
            }
        }
    }

    async fn send_json(&mut self, msg: &MusicServerMessage) -> Result<(), SendFailed> {
        let text = serde_json::to_string(msg).map_err(|_| SendFailed::Closed)?;
        self.send(Message::Text(text.into())).await
    }

    async fn send(&mut self, msg: Message) -> Result<(), SendFailed> {
        match tokio::time::timeout(self.state.config.write_timeout, self.socket.send(msg)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(SendFailed::Closed),
            Err(_) => Err(SendFailed::TimedOut),
        }
    }

    /// Sends a close frame, then waits briefly for the client's close reply.
    async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        if self.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_LINGER, async {
            while let Some(Ok(msg)) = self.socket.recv().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}

/// Handles one client message while the song runs; `Some` ends the connection (and the song).
fn handle_input(
    state: &AppState,
    job: &MusicJob,
    msg: Option<Result<Message, axum::Error>>,
) -> Option<End> {
    match msg {
        Some(Err(e)) => Some(read_failed(state, &e)),
        None | Some(Ok(Message::Close(_))) => Some(End::Quiet),
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
        Some(Ok(Message::Binary(_))) => Some(End::Error(MusicError::bad_request(
            "binary messages are not accepted on /v1/music",
        ))),
        Some(Ok(Message::Text(text))) => match parse_music_message(&text) {
            Ok(MusicClientMessage::Cancel) => {
                job.cancel();
                None
            }
            Ok(MusicClientMessage::Start(_)) => Some(error(
                MusicErrorCode::AlreadyStarted,
                "a connection carries one song: `start` was already sent",
            )),
            Err(e) => Some(End::Error(e)),
        },
    }
}

/// A failed read: a message over the limit is named to the client (close 1009); anything else
/// means the peer is gone.
fn read_failed(state: &AppState, e: &axum::Error) -> End {
    match too_big(state, e) {
        Some(message) => error(MusicErrorCode::MessageTooBig, message),
        None => End::Quiet,
    }
}

fn error(code: MusicErrorCode, message: impl Into<String>) -> End {
    End::Error(MusicError::new(code, message))
}

fn draining() -> End {
    error(
        MusicErrorCode::Draining,
        "the server is shutting down and starts no new songs",
    )
}

/// Frame hiddens as little-endian bf16 (round to nearest even, as in the safetensors file).
pub(crate) fn bf16_bytes(hidden: &[f32]) -> Vec<u8> {
    hidden
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}

/// Resolves once the server starts draining.
async fn stopping(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            // The server is gone without draining: nothing will ever signal.
            std::future::pending::<()>().await;
        }
    }
}
