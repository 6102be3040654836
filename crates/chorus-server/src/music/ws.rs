//! One `/v1/music` WebSocket: `start`, then the song's frames (and hiddens) until `end`.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chorus_music::song::LEVELS;

use super::engine::MusicEngine;
use super::http::not_enabled;
use super::job::{JobUpdate, MusicEvent, MusicJob, Outcome};
use super::protocol::{parse_music_message, MusicServerMessage};
use super::start::StartRequest;
use crate::gate::ws::LimitedUpgrade;
use crate::server::AppState;
use crate::stage::conn::{await_start, draining, finish, handle_input, End};
use crate::stage::socket::{self, SendFailed};

/// What a music connection's errors call its jobs.
const SONGS: &str = "songs";

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

struct MusicConn {
    socket: WebSocket,
    music: Arc<MusicEngine>,
    state: AppState,
}

impl MusicConn {
    async fn run(mut self) {
        let started = await_start(&mut self.socket, &self.state, parse_music_message, SONGS).await;
        let end = match started.and_then(|req| self.submit(&req)) {
            Ok(job) => self.stream(job).await,
            Err(end) => {
                if let End::Error(e) = &end {
                    self.music.metrics().refused(e.code);
                }
                end
            }
        };
        finish(&mut self.socket, &self.state, end, "song ended").await;
    }

    fn submit(&self, req: &StartRequest) -> Result<MusicJob, End> {
        if *self.state.shutdown.borrow() {
            return Err(draining(SONGS));
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
                    let cancel = || job.cancel();
                    let names = ("/v1/music", "song");
                    if let Some(end) = handle_input(&self.state, msg, parse_music_message, cancel, names) {
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
        socket::send_json(&mut self.socket, msg, self.state.config.write_timeout).await
    }

    async fn send(&mut self, msg: Message) -> Result<(), SendFailed> {
        socket::send(&mut self.socket, msg, self.state.config.write_timeout).await
    }
}

/// Frame hiddens as little-endian bf16 (round to nearest even, as in the safetensors file).
pub(crate) fn bf16_bytes(hidden: &[f32]) -> Vec<u8> {
    hidden
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}
