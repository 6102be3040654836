//! Every request, before its endpoint: the API key, then the body (its announced size, an upload
//! permit, and the whole body read within its size and deadline).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use hyper::body::Body as _;

use super::metrics::Refusal;
use super::{Gate, Limits};
use crate::protocol::ErrorCode;

/// The header Kyutai's servers read a key from.
pub const KYUTAI_KEY_HEADER: &str = "kyutai-api-key";
/// The query parameter carrying a key (browsers cannot set headers on a WebSocket).
pub const API_KEY_PARAM: &str = "api_key";
/// The query parameter moshi-server reads a key from (its browser clients send it).
pub const AUTH_ID_PARAM: &str = "auth_id";
/// Query parameters that carry a key, in the order they are read.
const KEY_PARAMS: [&str; 2] = [API_KEY_PARAM, AUTH_ID_PARAM];

/// Who may call an endpoint.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Anyone (health checks).
    Open,
    /// A client with a key, when the server has keys.
    Key,
    /// As `Key`, unless the server runs with `--public-metrics`.
    Metrics,
}

type BodyLimitOf = fn(&Limits) -> usize;

/// An endpoint as the gate sees it: its path (also its metrics label), who may call it, its
/// largest body and the flag that sets it.
struct Endpoint {
    path: &'static str,
    access: Access,
    max_body: BodyLimitOf,
    flag: &'static str,
}

/// Every endpoint; a request for any other path is held to the last row.
const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        path: "/v1/stream",
        access: Access::Key,
        max_body: |_| 0,
        flag: "",
    },
    Endpoint {
        path: "/v1/decode",
        access: Access::Key,
        max_body: |l| l.max_decode_body,
        flag: "--max-decode-body",
    },
    Endpoint {
        path: "/v1/encode",
        access: Access::Key,
        max_body: |l| l.max_encode_body,
        flag: "--max-encode-body",
    },
    Endpoint {
        path: "/v1/music",
        access: Access::Key,
        max_body: |l| l.max_music_body,
        flag: "--max-music-body",
    },
    Endpoint {
        path: "/v1/tts",
        access: Access::Key,
        max_body: |l| l.max_tts_body,
        flag: "--max-tts-body",
    },
    Endpoint {
        path: "/v1/stt",
        access: Access::Key,
        max_body: |_| 0,
        flag: "",
    },
    Endpoint {
        path: "/api/asr-streaming",
        access: Access::Key,
        max_body: |_| 0,
        flag: "",
    },
    Endpoint {
        path: "/healthz",
        access: Access::Open,
        max_body: |_| 0,
        flag: "",
    },
    Endpoint {
        path: "/metrics",
        access: Access::Metrics,
        max_body: |_| 0,
        flag: "",
    },
    Endpoint {
        path: "other",
        access: Access::Key,
        max_body: |_| 0,
        flag: "",
    },
];

fn endpoint(path: &str) -> &'static Endpoint {
    let last = &ENDPOINTS[ENDPOINTS.len() - 1];
    ENDPOINTS.iter().find(|e| e.path == path).unwrap_or(last)
}

