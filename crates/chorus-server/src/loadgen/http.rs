//! A minimal HTTP/1.1 client for health checks and whole-file decodes.

use bytes::Bytes;
use chorus_core::{Error, Result};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

pub(crate) fn net_err(op: &'static str, addr: &str, e: impl std::fmt::Display) -> Error {
    Error::io(op, addr, std::io::Error::other(e.to_string()))
}

/// One HTTP/1.1 request; returns the status and body.
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>)> {
    let answer = http_exchange(addr, method, path, &[], body).await?;
    Ok((answer.status, answer.body))
}

/// [`http_request`] presenting `key` (the gate's `kyutai-api-key` header) when given.
pub async fn http_request_keyed(
    addr: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
    key: Option<&str>,
) -> Result<(u16, Vec<u8>)> {
    let headers: Vec<(&str, &str)> = key
        .map(|k| (crate::gate::request::KYUTAI_KEY_HEADER, k))
        .into_iter()
        .collect();
    let answer = http_exchange(addr, method, path, &headers, body).await?;
    Ok((answer.status, answer.body))
}

/// An HTTP answer: status, headers (names lower-case) and body.
#[derive(Clone, Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpAnswer {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with extra `headers`; returns the whole answer.
pub async fn http_exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<HttpAnswer> {
    let op = "loadgen::http_exchange";
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| Error::io(op, addr, e))?;
    crate::tcp::real_time(&tcp);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| net_err(op, addr, e))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr);
    for &(name, value) in headers {
        req = req.header(name, value);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| net_err(op, addr, e))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| net_err(op, addr, e))?;
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let bytes = res
        .into_body()
        .collect()
        .await
        .map_err(|e| net_err(op, addr, e))?
        .to_bytes();
    Ok(HttpAnswer {
        status,
        headers,
        body: bytes.to_vec(),
    })
}
