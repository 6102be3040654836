//! The accept loop: every TCP connection is counted against the server-wide and per-address
//! limits before anything is read from it, then served by hyper with a header deadline.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

use super::metrics::Refusal;
use super::Gate;
use crate::ws::stopping;

/// Pause after an accept error that is not the peer's (out of file descriptors): retrying at
/// once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Time to write a refusal.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// Time a refused connection is read (and dropped) after its answer, so that closing it with
/// unread input does not reset it before the client reads the answer.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);
/// Bytes read from a refused connection at most.
const REFUSAL_DRAIN_BYTES: usize = 64 << 10;
/// Refused connections left to linger at once; beyond, a refusal closes at once.
const MAX_LINGERING_REFUSALS: usize = 1024;

/// Open connections, in all and by client address.
#[derive(Default)]
pub(crate) struct ConnTable {
    per_client: Mutex<HashMap<IpAddr, usize>>,
    lingering: AtomicUsize,
}

/// One admitted connection; dropping it (when the socket goes, upgraded or not) frees its place.
pub(crate) struct ConnSlot {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let table = &self.gate.conns;
        let mut map = table.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
        self.gate
            .metrics
            .open_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    /// Counts a new connection from `ip`, or says which limit refuses it.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnSlot, Refusal> {
        let limits = &self.limits;
        let mut map = self
            .conns
            .per_client
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let open = self.metrics.open_connections.load(Ordering::Relaxed);
        if limits.max_connections > 0 && open >= limits.max_connections {
            return Err(Refusal::Connections);
        }
        let held = map.get(&ip).copied().unwrap_or(0);
        if limits.max_connections_per_client > 0 && held >= limits.max_connections_per_client {
            return Err(Refusal::ConnectionsPerClient);
        }
        map.insert(ip, held + 1);
        // Changed under the lock, so that two accepts cannot both take the last place.
        self.metrics
            .open_connections
            .fetch_add(1, Ordering::Relaxed);
        Ok(ConnSlot {
            gate: self.clone(),
            ip,
        })
    }
}

/// A socket that holds its connection's place for as long as it lives.
struct Tracked {
    tcp: TcpStream,
    _slot: ConnSlot,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Accepts and serves connections until `stop` turns true, then lets every HTTP connection finish
/// its request in flight (upgraded WebSockets are drained by the server) and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    gate: Arc<Gate>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    // Each connection task holds a sender: `recv` ends once every one has finished.
    let (alive, mut finished) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping(&mut stop) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) if is_peer_error(&e) => continue,
            Err(_) => {
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        crate::tcp::real_time(&tcp);
        match gate.admit(peer.ip()) {
            Ok(slot) => {
                let io = Tracked { tcp, _slot: slot };
                let conn = serve_one(io, app.clone(), gate.clone(), stop.clone());
                let alive = alive.clone();
                tokio::spawn(async move {
                    conn.await;
                    drop(alive);
                });
            }
            Err(why) => {
                gate.metrics.refused(why);
                tokio::spawn(refuse(tcp, why, gate.clone()));
            }
        }
    }
    drop(alive);
    let _ = finished.recv().await;
    Ok(())
}

/// Serves one admitted connection's HTTP requests (and hands an upgrade its socket).
async fn serve_one(io: Tracked, app: Router, gate: Arc<Gate>, mut stop: watch::Receiver<bool>) {
    let service =
        hyper::service::service_fn(move |req: Request<Incoming>| app.clone().oneshot(req));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(gate.limits.header_timeout);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let served = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopping(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        if e.is_timeout() {
            gate.metrics.refused(Refusal::HeaderTimeout);
        }
    }
}

/// Answers a connection over a limit with `429 busy` before reading anything, then closes it.
async fn refuse(mut tcp: TcpStream, why: Refusal, gate: Arc<Gate>) {
    let message = match why {
        Refusal::ConnectionsPerClient => format!(
            "this client address holds {} connections, the most one address may (--max-connections-per-client)",
            gate.limits.max_connections_per_client
        ),
        _ => format!(
            "the server holds {} connections, the most it takes (--max-connections); try again later or another server",
            gate.limits.max_connections
        ),
    };
    let body = serde_json::json!({ "code": "busy", "message": message }).to_string();
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let written = tokio::time::timeout(REFUSAL_WRITE, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let lingering = &gate.conns.lingering;
    if lingering.fetch_add(1, Ordering::Relaxed) < MAX_LINGERING_REFUSALS {
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            let mut buf = [0u8; 4096];
            let mut read = 0;
            while read < REFUSAL_DRAIN_BYTES {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
    }
    lingering.fetch_sub(1, Ordering::Relaxed);
}

/// Accept errors about one peer (it reset before being accepted): the next accept is fine.
fn is_peer_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
