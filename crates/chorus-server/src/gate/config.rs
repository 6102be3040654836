//! The limits on what one client can hold, with the defaults `docs/DEPLOY.md` explains.

use std::time::Duration;

/// Connections the server holds besides its stream slots (HTTP requests, health checks, scrapes,
/// clients that will be refused `busy`).
pub const CONNECTION_HEADROOM: usize = 1024;
/// Default connections one client address may hold: far above what a person or a small backend
/// needs, and a sixteenth of the 16,384 real-time streams one H200 serves.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;
/// Default time a client has to send a request's headers; also how long an idle keep-alive
/// connection stays open.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a request body has to arrive: 8 MiB at about 1 Mbit/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default largest `/v1/decode` body: 8 MiB of int64 codes is 2.9 hours of 8-codebook audio (43
/// minutes of 32), whose f32 answer is about 1 GB.
pub const DEFAULT_MAX_DECODE_BODY: usize = 8 << 20;
/// Default largest `/v1/encode` body: 23 minutes of 24 kHz mono 16-bit WAV, 11 of 48 kHz stereo,
/// or the whole 30 minutes one request may hold in any compressed format.
pub const DEFAULT_MAX_ENCODE_BODY: usize = 64 << 20;
/// Default largest `/v1/music` body: a `start` request of 2,048-token prompt rows is about 30 KB.
pub const DEFAULT_MAX_MUSIC_BODY: usize = 1 << 20;
/// Default largest `/v1/tts` body: text and a minute of 32-codebook context codes (750 frames)
/// take about 150 KB.
pub const DEFAULT_MAX_TTS_BODY: usize = 1 << 20;
/// Default largest WebSocket message: four times the largest a client sends at the default
/// `--max-pending-frames` (32 frames of f32 audio on an encode stream, 246 KB).
pub const DEFAULT_MAX_WS_MESSAGE: usize = 1 << 20;
/// Default requests with a body served at once: with the body sizes above, their bodies and
/// answers stay within about 24 GB of host memory.
pub const DEFAULT_MAX_UPLOADS: usize = 16;

/// What one client, and all of them together, may hold. A limit of 0 turns that limit off
/// (except the body and message sizes, where 0 admits no body or message at all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open TCP connections, all clients together (0: no limit).
    pub max_connections: usize,
    /// Open TCP connections from one client address (0: no limit).
    pub max_connections_per_client: usize,
    /// Time to send a request's headers.
    pub header_timeout: Duration,
    /// Time for a request's whole body to arrive.
    pub body_timeout: Duration,
    pub max_decode_body: usize,
    pub max_encode_body: usize,
    pub max_music_body: usize,
    pub max_tts_body: usize,
    /// Largest WebSocket message (and frame) a client may send.
    pub max_ws_message: usize,
    /// Requests with a body served at once (0: no limit).
    pub max_uploads: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 0,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_decode_body: DEFAULT_MAX_DECODE_BODY,
            max_encode_body: DEFAULT_MAX_ENCODE_BODY,
            max_music_body: DEFAULT_MAX_MUSIC_BODY,
            max_tts_body: DEFAULT_MAX_TTS_BODY,
            max_ws_message: DEFAULT_MAX_WS_MESSAGE,
            max_uploads: DEFAULT_MAX_UPLOADS,
        }
    }
}

impl Limits {
    /// The default server-wide connection limit of a server with `slots` stream slots in all
    /// (decode, encode, music and speech): every slot, plus headroom.
    pub fn default_max_connections(slots: usize) -> usize {
        slots + CONNECTION_HEADROOM
    }
}
