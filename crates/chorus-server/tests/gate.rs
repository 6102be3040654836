//! The gate over real sockets: API keys on every endpoint but `/healthz`, and each limit on what
//! a client may hold (connections, header and body deadlines, body and message sizes, uploads)
//! refusing the abuse with a named error and a metric while a decode stream beside it keeps its
//! exact output.

mod common;

use std::time::{Duration, Instant};

use chorus_engine::EngineConfig;
use chorus_server::gate::{ApiKeys, Limits};
use chorus_server::npy::write_codes;
use chorus_server::protocol::ServerMessage;
use chorus_server::{Server, ServerConfig};
use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

const KEYS: [&str; 2] = ["k-one", "k-two"];
/// The loopback address the abuse comes from; the well-behaved clients use another.
const ABUSER: &str = "127.0.0.1";
const NEIGHBOUR: &str = "127.0.0.2";

async fn serve(limits: Limits, keys: bool, public_metrics: bool) -> Server {
    let config = ServerConfig {
        limits,
        api_keys: keys.then(|| ApiKeys::from_keys(&KEYS).unwrap()),
        public_metrics,
        ..ServerConfig::default()
    };
    start_with(fake(4, 4), EngineConfig::default(), config).await
}

/// A TCP connection to `server` from the loopback address `from`.
async fn tcp_from(server: &Server, from: &str) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    sock.connect(server.local_addr()).await.unwrap()
}

/// Sends `head` (and `body`) and reads the answer to its end: status, headers, body.
async fn raw(tcp: &mut TcpStream, head: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    read_answer(tcp).await
}

async fn read_answer(tcp: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut chunk = [0u8; 8192];
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    read.await.expect("the answer in time");
    parse_answer(&buf)
}

fn parse_answer(buf: &[u8]) -> (u16, String, Vec<u8>) {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, buf[end + 4..].to_vec())
}

/// An HTTP/1.1 request head that closes the connection after its answer.
fn head(method: &str, path: &str, extra: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nhost: chorus\r\nconnection: close\r\n{extra}\r\n")
}

/// The JSON error body's `code`, checking it has a message naming `needle`.
fn error_code(body: &[u8], needle: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    let message = v["message"].as_str().unwrap();
    assert!(message.contains(needle), "`{needle}` not in: {message}");
    v["code"].as_str().unwrap().to_string()
}

