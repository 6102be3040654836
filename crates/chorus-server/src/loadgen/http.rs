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
    let op = "loadgen::http_request";
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| Error::io(op, addr, e))?;
    crate::tcp::real_time(&tcp);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| net_err(op, addr, e))?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| net_err(op, addr, e))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| net_err(op, addr, e))?;
    let status = res.status().as_u16();
    let bytes = res
        .into_body()
        .collect()
        .await
        .map_err(|e| net_err(op, addr, e))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}
