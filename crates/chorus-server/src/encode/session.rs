//! An encode stream on `/v1/stream` (`"input": "pcm"`): audio in, cut into frames, codes out.

use std::sync::atomic::Ordering;

use axum::extract::ws::Message;
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};

use super::engine::{EncodeError, EncodeEvent};
use super::metrics::error_code;
use super::pool::PooledStream;
use super::wire::{codes_message, AudioIn, Framer};
use crate::protocol::{
    parse_client_message, ClientMessage, ErrorCode, InputKind, PcmFormat, ProtocolError,
    ServerMessage, PROTOCOL_VERSION,
};
use crate::ws::{protocol_error, stopping, Conn, Counted, End};

/// An open encode stream as the connection sees it.
pub(crate) struct EncodeSession {
    stream: PooledStream,
    framer: Framer,
    /// Whole frames cut from the last message, handed to the engine.
    frames: Vec<f32>,
    closing: bool,
    draining: bool,
}

/// The protocol code of an engine error.
fn code_of(e: &EncodeError) -> ErrorCode {
    match error_code(e) {
        "busy" => ErrorCode::Busy,
        "draining" => ErrorCode::Draining,
        "queue_full" => ErrorCode::QueueFull,
        "slow_consumer" => ErrorCode::SlowConsumer,
        "encode_failed" => ErrorCode::EncodeFailed,
        _ => ErrorCode::Internal,
    }
}

fn engine_error(e: EncodeError) -> End {
    End::Error(ProtocolError::new(code_of(&e), e.to_string()), Counted::No)
}

impl Conn {
    pub(crate) async fn open_encode(
        &mut self,
        n_q: Option<usize>,
        pcm: PcmFormat,
        latents: bool,
    ) -> Result<EncodeSession, End> {
        let Some(engine) = self.state.encode.clone() else {
            return Err(protocol_error(
                ErrorCode::NotEnabled,
                "this server does not encode (started with --encode-streams 0, or its checkpoint has no encoder)",
            ));
        };
        let info = engine.info().clone();
        let n_q = match n_q {
            Some(q) if (1..=info.max_codebooks).contains(&q) => q,
            Some(q) => {
                return Err(protocol_error(
                    ErrorCode::BadOpen,
                    format!("n_q {q} is outside 1..={}", info.max_codebooks),
                ))
            }
            None => {
                return Err(protocol_error(
                    ErrorCode::BadOpen,
                    "an encode stream needs `n_q`",
                ))
            }
        };
        let format = match pcm {
            PcmFormat::S16 => AudioIn::S16,
            PcmFormat::F32 => AudioIn::F32,
            PcmFormat::Opus => AudioIn::Opus,
        };
        let max_frames = engine.config().max_pending_frames;
        let framer = Framer::new(format, max_frames).map_err(|e| End::Error(e, Counted::No))?;
        let stream = engine.open(n_q, latents).map_err(engine_error)?;
        let opened = ServerMessage::Opened {
            version: PROTOCOL_VERSION,
            stream_id: stream.id(),
            input: InputKind::Pcm,
            n_q: Some(n_q),
            pcm,
            sample_rate: SAMPLE_RATE,
            frame_samples: FRAME_SAMPLES,
            codebook_size: info.codebook_size,
            latent_dim: info.latent_dim,
            max_pending_frames: max_frames,
            max_frames_per_message: max_frames,
            latents,
            opus_bitrate: None,
        };
        if !self.send_json(&opened).await {
            return Err(End::Quiet);
        }
        Ok(EncodeSession {
            stream,
            framer,
            frames: Vec::with_capacity(max_frames * FRAME_SAMPLES),
            closing: false,
            draining: false,
        })
    }