async fn metrics(server: &Server, auth: &str) -> String {
    let mut tcp = tcp_from(server, NEIGHBOUR).await;
    let (status, _, body) = raw(&mut tcp, &head("GET", "/metrics", auth), b"").await;
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// A decode stream from the neighbour's address, fed a frame at a time beside the abuse; its
/// PCM must equal the same frames decoded alone.
struct Bystander {
    ws: Ws,
    sent: Vec<Vec<u32>>,
}

impl Bystander {
    async fn open(server: &Server, query: &str) -> Self {
        let tcp = tcp_from(server, NEIGHBOUR).await;
        let url = format!("ws://{}/v1/stream{query}", server.local_addr());
        let (mut ws, _) = tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(tcp))
            .await
            .unwrap();
        send_text(&mut ws, &open_msg(3, "f32")).await;
        assert!(matches!(
            next_json(&mut ws).await,
            ServerMessage::Opened { .. }
        ));
        Self {
            ws,
            sent: Vec::new(),
        }
    }

    async fn step(&mut self) {
        let frame = codes(77, self.sent.len() as u64, 3);
        send_codes(&mut self.ws, &frame).await;
        self.sent.push(frame);
    }

    async fn check(mut self) {
        let n = self.sent.len() as u32;
        let got = read_pcm(&mut self.ws, 0, n).await;
        assert_eq!(got, reference(&self.sent), "the bystander's PCM changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_but_healthz_needs_a_key_before_anything_is_read() {
    let server = serve(Limits::default(), true, false).await;
    let mut by = Bystander::open(&server, "?api_key=k-one").await;
    let npy = write_codes(2, &[codes(1, 0, 2), codes(1, 1, 2)].concat());
    let no_key: [(&str, &str, &str); 9] = [
        ("GET", "/metrics", ""),
        ("POST", "/v1/decode", "content-length: 2147483648\r\n"),
        ("POST", "/v1/encode", "content-length: 10\r\n"),
        ("POST", "/v1/music", "content-length: 10\r\n"),
        ("GET", "/v1/nothing", ""),
        ("GET", "/v1/stream", "upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
        ("GET", "/v1/music?api_key=wrong", "authorization: Bearer k-onex\r\n"),
        ("POST", "/v1/tts", "content-length: 10\r\n"),
        ("GET", "/v1/tts?api_key=wrong", "upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
    ];
    for (method, path, extra) in no_key {
        by.step().await;
        let mut tcp = tcp_from(&server, NEIGHBOUR).await;
        // No body is sent: a refusal that waited for the 2 GB would never come.
        let (status, _, body) = raw(&mut tcp, &head(method, path, extra), b"").await;
        assert_eq!(status, 401, "{method} {path}");
        assert_eq!(
            error_code(&body, "API key"),
            "unauthorized",
            "{method} {path}"
        );
    }
    // A key in any of the three places is accepted.
    let mut tcp = tcp_from(&server, NEIGHBOUR).await;
    let (status, _, _) = raw(&mut tcp, &head("GET", "/healthz", ""), b"").await;
    assert_eq!(status, 200, "/healthz is open");
    let auth = "authorization: Bearer k-two\r\n";
    let mut tcp = tcp_from(&server, NEIGHBOUR).await;
    let decode = head(
        "POST",
        "/v1/decode?format=f32",
        &format!("kyutai-api-key: k-one\r\ncontent-length: {}\r\n", npy.len()),
    );
    let (status, _, pcm) = raw(&mut tcp, &decode, &npy).await;
    assert_eq!(status, 200);
    assert_eq!(pcm.len(), 2 * 1920 * 4);
    let mut req = format!("ws://{}/v1/stream", server.local_addr())
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer k-two".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    send_text(&mut ws, &open_msg(2, "f32")).await;
    assert!(matches!(
        next_json(&mut ws).await,
        ServerMessage::Opened { .. }
    ));
    // A browser-style WebSocket without a key is refused before the upgrade.
    let url = format!("ws://{}/v1/stream", server.local_addr());
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), 401);
            let body = res.body().clone().unwrap_or_default();
            assert_eq!(error_code(&body, "api_key"), "unauthorized");
        }
        other => panic!("expected 401, got {:?}", other.map(|_| ())),
    }
    let text = metrics(&server, auth).await;
    assert_eq!(
        metric(&text, "chorus_unauthorized_total{endpoint=\"/v1/stream\"}"),
        2
    );
    assert_eq!(
        metric(&text, "chorus_unauthorized_total{endpoint=\"/v1/music\"}"),
        2
    );
    assert_eq!(
        metric(&text, "chorus_unauthorized_total{endpoint=\"/v1/tts\"}"),
        2
    );
    for ep in ["/metrics", "/v1/decode", "/v1/encode", "other"] {
        let name = format!("chorus_unauthorized_total{{endpoint=\"{ep}\"}}");
        assert_eq!(metric(&text, &name), 1, "{ep}");
    }
    by.check().await;
}

#[tokio::test]
async fn public_metrics_are_served_without_a_key_and_nothing_else_is() {
    let server = serve(Limits::default(), true, true).await;
    let text = metrics(&server, "").await;
    assert!(text.contains("chorus_open_connections"), "{text}");
    let mut tcp = tcp_from(&server, NEIGHBOUR).await;
    let (status, _, _) = raw(
        &mut tcp,
        &head("POST", "/v1/decode", "content-length: 0\r\n"),
        b"",
    )
    .await;
    assert_eq!(status, 401);
}

/// 2,000 idle connections from one address: the per-address limit holds the first 100 and
/// refuses the rest at once with 429 `busy`; a client from another address is served, and once
/// the idle ones go their address is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_from_one_address_do_not_shut_others_out() {
    const IDLE: usize = 2000;
    const PER_CLIENT: usize = 100;
    // Client and server share this process: each connection is two descriptors (plus the
    // refusals lingering), past the soft limit of 1,024 many systems start with.
    let fds = chorus_server::raise_open_file_limit().unwrap();
    assert!(
        fds >= (2 * IDLE + 512) as u64,
        "this test needs an open-file hard limit of {} (ulimit -Hn is {fds})",
        2 * IDLE + 512
    );
    let limits = Limits {
        max_connections_per_client: PER_CLIENT,
        // Longer than the test: the idle connections stay until they are dropped.
        header_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut by = Bystander::open(&server, "").await;
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        idle.push(tcp_from(&server, ABUSER).await);
        if i % 400 == 0 {
            by.step().await;
        }
    }
    // Each refused connection has its answer waiting; an admitted one has nothing to read.
    let answers = futures_util::future::join_all(idle.iter_mut().map(|tcp| async move {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), tcp.read_to_end(&mut buf)).await;
        (read.is_ok(), buf)
    }))
    .await;
    let mut refused = 0;
    for (ended, buf) in &answers {
        if *ended {
            let (status, _, body) = parse_answer(buf);
            assert_eq!(status, 429);
            assert_eq!(error_code(&body, "--max-connections-per-client"), "busy");
            refused += 1;
        } else {
            assert!(buf.is_empty(), "an admitted connection was sent {buf:?}");
        }
    }
    assert_eq!(refused, IDLE - PER_CLIENT);
    by.step().await;
    let mut tcp = tcp_from(&server, NEIGHBOUR).await;
    let (status, _, _) = raw(&mut tcp, &head("GET", "/healthz", ""), b"").await;
    assert_eq!(status, 200, "another address is served");
    let text = metrics(&server, "").await;
    assert_eq!(
        metric(
            &text,
            "chorus_refused_total{reason=\"connections_per_client\"}"
        ),
        (IDLE - PER_CLIENT) as u64
    );
    // The bystander, this scrape and the admitted idle ones (refused ones may still linger).
    assert!(metric(&text, "chorus_open_connections") >= (PER_CLIENT + 2) as u64);
    drop(idle);
    let deadline = Instant::now() + WAIT;
    loop {
        let mut tcp = tcp_from(&server, ABUSER).await;
        tcp.write_all(head("GET", "/healthz", "").as_bytes())
            .await
            .unwrap();
        let (status, _, _) = read_answer(&mut tcp).await;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the address never got its places back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    by.check().await;
}

