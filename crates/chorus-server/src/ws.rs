//! One WebSocket connection: the open handshake, then frames in and PCM out until the end.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::extract::State;
use axum::response::Response;
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};
use chorus_engine::{Stream, StreamError, StreamEvent, StreamInput};
use tokio::sync::watch;

use crate::gate::ws::LimitedUpgrade;
use crate::protocol::{
    close_code, encode_pcm, parse_client_message, parse_codes, parse_latents, ClientMessage,
    ErrorCode, InputKind, PcmFormat, ProtocolError, ServerMessage, PROTOCOL_VERSION,
};
use crate::server::AppState;

/// How long a closing connection waits for the client's close reply, so that the client reads
/// the error before the socket goes (closing with unread input would reset the connection).
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Bytes a connection reads from its socket at once. tungstenite zeroes this much of its input
/// buffer before every read, even one that finds nothing (tungstenite `FrameCodec::read_in`): its
/// 128 KiB default made that zeroing the server's largest cost. Client messages are small (a
/// frame of codes, or one frame of audio at most 7,684 bytes), and a larger one takes a few reads.
pub const WS_READ_BUFFER_BYTES: usize = 8 << 10;

pub(crate) async fn upgrade(
    LimitedUpgrade(ws): LimitedUpgrade,
    State(state): State<AppState>,
) -> Response {
    ws.read_buffer_size(WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| async move {
            let _guard = state.connections.enter();
            Conn { socket, state }.run().await;
        })
}

/// An open stream as the connection sees it.
pub(crate) enum Opened {
    Decode(Session),
    Encode(crate::encode::session::EncodeSession),
}

/// Default Opus bitrate of decode streams with `pcm: "opus"` (bits per second).
pub const DEFAULT_OPUS_BITRATE: u32 = 32_000;

/// A decode stream as the connection sees it.
pub(crate) struct Session {
    stream: Stream,
    pcm: PcmFormat,
    /// The stream's Opus encoder and its packet buffer, with `pcm: "opus"`.
    opus: Option<(chorus_audio::OpusFrameEncoder, Vec<u8>)>,
    /// The client sent `close` or the server is draining: read no more input.
    closing: bool,
    draining: bool,
    codes: Vec<u32>,
    latents: Vec<f32>,
}

pub(crate) struct Conn {
    pub(crate) socket: WebSocket,
    pub(crate) state: AppState,
}

/// Why the connection ends.
pub(crate) enum End {
    /// The peer is gone or has been told; just drop the socket.
    Quiet,
    /// Send this error, then close.
    Error(ProtocolError, Counted),
}

/// Whether an error was already counted in the metrics (the engine counts its own).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Yes,
    No,
}

impl Conn {
    async fn run(mut self) {
        let end = match self.await_open().await {
            Ok(Opened::Decode(mut session)) => self.serve(&mut session).await,
            Ok(Opened::Encode(mut session)) => self.serve_encode(&mut session).await,
            Err(end) => end,
        };
        if let End::Error(err, counted) = end {
            if counted == Counted::No {
                self.state.engine.metrics().errors.inc(err.code.as_str());
            }
            let msg = ServerMessage::Error {
                code: err.code,
                message: err.message,
            };
            if self.send_json(&msg).await {
                self.close(err.code.close_code(), err.code.as_str()).await;
            }
        }
    }