    pub(crate) async fn serve_encode(&mut self, s: &mut EncodeSession) -> End {
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                ev = s.stream.recv() => {
                    if let Some(end) = self.forward_codes(s, ev).await {
                        return end;
                    }
                }
                msg = self.socket.recv(), if !s.closing => {
                    if let Err(end) = self.handle_audio(s, msg) {
                        return end;
                    }
                }
                _ = stopping(&mut shutdown), if !s.draining => {
                    s.draining = true;
                    if !s.closing {
                        s.closing = true;
                        // Audio received so far is encoded and delivered; then close 1001.
                        if let Err(end) = end_of_audio(s) {
                            return end;
                        }
                    }
                }
            }
        }
    }

    async fn forward_codes(&mut self, s: &mut EncodeSession, ev: EncodeEvent) -> Option<End> {
        let metrics = self.state.encode.as_ref().map(|e| e.metrics().clone());
        match ev {
            EncodeEvent::Codes {
                index,
                codes,
                latent,
            } => {
                let bytes = codes_message(index, &codes, latent.as_deref());
                if let Some(m) = &metrics {
                    m.wire_bytes_out
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                let send = self.socket.send(Message::Binary(bytes.into()));
                match tokio::time::timeout(self.state.config.write_timeout, send).await {
                    Ok(Ok(())) => None,
                    Ok(Err(_)) => Some(End::Quiet),
                    Err(_) => {
                        if let Some(m) = &metrics {
                            m.count(ErrorCode::SlowConsumer.as_str());
                        }
                        Some(End::Quiet)
                    }
                }
            }
            EncodeEvent::ResetDone { next_frame } => {
                if self
                    .send_json(&ServerMessage::ResetDone { next_frame })
                    .await
                {
                    None
                } else {
                    Some(End::Quiet)
                }
            }
            EncodeEvent::Finished { frames } => Some(self.closed(frames, s.draining).await),
            EncodeEvent::Failed(e) => Some(End::Error(
                ProtocolError::new(code_of(&e), e.to_string()),
                Counted::Yes,
            )),
        }
    }

    /// Handles one client message on an open encode stream.
    fn handle_audio(
        &mut self,
        s: &mut EncodeSession,
        msg: Option<Result<Message, axum::Error>>,
    ) -> Result<(), End> {
        let submitted = match msg {
            Some(Err(e)) => return Err(self.read_failed(&e)),
            // A disconnect: dropping the stream frees the slot.
            None | Some(Ok(Message::Close(_))) => return Err(End::Quiet),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Ok(()),
            Some(Ok(Message::Binary(bytes))) => {
                if let Some(e) = &self.state.encode {
                    e.metrics()
                        .wire_bytes_in
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                s.framer
                    .push(&bytes)
                    .map_err(|e| End::Error(e, Counted::No))?;
                s.framer.take_frames(&mut s.frames);
                if s.frames.is_empty() {
                    Ok(())
                } else {
                    s.stream.submit(&s.frames)
                }
            }
            Some(Ok(Message::Text(text))) => match parse_client_message(&text) {
                Ok(ClientMessage::Reset) => flush_tail(s).and_then(|()| s.stream.reset()),
                Ok(ClientMessage::Close) => {
                    s.closing = true;
                    return end_of_audio(s);
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
            Ok(()) | Err(EncodeError::Finished) => Ok(()),
            Err(e) => Err(engine_error(e)),
        }
    }
}

/// Submits the last partial frame, padded with silence.
fn flush_tail(s: &mut EncodeSession) -> Result<(), EncodeError> {
    s.framer.take_padded_tail(&mut s.frames);
    if s.frames.is_empty() {
        return Ok(());
    }
    s.stream.submit_tail(&s.frames)
}

/// `close` or a drain: the partial frame is encoded, then the stream finishes.
fn end_of_audio(s: &mut EncodeSession) -> Result<(), End> {
    match flush_tail(s).and_then(|()| s.stream.finish()) {
        Ok(()) | Err(EncodeError::Finished) => Ok(()),
        Err(e) => Err(engine_error(e)),
    }
}
