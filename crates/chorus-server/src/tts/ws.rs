//! One `/v1/tts` WebSocket: `start`, then the utterance's audio frames as binary messages until
//! `end`; `cancel` at any time.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chorus_audio::OpusFrameEncoder;
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};

use super::engine::TtsEngine;
use super::http::not_enabled;
use super::job::{TtsEvent, TtsJob, TtsOutcome, TtsUpdate};
use super::protocol::TtsServerMessage;
use super::start::{parse_tts_message, TtsStart};
use super::TtsError;
use crate::gate::ws::LimitedUpgrade;
use crate::protocol::{encode_pcm, PcmFormat};
use crate::server::AppState;
use crate::stage::conn::{await_start, draining, finish, handle_input, End};
use crate::stage::socket::{self, SendFailed};
use crate::ws::{opus_message, DEFAULT_OPUS_BITRATE};

/// What a speech connection's errors call its jobs.
const JOBS: &str = "utterances";

pub(crate) async fn upgrade(
    ws: Result<LimitedUpgrade, WebSocketUpgradeRejection>,
    State(state): State<AppState>,
) -> Response {
    let Some(tts) = state.tts.clone() else {
        return not_enabled();
    };
    let ws = match ws {
        Ok(LimitedUpgrade(ws)) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    ws.on_upgrade(move |socket| async move {
        let _guard = state.connections.enter();
        TtsConn { socket, tts, state }.run().await;
    })
}

/// How this connection sends audio.
struct Output {
    format: PcmFormat,
    /// The Opus encoder and its packet buffer, with `format: "opus"`.
    opus: Option<(OpusFrameEncoder, Vec<u8>)>,
}

struct TtsConn {
    socket: WebSocket,
    tts: Arc<TtsEngine>,
    state: AppState,
}

impl TtsConn {
    async fn run(mut self) {
        let started = await_start(&mut self.socket, &self.state, parse_tts_message, JOBS).await;
        let end = match started.and_then(|req| self.submit(&req)) {
            Ok((job, out)) => self.stream(job, out).await,
            Err(end) => {
                if let End::Error(e) = &end {
                    self.tts.metrics().refused(e.code);
                }
                end
            }
        };
        finish(&mut self.socket, &self.state, end, "utterance ended").await;
    }

    fn submit(&self, req: &TtsStart) -> Result<(TtsJob, Output), End> {
        if *self.state.shutdown.borrow() {
            return Err(draining(JOBS));
        }
        let format = req.format.unwrap_or(PcmFormat::S16);
        let opus = match format {
            PcmFormat::Opus => {
                let bitrate = req.opus_bitrate.unwrap_or(DEFAULT_OPUS_BITRATE);
                let enc = OpusFrameEncoder::new(bitrate).map_err(|e| {
                    End::Error(TtsError::bad_request(format!("`opus_bitrate`: {e}")))
                })?;
                Some((enc, Vec::with_capacity(chorus_audio::OPUS_MAX_PACKET_BYTES)))
            }
            PcmFormat::S16 | PcmFormat::F32 => None,
        };
        let spec = self.tts.prepare(req).map_err(End::Error)?;
        let job = self.tts.submit(spec).map_err(End::Error)?;
        Ok((job, Output { format, opus }))
    }

    /// Forwards the utterance's events until it ends; reads `cancel` and notices a disconnect.
    async fn stream(&mut self, mut job: TtsJob, mut out: Output) -> End {
        let mut started = false;
        loop {
            tokio::select! {
                update = job.next() => {
                    if let Some(end) = self.forward(&job, update, &mut out, &mut started).await {
                        return end;
                    }
                }
                msg = self.socket.recv() => {
                    let cancel = || job.cancel();
                    let names = ("/v1/tts", "utterance");
                    if let Some(end) = handle_input(&self.state, msg, parse_tts_message, cancel, names) {
                        return end;
                    }
                }
            }
        }
    }

    /// Sends one update to the client; `Some` ends the connection.
    async fn forward(
        &mut self,
        job: &TtsJob,
        update: TtsUpdate,
        out: &mut Output,
        started: &mut bool,
    ) -> Option<End> {
        let sent = match update {
            TtsUpdate::Event(TtsEvent::Started(s)) => {
                *started = true;
                let msg = TtsServerMessage::Started {
                    utterance: s.utterance,
                    max_frames: s.max_frames,
                    prompt_frames: s.prompt_frames,
                    sample_rate: SAMPLE_RATE,
                    frame_samples: FRAME_SAMPLES,
                    format: out.format,
                };
                self.send_json(&msg).await
            }
            TtsUpdate::Event(TtsEvent::Frame(f)) => {
                let bytes = match out.opus.as_mut() {
                    None => encode_pcm(f.index as u64, &f.pcm, out.format),
                    Some((enc, packet)) => {
                        match opus_message(enc, packet, f.index as u64, &f.pcm) {
                            Ok(b) => b,
                            Err(e) => return Some(End::Error(TtsError::internal(e.message))),
                        }
                    }
                };
                self.send(Message::Binary(bytes.into())).await
            }
            TtsUpdate::Done(TtsOutcome::Ended {
                reason,
                frames,
                first_audio,
            }) => {
                let msg = TtsServerMessage::End {
                    reason,
                    frames,
                    first_audio_ms: first_audio.map(|d| d.as_secs_f64() * 1e3),
                };
                return Some(match self.send_json(&msg).await {
                    Ok(()) => End::Ended,
                    Err(_) => End::Quiet,
                });
            }
            TtsUpdate::Done(TtsOutcome::Failed(e)) => {
                if !*started {
                    self.tts.metrics().refused(e.code);
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

    async fn send_json(&mut self, msg: &TtsServerMessage) -> Result<(), SendFailed> {
        socket::send_json(&mut self.socket, msg, self.state.config.write_timeout).await
    }

    async fn send(&mut self, msg: Message) -> Result<(), SendFailed> {
        socket::send(&mut self.socket, msg, self.state.config.write_timeout).await
    }
}
