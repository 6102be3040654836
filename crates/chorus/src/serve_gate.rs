//! `chorus serve` flags for API keys and the limits on what clients may hold, and the SIGHUP
//! reload of the key file.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use chorus_server::gate::{
    ApiKeys, Limits, API_KEYS_ENV, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_MAX_UPLOADS,
};
use chorus_server::protocol::PCM_HEADER_BYTES;

/// Bytes of one f32 sample on the wire.
const F32_BYTES: usize = 4;

#[derive(clap::Args, Debug, Clone)]
pub struct GateArgs {
    /// File of API keys, one per line (blank lines and `#` comments skipped), re-read on SIGHUP.
    /// With keys (here or in CHORUS_API_KEYS, comma-separated) every endpoint but /healthz needs
    /// one: `Authorization: Bearer KEY`, a `kyutai-api-key` header or `?api_key=KEY`.
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// Serve /metrics without a key.
    #[arg(long)]
    pub public_metrics: bool,
    /// Open connections, all clients together (default: every stream slot plus 1,024); more
    /// are answered 429 `busy` at once. 0: no limit.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Open connections from one client address; more are answered 429 `busy` at once. Behind
    /// a proxy every client has the proxy's address: limit there and set 0 (no limit) here.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    pub max_connections_per_client: usize,
    /// Seconds a client has to send a request's headers (also how long an idle connection
    /// stays open).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_HEADER_TIMEOUT.as_secs_f64(), value_parser = parse_secs)]
    pub header_timeout: f64,
    /// Seconds a request's body has to arrive; later is answered 408 `timeout`.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_BODY_TIMEOUT.as_secs_f64(), value_parser = parse_secs)]
    pub body_timeout: f64,
    /// Largest POST /v1/decode body (bytes; K, M, G suffixes are powers of 1,024); larger is
    /// answered 413 `too_large` before it is read.
    #[arg(long, value_name = "BYTES", default_value = "8M", value_parser = parse_bytes)]
    pub max_decode_body: usize,
    /// Largest POST /v1/encode body.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_bytes)]
    pub max_encode_body: usize,
    /// Largest POST /v1/music body.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    pub max_music_body: usize,
    /// Largest POST /v1/tts body.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    pub max_tts_body: usize,
    /// Largest WebSocket message a client may send; larger closes the connection with
    /// `message_too_big` (close 1009).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    pub max_ws_message: usize,
    /// POST requests (bodies) served at once; more are answered 429 `busy`. 0: no limit.
    #[arg(long, default_value_t = DEFAULT_MAX_UPLOADS)]
    pub max_uploads: usize,
}

impl GateArgs {
    /// The limits, for a server of `slots` stream slots in all whose streams may send
    /// `max_pending_frames` frames in one message.
    pub fn limits(&self, slots: usize, max_pending_frames: usize) -> Result<Limits> {
        // An encode stream's largest message: that many frames of f32 audio.
        let largest =
            PCM_HEADER_BYTES + max_pending_frames * chorus_core::FRAME_SAMPLES * F32_BYTES;
        if self.max_ws_message < largest {
            bail!(
                "--max-ws-message {} is below the {largest} bytes a client may send in one message at --max-pending-frames {max_pending_frames}: raise --max-ws-message or lower --max-pending-frames",
                self.max_ws_message
            );
        }
        Ok(Limits {
            max_connections: self
                .max_connections
                .unwrap_or_else(|| Limits::default_max_connections(slots)),
            max_connections_per_client: self.max_connections_per_client,
            header_timeout: Duration::from_secs_f64(self.header_timeout),
            body_timeout: Duration::from_secs_f64(self.body_timeout),
            max_decode_body: self.max_decode_body,
            max_encode_body: self.max_encode_body,
            max_music_body: self.max_music_body,
            max_tts_body: self.max_tts_body,
            max_ws_message: self.max_ws_message,
            max_uploads: self.max_uploads,
        })
    }