#[tokio::test]
async fn the_server_wide_limit_refuses_the_excess_until_places_free() {
    let limits = Limits {
        max_connections: 10,
        max_connections_per_client: 0,
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut by = Bystander::open(&server, "").await;
    let mut held = Vec::new();
    for _ in 0..9 {
        held.push(tcp_from(&server, ABUSER).await);
    }
    by.step().await;
    let mut extra = tcp_from(&server, NEIGHBOUR).await;
    let (status, _, body) = read_answer(&mut extra).await;
    assert_eq!(status, 429);
    assert_eq!(error_code(&body, "--max-connections"), "busy");
    held.clear();
    let deadline = Instant::now() + WAIT;
    loop {
        let mut tcp = tcp_from(&server, NEIGHBOUR).await;
        tcp.write_all(head("GET", "/metrics", "").as_bytes())
            .await
            .unwrap();
        let (status, _, body) = read_answer(&mut tcp).await;
        if status == 200 {
            let text = String::from_utf8(body).unwrap();
            assert_eq!(
                metric(&text, "chorus_refused_total{reason=\"connections\"}"),
                1
            );
            break;
        }
        assert!(Instant::now() < deadline, "places never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    by.step().await;
    by.check().await;
}

/// A client sending its headers one byte a second is closed at the header deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_is_cut_at_the_header_deadline() {
    let limits = Limits {
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut by = Bystander::open(&server, "").await;
    let mut tcp = tcp_from(&server, ABUSER).await;
    let started = Instant::now();
    let request = head("GET", "/healthz", "");
    let mut closed_at = None;
    for &b in request.as_bytes() {
        by.step().await;
        if tcp.write_all(&[b]).await.is_err() {
            closed_at = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed_at = Some(started.elapsed());
                break;
            }
            Ok(Ok(n)) => panic!("answered a partial request: {:?}", &buf[..n]),
            Err(_) => {}
        }
    }
    let at = closed_at.expect("the connection was closed before its headers were complete");
    assert!(
        at >= Duration::from_millis(900) && at < Duration::from_secs(4),
        "closed after {at:?}"
    );
    let text = metrics(&server, "").await;
    assert_eq!(
        metric(&text, "chorus_refused_total{reason=\"header_timeout\"}"),
        1
    );
    by.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_its_deadline_gets_408() {
    let limits = Limits {
        body_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut by = Bystander::open(&server, "").await;
    by.step().await;
    let mut tcp = tcp_from(&server, ABUSER).await;
    let started = Instant::now();
    let (status, _, body) = raw(
        &mut tcp,
        &head("POST", "/v1/decode", "content-length: 1000\r\n"),
        &[0u8; 10],
    )
    .await;
    assert_eq!(status, 408);
    assert_eq!(error_code(&body, "--body-timeout"), "timeout");
    assert!(started.elapsed() < Duration::from_secs(4));
    by.step().await;
    let text = metrics(&server, "").await;
    assert_eq!(
        metric(&text, "chorus_refused_total{reason=\"body_timeout\"}"),
        1
    );
    by.check().await;
}

/// A 2 GB body announced by Content-Length is refused at once, before any of it is read, on
/// every endpoint; a chunked body is cut at the first chunk past the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_their_endpoint_limit_get_413_without_being_read() {
    let limits = Limits {
        max_decode_body: 64 << 10,
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut by = Bystander::open(&server, "").await;
    let cases = [
        ("/v1/decode", "--max-decode-body"),
        ("/v1/encode", "--max-encode-body"),
        ("/v1/music", "--max-music-body"),
        ("/v1/tts", "--max-tts-body"),
        ("/healthz", "takes no request body"),
    ];
    for (path, needle) in cases {
        by.step().await;
        let mut tcp = tcp_from(&server, ABUSER).await;
        let started = Instant::now();
        let req = head("POST", path, "content-length: 2147483648\r\n");
        let (status, _, body) = raw(&mut tcp, &req, &[7u8; 1024]).await;
        assert_eq!(status, 413, "{path}");
        assert_eq!(error_code(&body, needle), "too_large", "{path}");
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
    }
    // 4 chunks of 32 KiB against 64 KiB.
    let mut tcp = tcp_from(&server, ABUSER).await;
    let mut chunked = Vec::new();
    for _ in 0..4 {
        chunked.extend_from_slice(format!("{:x}\r\n", 32 << 10).as_bytes());
        chunked.extend_from_slice(&[0u8; 32 << 10]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let req = head("POST", "/v1/decode", "transfer-encoding: chunked\r\n");
    let (status, _, body) = raw(&mut tcp, &req, &chunked).await;
    assert_eq!(status, 413);
    assert_eq!(error_code(&body, "sends more"), "too_large");
    // A chunked body within the limit is decoded as usual.
    let frames = vec![codes(5, 0, 2), codes(5, 1, 2)];
    let npy = write_codes(2, &frames.concat());
    let mut body = format!("{:x}\r\n", npy.len()).into_bytes();
    body.extend_from_slice(&npy);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let mut tcp = tcp_from(&server, ABUSER).await;
    let req = head(
        "POST",
        "/v1/decode?format=f32",
        "transfer-encoding: chunked\r\n",
    );
    let (status, _, pcm) = raw(&mut tcp, &req, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&pcm));
    let got: Vec<f32> = pcm
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, reference(&frames));
    by.step().await;
    let text = metrics(&server, "").await;
    assert_eq!(
        metric(&text, "chorus_refused_total{reason=\"body_too_large\"}"),
        6
    );
    by.check().await;
}

#[tokio::test]
async fn uploads_past_the_limit_are_busy() {
    let limits = Limits {
        max_uploads: 1,
        ..Limits::default()
    };
    let server = serve(limits, false, false).await;
    let mut slow = tcp_from(&server, ABUSER).await;
    let npy = write_codes(1, &codes(2, 0, 1));
    let req = head(
        "POST",
        "/v1/decode",
        &format!("content-length: {}\r\n", npy.len()),
    );
    slow.write_all(req.as_bytes()).await.unwrap();
    slow.write_all(&npy[..10]).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let mut tcp = tcp_from(&server, NEIGHBOUR).await;
        let (status, _, body) = raw(&mut tcp, &req, &npy).await;
        if status == 429 {
            assert_eq!(error_code(&body, "--max-uploads"), "busy");
            break;
        }
        // The first upload may not have reached the gate yet.
        assert_eq!(status, 200);
        assert!(
            Instant::now() < deadline,
            "the second upload was never refused"
        );
    }
    slow.write_all(&npy[10..]).await.unwrap();
    let (status, _, _) = read_answer(&mut slow).await;
    assert_eq!(status, 200, "the held upload completes");
    let mut tcp = tcp_from(&server, NEIGHBOUR).await;
    let (status, _, _) = raw(&mut tcp, &req, &npy).await;
    assert_eq!(status, 200, "its permit came back");
}

/// A 100 MB WebSocket message is refused from its frame header with `message_too_big` and close
/// 1009, before the stream is opened or after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_websocket_message_closes_with_1009() {
    let server = serve(Limits::default(), false, false).await;
    let mut by = Bystander::open(&server, "").await;
    for opened in [false, true] {
        by.step().await;
        let ws = if opened {
            open(&server, 2, "f32").await
        } else {
            connect(&server).await
        };
        let (mut tx, mut rx) = ws.split();
        // The server stops reading at the header: the rest of the send may never complete.
        let send = tokio::spawn(async move {
            let _ = tx.send(Message::Binary(vec![1u8; 100 << 20].into())).await;
            tx
        });
        let msg = tokio::time::timeout(WAIT, rx.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let Message::Text(t) = msg else {
            panic!("expected the error, got {msg:?}")
        };
        match serde_json::from_str(&t).unwrap() {
            ServerMessage::Error { code, message } => {
                assert_eq!(code.as_str(), "message_too_big");
                assert!(
                    message.contains("104857600") && message.contains("--max-ws-message"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        match tokio::time::timeout(WAIT, rx.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(f)))) => assert_eq!(u16::from(f.code), 1009),
            other => panic!("expected close 1009, got {other:?}"),
        }
        send.abort();
    }
    by.step().await;
    let text = metrics(&server, "").await;
    assert_eq!(
        metric(&text, "chorus_refused_total{reason=\"message_too_big\"}"),
        2
    );
    by.check().await;
}