    async fn await_open(&mut self) -> Result<Opened, End> {
        let deadline = tokio::time::sleep(self.state.config.open_timeout);
        tokio::pin!(deadline);
        let mut shutdown = self.state.shutdown.clone();
        loop {
            let msg = tokio::select! {
                _ = &mut deadline => {
                    return Err(protocol_error(ErrorCode::OpenTimeout, "no `open` message in time"));
                }
                _ = stopping(&mut shutdown) => {
                    return Err(protocol_error(ErrorCode::Draining, "the server is shutting down"));
                }
                msg = self.socket.recv() => msg,
            };
            match msg {
                Some(Err(e)) => return Err(self.read_failed(&e)),
                None | Some(Ok(Message::Close(_))) => return Err(End::Quiet),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Binary(_))) => {
                    return Err(protocol_error(
                        ErrorCode::NotOpen,
                        "binary frame before the stream was opened",
                    ))
                }
                Some(Ok(Message::Text(text))) => match parse_client_message(&text) {
                    Ok(ClientMessage::Open {
                        version,
                        input,
                        n_q,
                        pcm,
                        latents,
                        opus_bitrate,
                    }) => {
                        if version != PROTOCOL_VERSION {
                            return Err(protocol_error(
                                ErrorCode::UnsupportedVersion,
                                format!("protocol version {version} is not supported (this server speaks {PROTOCOL_VERSION})"),
                            ));
                        }
                        if input == InputKind::Pcm {
                            if opus_bitrate.is_some() {
                                return Err(protocol_error(
                                    ErrorCode::BadOpen,
                                    "`opus_bitrate` is for decode streams sending Opus",
                                ));
                            }
                            return self
                                .open_encode(n_q, pcm, latents)
                                .await
                                .map(Opened::Encode);
                        }
                        if latents {
                            return Err(protocol_error(
                                ErrorCode::BadOpen,
                                "`latents` is for encode streams (`input: \"pcm\"`)",
                            ));
                        }
                        let opus = opus_encoder(pcm, opus_bitrate)?;
                        return self.open(input, n_q, pcm, opus).await.map(Opened::Decode);
                    }
                    Ok(other) => {
                        return Err(protocol_error(
                            ErrorCode::NotOpen,
                            format!("`{}` before the stream was opened", message_name(&other)),
                        ))
                    }
                    Err(e) => return Err(End::Error(e, Counted::No)),
                },
            }
        }
    }

    async fn open(
        &mut self,
        input: InputKind,
        n_q: Option<usize>,
        pcm: PcmFormat,
        opus: Option<(chorus_audio::OpusFrameEncoder, Vec<u8>)>,
    ) -> Result<Session, End> {
        let engine = &self.state.engine;
        let info = engine.info();
        let stream_input = match (input, n_q) {
            (InputKind::Codes, Some(n_q)) => StreamInput::Codes { n_q },
            (InputKind::Codes, None) => {
                return Err(protocol_error(
                    ErrorCode::BadOpen,
                    "a codes stream needs `n_q`",
                ))
            }
            (InputKind::Latents, None) => StreamInput::Latents,
            (InputKind::Latents, Some(_)) => {
                return Err(protocol_error(
                    ErrorCode::BadOpen,
                    "a latents stream takes no `n_q`",
                ))
            }
            (InputKind::Pcm, _) => {
                return Err(protocol_error(ErrorCode::Internal, "an encode stream here"))
            }
        };
        let stream = engine.open(stream_input).map_err(|e| {
            let code = ErrorCode::from_stream_error(&e);
            End::Error(ProtocolError::new(code, e.to_string()), Counted::No)
        })?;
        let opened = ServerMessage::Opened {
            version: PROTOCOL_VERSION,
            stream_id: stream.id(),
            input,
            n_q,
            pcm,
            sample_rate: SAMPLE_RATE,
            frame_samples: FRAME_SAMPLES,
            codebook_size: info.codebook_size,
            latent_dim: info.latent_dim,
            max_pending_frames: engine.config().max_pending_frames,
            max_frames_per_message: engine.config().max_pending_frames,
            latents: false,
            opus_bitrate: opus.as_ref().map(|(e, _)| e.bitrate_bps()),
        };
        if !self.send_json(&opened).await {
            return Err(End::Quiet);
        }
        Ok(Session {
            stream,
            pcm,
            opus,
            closing: false,
            draining: false,
            codes: Vec::new(),
            latents: Vec::new(),
        })
    }

    async fn serve(&mut self, s: &mut Session) -> End {
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                ev = s.stream.recv() => {
                    if let Some(end) = self.forward(s, ev).await {
                        return end;
                    }
                }
                msg = self.socket.recv(), if !s.closing => {
                    if let Err(end) = self.handle_input(s, msg) {
                        return end;
                    }
                }
                _ = stopping(&mut shutdown), if !s.draining => {
                    s.draining = true;
                    if !s.closing {
                        s.closing = true;
                        // Frames received so far are decoded and delivered; then close 1001.
                        if s.stream.finish().is_err() {
                            return End::Quiet;
                        }
                    }
                }
            }
        }
    }

    /// Sends one engine event to the client; `Some` ends the connection.
    async fn forward(&mut self, s: &mut Session, ev: StreamEvent) -> Option<End> {
        match ev {
            StreamEvent::Pcm { index, samples } => {
                let bytes = match s.opus.as_mut() {
                    None => encode_pcm(index, &samples, s.pcm),
                    Some((enc, packet)) => match opus_message(enc, packet, index, &samples) {
                        Ok(b) => b,
                        Err(e) => return Some(End::Error(e, Counted::No)),
                    },
                };
                // The frame shares its step's pooled block: let it go before a send that may wait.
                drop(samples);
                let send = self.socket.send(Message::Binary(bytes.into()));
                match tokio::time::timeout(self.state.config.write_timeout, send).await {
                    Ok(Ok(())) => None,
                    Ok(Err(_)) => Some(End::Quiet),
                    Err(_) => {
                        // The client has stopped reading and its socket is full: cut it off
                        // (counted here unless the engine already cut it off and counted it).
                        if !s.stream.is_failed() {
                            self.state
                                .engine
                                .metrics()
                                .errors
                                .inc(ErrorCode::SlowConsumer.as_str());
                        }
                        Some(End::Quiet)
                    }
                }
            }
            StreamEvent::ResetDone { next_frame } => {
                if self
                    .send_json(&ServerMessage::ResetDone { next_frame })
                    .await
                {
                    None
                } else {
                    Some(End::Quiet)
                }
            }
            StreamEvent::Finished { frames } => Some(self.closed(frames, s.draining).await),
            StreamEvent::Failed(e) => {
                let code = ErrorCode::from_stream_error(&e);
                Some(End::Error(
                    ProtocolError::new(code, e.to_string()),
                    Counted::Yes,
                ))
            }
        }
    }

    /// Handles one client message on an open stream.
    fn handle_input(
        &mut self,
        s: &mut Session,
        msg: Option<Result<Message, axum::Error>>,
    ) -> Result<(), End> {
        let info = self.state.engine.info();
        let max_frames = self.state.engine.config().max_pending_frames;
        let submitted = match msg {
            Some(Err(e)) => return Err(self.read_failed(&e)),
            // A disconnect: dropping the stream frees the slot.
            None | Some(Ok(Message::Close(_))) => return Err(End::Quiet),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Ok(()),
            Some(Ok(Message::Binary(bytes))) => match s.stream.input() {
                StreamInput::Codes { n_q } => {
                    parse_codes(&bytes, n_q, info.codebook_size, max_frames, &mut s.codes)
                        .map_err(|e| End::Error(e, Counted::No))?;
                    s.stream.submit_codes(&s.codes)
                }
                StreamInput::Latents => {
                    parse_latents(&bytes, info.latent_dim, max_frames, &mut s.latents)
                        .map_err(|e| End::Error(e, Counted::No))?;
                    s.stream.submit_latents(&s.latents)
                }
            },
            Some(Ok(Message::Text(text))) => match parse_client_message(&text) {
                Ok(ClientMessage::Reset) => s.stream.reset(),
                Ok(ClientMessage::Close) => {
                    s.closing = true;
                    s.stream.finish()
                }
                Ok(ClientMessage::Open { .. }) => {
                    return Err(protocol_error(
                        ErrorCode::AlreadyOpen,
                        "the stream is already open",
                    ))
                }
                Err(e) => return Err(End::Error(e, Counted::No)),
            },
        };
        match submitted {
            Ok(()) => Ok(()),
            // The engine ended the stream; its event says why and arrives next.
            Err(StreamError::Finished) => Ok(()),
            Err(e) => {
                let code = match e {
                    StreamError::InvalidFrame(_) => ErrorCode::BadFrameSize,
                    ref other => ErrorCode::from_stream_error(other),
                };
                Err(End::Error(
                    ProtocolError::new(code, e.to_string()),
                    Counted::No,
                ))
            }
        }
    }

    /// A failed read: a message over the limit is named to the client (close 1009, counted by
    /// the gate); anything else means the peer is gone.
    pub(crate) fn read_failed(&self, e: &axum::Error) -> End {
        match crate::gate::ws::too_big(&self.state, e) {
            Some(message) => End::Error(
                ProtocolError::new(ErrorCode::MessageTooBig, message),
                Counted::Yes,
            ),
            None => End::Quiet,
        }
    }

    /// A stream's end after its last frame: `closed`, then 1000 (or 1001 during a drain).
    pub(crate) async fn closed(&mut self, frames: u64, draining: bool) -> End {
        if self.send_json(&ServerMessage::Closed { frames }).await {
            let (code, reason) = if draining {
                (close_code::GOING_AWAY, "server shutting down")
            } else {
                (close_code::NORMAL, "stream closed")
            };
            self.close(code, reason).await;
        }
        End::Quiet
    }

    pub(crate) async fn send_json(&mut self, msg: &ServerMessage) -> bool {
        let text = match serde_json::to_string(msg) {
            Ok(t) => t,
            Err(_) => return false,
        };
        let send = self.socket.send(Message::Text(text.into()));
        matches!(
            tokio::time::timeout(self.state.config.write_timeout, send).await,
            Ok(Ok(()))
        )
    }

    /// Sends a close frame, then waits briefly for the client's close reply.
    pub(crate) async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let send = self.socket.send(Message::Close(Some(frame)));
        if !matches!(
            tokio::time::timeout(self.state.config.write_timeout, send).await,
            Ok(Ok(()))
        ) {
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

/// The Opus encoder of a decode stream that asked for Opus, after checking the bitrate.
fn opus_encoder(
    pcm: PcmFormat,
    bitrate: Option<u32>,
) -> Result<Option<(chorus_audio::OpusFrameEncoder, Vec<u8>)>, End> {
    match (pcm, bitrate) {
        (PcmFormat::Opus, b) => {
            let bitrate = b.unwrap_or(DEFAULT_OPUS_BITRATE);
            let enc = chorus_audio::OpusFrameEncoder::new(bitrate)
                .map_err(|e| protocol_error(ErrorCode::BadOpen, format!("opus_bitrate: {e}")))?;
            Ok(Some((
                enc,
                Vec::with_capacity(chorus_audio::OPUS_MAX_PACKET_BYTES),
            )))
        }
        (_, Some(_)) => Err(protocol_error(
            ErrorCode::BadOpen,
            "`opus_bitrate` needs `pcm: \"opus\"`",
        )),
        (_, None) => Ok(None),
    }
}

/// One frame as an Opus message: the u32 frame index, then one 80 ms packet.
pub(crate) fn opus_message(
    enc: &mut chorus_audio::OpusFrameEncoder,
    packet: &mut Vec<u8>,
    index: u64,
    samples: &[f32],
) -> Result<Vec<u8>, ProtocolError> {
    packet.clear();
    enc.encode(samples, packet)
        .map_err(|e| ProtocolError::new(ErrorCode::Internal, format!("opus encoder: {e}")))?;
    let mut out = Vec::with_capacity(crate::protocol::PCM_HEADER_BYTES + packet.len());
    // Indices wrap after 2^32 frames, as in PCM messages.
    out.extend_from_slice(&(index as u32).to_le_bytes());
    out.extend_from_slice(packet);
    Ok(out)
}

/// Resolves once the server starts draining.
pub(crate) async fn stopping(rx: &mut watch::Receiver<bool>) {
    loop {
        let stop = *rx.borrow_and_update();
        if stop {
            return;
        }
        if rx.changed().await.is_err() {
            // The server is gone without draining: nothing will ever signal.
            std::future::pending::<()>().await;
        }
    }
}

pub(crate) fn protocol_error(code: ErrorCode, message: impl Into<String>) -> End {
    End::Error(ProtocolError::new(code, message), Counted::No)
}

fn message_name(m: &ClientMessage) -> &'static str {
    match m {
        ClientMessage::Open { .. } => "open",
        ClientMessage::Reset => "reset",
        ClientMessage::Close => "close",
    }
}