    /// The keys from `--api-keys` and `CHORUS_API_KEYS`, checked before anything is loaded.
    pub fn keys(&self) -> Result<Option<ApiKeys>> {
        let listed = std::env::var(API_KEYS_ENV).ok();
        ApiKeys::load(self.api_keys.as_deref(), listed.as_deref()).map_err(|e| {
            let fix = match &self.api_keys {
                Some(_) => "give --api-keys a readable file of one key per line",
                None => "set CHORUS_API_KEYS to comma-separated keys, or unset it",
            };
            anyhow::anyhow!("API keys: {e}; fix: {fix}")
        })
    }
}

/// The start-up line about keys.
pub fn describe_keys(keys: Option<&ApiKeys>) -> String {
    match keys {
        None => "no API keys: every client is served (--api-keys FILE or CHORUS_API_KEYS to require one)".into(),
        Some(k) => match k.file() {
            Some(f) => format!(
                "API keys: {} in force (from {}{}); SIGHUP re-reads the file",
                k.len(),
                f.display(),
                if std::env::var(API_KEYS_ENV).is_ok() { format!(" and {API_KEYS_ENV}") } else { String::new() }
            ),
            None => format!("API keys: {} in force (from {API_KEYS_ENV})", k.len()),
        },
    }
}

/// The start-up line about limits.
pub fn describe_limits(l: &Limits) -> String {
    let off = |n: usize| {
        if n == 0 {
            "no limit".to_string()
        } else {
            n.to_string()
        }
    };
    format!(
        "limits: connections {} ({} per client), headers {} s, bodies {} s, decode/encode/music/tts bodies {}/{}/{}/{} bytes, WebSocket messages {} bytes, uploads {}",
        off(l.max_connections),
        off(l.max_connections_per_client),
        l.header_timeout.as_secs_f64(),
        l.body_timeout.as_secs_f64(),
        l.max_decode_body,
        l.max_encode_body,
        l.max_music_body,
        l.max_tts_body,
        l.max_ws_message,
        off(l.max_uploads),
    )
}

/// Re-reads the key file on every SIGHUP; a file that fails to load keeps the keys in force.
#[cfg(unix)]
pub async fn reload_on_sighup(keys: ApiKeys) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        eprintln!("warning: cannot listen for SIGHUP: the key file is read at start only");
        return;
    };
    while hup.recv().await.is_some() {
        match keys.reload() {
            Ok(n) => eprintln!("API keys reloaded: {n} in force"),
            Err(e) => {
                eprintln!("warning: API keys not reloaded, the previous ones stay in force: {e}")
            }
        }
    }
}

#[cfg(not(unix))]
pub async fn reload_on_sighup(_keys: ApiKeys) {}

/// Seconds as clap reads them: positive and finite.
fn parse_secs(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && Duration::try_from_secs_f64(v).is_ok() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

/// Bytes as clap reads them: a count with an optional K, M or G (powers of 1,024).
fn parse_bytes(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| format!("`{s}` is not a byte count (such as 1048576, 512K, 8M or 1G)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_server::gate::{
        DEFAULT_MAX_DECODE_BODY, DEFAULT_MAX_ENCODE_BODY, DEFAULT_MAX_MUSIC_BODY,
        DEFAULT_MAX_TTS_BODY, DEFAULT_MAX_WS_MESSAGE,
    };

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("8m"), Ok(8 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        for bad in ["", "M", "1.5M", "-1", "8MB", "99999999999999999999G"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_defaults_are_the_library_s() {
        assert_eq!(parse_bytes("8M"), Ok(DEFAULT_MAX_DECODE_BODY));
        assert_eq!(parse_bytes("64M"), Ok(DEFAULT_MAX_ENCODE_BODY));
        assert_eq!(parse_bytes("1M"), Ok(DEFAULT_MAX_MUSIC_BODY));
        assert_eq!(parse_bytes("1M"), Ok(DEFAULT_MAX_TTS_BODY));
        assert_eq!(parse_bytes("1M"), Ok(DEFAULT_MAX_WS_MESSAGE));
    }

    #[test]
    fn seconds_are_positive_and_finite() {
        assert_eq!(parse_secs("0.5"), Ok(0.5));
        for bad in ["0", "-1", "inf", "NaN", "x", "1e30"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }
}