/// The gate's middleware: a request that passes reaches its endpoint with its whole body read
/// (and its `api_key` parameter removed); any other gets its refusal here.
pub(crate) async fn check(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    let ep = endpoint(req.uri().path());
    let needs_key = match ep.access {
        Access::Open => false,
        Access::Key => true,
        Access::Metrics => !gate.public_metrics,
    };
    if let (true, Some(keys)) = (needs_key, &gate.keys) {
        let ok = presented_key(req.headers(), req.uri()).is_some_and(|k| keys.accepts(&k));
        if !ok {
            gate.metrics.unauthorized(ep.path);
            return refusal(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "a missing or wrong API key: send `Authorization: Bearer KEY`, the `kyutai-api-key` header, `?api_key=KEY` or `?auth_id=KEY`".into(),
            );
        }
    }
    let (mut parts, body) = req.into_parts();
    if let Some(uri) = without_key_param(&parts.uri) {
        parts.uri = uri;
    }
    let hint = body.size_hint();
    if hint.exact() == Some(0) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let max = (ep.max_body)(&gate.limits);
    if hint.lower() > max as u64 {
        gate.metrics.refused(Refusal::BodyTooLarge);
        return too_large(
            ep,
            max,
            &format!("this one announces {} bytes", hint.lower()),
        );
    }
    let _permit = match &gate.uploads {
        None => None,
        Some(s) => match s.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                gate.metrics.refused(Refusal::Uploads);
                return refusal(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::Busy,
                    format!(
                        "the server is reading {} request bodies, the most it takes at once (--max-uploads); try again shortly",
                        gate.limits.max_uploads
                    ),
                );
            }
        },
    };
    let deadline = gate.limits.body_timeout;
    let bytes = match tokio::time::timeout(deadline, read_body(body, max)).await {
        Ok(Ok(b)) => b,
        Ok(Err(BodyFailed::TooLarge)) => {
            gate.metrics.refused(Refusal::BodyTooLarge);
            return too_large(ep, max, "this one sends more");
        }
        // A broken body (a bad chunk, or the client gone mid-body).
        Ok(Err(BodyFailed::Broken(e))) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadFile,
                format!("reading the request body: {e}"),
            )
        }
        Err(_) => {
            gate.metrics.refused(Refusal::BodyTimeout);
            return refusal(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::Timeout,
                format!(
                    "the request body did not arrive within {} s (--body-timeout)",
                    deadline.as_secs_f64()
                ),
            );
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

enum BodyFailed {
    TooLarge,
    Broken(axum::Error),
}

/// Reads a body of at most `max` bytes, stopping at the first byte past it.
async fn read_body(mut body: Body, max: usize) -> Result<Bytes, BodyFailed> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyFailed::Broken)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(BodyFailed::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

fn too_large(ep: &Endpoint, max: usize, what: &str) -> Response {
    let message = if max == 0 {
        format!("{} takes no request body; {what}", ep.path)
    } else {
        format!(
            "{} takes a body of at most {max} bytes ({}); {what}",
            ep.path, ep.flag
        )
    };
    refusal(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::TooLarge, message)
}

/// A refusal's answer; it closes the connection, whose unread input would otherwise be taken for
/// the next request.
fn refusal(status: StatusCode, code: ErrorCode, message: String) -> Response {
    let body = serde_json::json!({ "code": code.as_str(), "message": message });
    let mut res = (status, Json(body)).into_response();
    res.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    res
}

/// The key a request presents: `Authorization: Bearer`, then `kyutai-api-key`, then `api_key`,
/// then `auth_id`.
fn presented_key(headers: &HeaderMap, uri: &Uri) -> Option<Vec<u8>> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        let scheme = b"bearer ";
        if v.len() > scheme.len() && v[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(v[scheme.len()..].trim_ascii().to_vec());
        }
    }
    if let Some(v) = headers.get(KYUTAI_KEY_HEADER) {
        return Some(v.as_bytes().trim_ascii().to_vec());
    }
    let query = uri.query()?;
    KEY_PARAMS.iter().find_map(|param| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(param)?.strip_prefix('='))
            .map(percent_decode)
    })
}

/// `uri` without its key parameters (`api_key`, `auth_id`), so that endpoints strict about their
/// query never see them; `None` when it has none.
fn without_key_param(uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    let is_key = |p: &&str| {
        KEY_PARAMS
            .iter()
            .any(|k| *p == *k || p.strip_prefix(k).is_some_and(|r| r.starts_with('=')))
    };
    if !query.split('&').any(|p| is_key(&p)) {
        return None;
    }
    let kept: Vec<&str> = query.split('&').filter(|p| !is_key(p)).collect();
    let path = uri.path();
    let path_and_query = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    Uri::from_parts(parts).ok()
}

/// `%XX` escapes (and `+` for a space) decoded; a malformed escape stays as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' => match (
                b.get(i + 1).and_then(|&c| hex(c)),
                b.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn the_key_parameter_is_removed_and_the_rest_kept() {
        assert_eq!(
            without_key_param(&uri("/v1/encode?n_q=8&api_key=k1&allow_truncated=true")),
            Some(uri("/v1/encode?n_q=8&allow_truncated=true"))
        );
        assert_eq!(
            without_key_param(&uri("/v1/stream?api_key=k1")),
            Some(uri("/v1/stream"))
        );
        assert_eq!(without_key_param(&uri("/v1/decode?format=f32")), None);
        assert_eq!(without_key_param(&uri("/v1/decode?my_api_key=x")), None);
        assert_eq!(
            without_key_param(&uri("/api/asr-streaming?auth_id=public_token")),
            Some(uri("/api/asr-streaming"))
        );
    }

    #[test]
    fn a_key_is_read_from_each_place_in_order() {
        let mut h = HeaderMap::new();
        let moshi = uri("/api/asr-streaming?auth_id=public_token");
        assert_eq!(presented_key(&h, &moshi).unwrap(), b"public_token");
        let plain = uri("/v1/stream?api_key=from%2Dquery&auth_id=second");
        assert_eq!(presented_key(&h, &plain).unwrap(), b"from-query");
        h.insert(KYUTAI_KEY_HEADER, "from-kyutai".parse().unwrap());
        assert_eq!(presented_key(&h, &plain).unwrap(), b"from-kyutai");
        h.insert(
            header::AUTHORIZATION,
            "bearer  from-bearer ".parse().unwrap(),
        );
        assert_eq!(presented_key(&h, &plain).unwrap(), b"from-bearer");
        let mut basic = HeaderMap::new();
        basic.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(presented_key(&basic, &uri("/metrics")), None);
    }

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode("a%41b"), b"aAb");
        assert_eq!(percent_decode("a%4"), b"a%4");
        assert_eq!(percent_decode("%zz+"), b"%zz ");
        assert_eq!(percent_decode("%41"), b"A");
    }

    #[test]
    fn unknown_paths_need_a_key_and_take_no_body() {
        let e = endpoint("/v1/nothing");
        assert!(e.access == Access::Key && (e.max_body)(&Limits::default()) == 0);
        assert!(endpoint("/healthz").access == Access::Open);
    }
}
