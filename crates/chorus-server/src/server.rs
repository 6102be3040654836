//! Binding, routing, and the drain on shutdown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use chorus_core::{Error, Result};
use chorus_engine::EnginePool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::encode::EncodePool;
use crate::gate::{ApiKeys, Gate, Limits};
use crate::music::MusicEngine;
use crate::stt::SttEngine;
use crate::tts::TtsEngine;

/// Default time a new connection has to send `open`.
const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time one message may take to be written to a client before it is cut off.
const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time a drain waits for streams to finish.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the drain checks whether every connection has ended.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Server knobs (the engine's queue bounds live in [`chorus_engine::EngineConfig`]).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub open_timeout: Duration,
    pub write_timeout: Duration,
    pub drain_timeout: Duration,
    /// What one client, and all together, may hold (connections, bodies, messages, deadlines).
    pub limits: Limits,
    /// The keys every endpoint but `/healthz` requires; `None` serves every client.
    pub api_keys: Option<ApiKeys>,
    /// Serve `/metrics` without a key.
    pub public_metrics: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            open_timeout: DEFAULT_OPEN_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            limits: Limits::default(),
            api_keys: None,
            public_metrics: false,
        }
    }
}

/// Counts live WebSocket connections, which the HTTP server's own graceful shutdown does not
/// track once they are upgraded.
#[derive(Default)]
pub(crate) struct Connections(AtomicUsize);

pub(crate) struct ConnectionGuard(Arc<Connections>);

impl Connections {
    pub(crate) fn enter(self: &Arc<Self>) -> ConnectionGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        ConnectionGuard(self.clone())
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every handler sees.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Every device's engine (one for a one-device server): streams are opened through it.
    pub engine: Arc<EnginePool>,
    pub config: Arc<ServerConfig>,
    pub shutdown: watch::Receiver<bool>,
    pub connections: Arc<Connections>,
    /// The music semantic stage, when the server runs one.
    pub music: Option<Arc<MusicEngine>>,
    /// The encoder, when the server encodes audio.
    pub encode: Option<Arc<EncodePool>>,
    /// The speech stage, when the server runs one.
    pub tts: Option<Arc<TtsEngine>>,
    /// The speech-to-text stage, when the server runs one.
    pub stt: Option<Arc<SttEngine>>,
    /// Limits, keys and their counters.
    pub(crate) gate: Arc<Gate>,
}

/// The engines a server runs besides the decoders.
#[derive(Clone, Default)]
pub struct Services {
    pub music: Option<Arc<MusicEngine>>,
    pub encode: Option<Arc<EncodePool>>,
    pub tts: Option<Arc<TtsEngine>>,
    pub stt: Option<Arc<SttEngine>>,
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    pool: Arc<EnginePool>,
    config: Arc<ServerConfig>,
    shutdown: watch::Sender<bool>,
    connections: Arc<Connections>,
    task: JoinHandle<std::io::Result<()>>,
    encode: Option<Arc<EncodePool>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts serving the engines of `pool` on the
    /// current runtime.
    pub async fn bind(
        pool: Arc<EnginePool>,
        addr: SocketAddr,
        config: ServerConfig,
    ) -> Result<Self> {
        Self::bind_with_music(pool, None, addr, config).await
    }

    /// Like [`Server::bind`], also serving `/v1/music` from `music` (without it that endpoint
    /// answers 404 `not_enabled`).
    pub async fn bind_with_music(
        pool: Arc<EnginePool>,
        music: Option<Arc<MusicEngine>>,
        addr: SocketAddr,
        config: ServerConfig,
    ) -> Result<Self> {
        let services = Services {
            music,
            ..Services::default()
        };
        Self::bind_with(pool, services, addr, config).await
    }

    /// Like [`Server::bind`], also serving music (`/v1/music`), encoding (`/v1/encode`,
    /// `"input": "pcm"` streams), speech (`/v1/tts`) and speech to text (`/v1/stt`,
    /// `/api/asr-streaming`) from the given engines; without them those answer `not_enabled`.
    pub async fn bind_with(
        pool: Arc<EnginePool>,
        services: Services,
        addr: SocketAddr,
        config: ServerConfig,
    ) -> Result<Self> {
        let Services {
            music,
            encode,
            tts,
            stt,
        } = services;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io("Server::bind", addr.to_string(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("Server::bind", addr.to_string(), e))?;
        let (tx, rx) = watch::channel(false);
        let gate = Arc::new(Gate::new(
            config.limits.clone(),
            config.api_keys.clone(),
            config.public_metrics,
        ));
        let config = Arc::new(config);
        let connections = Arc::new(Connections::default());
        let state = AppState {
            engine: pool.clone(),
            config: config.clone(),
            shutdown: rx.clone(),
            connections: connections.clone(),
            music,
            encode: encode.clone(),
            tts,
            stt,
            gate: gate.clone(),
        };
        let app = Router::new()
            .route("/v1/stream", get(crate::ws::upgrade))
            .route("/v1/decode", post(crate::http::decode))
            .route("/v1/encode", post(crate::encode::http::encode))
            .route(
                "/v1/music",
                get(crate::music::ws::upgrade).post(crate::music::http::generate),
            )
            .route(
                "/v1/tts",
                get(crate::tts::ws::upgrade).post(crate::tts::http::generate),
            )
            .route("/v1/stt", get(crate::stt::ws::upgrade))
            .route("/api/asr-streaming", get(crate::stt::asr_ws::upgrade))
            .route("/healthz", get(crate::http::healthz))
            .route("/metrics", get(crate::http::metrics))
            // The gate has read each body within its endpoint's limit already.
            .layer(DefaultBodyLimit::disable())
            .layer(axum::middleware::from_fn_with_state(
                gate.clone(),
                crate::gate::request::check,
            ))
            .with_state(state);
        let task = tokio::spawn(crate::gate::accept::serve(listener, app, gate, rx));
        Ok(Self {
            addr,
            pool,
            config,
            shutdown: tx,
            connections,
            task,
            encode,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The engines behind the server.
    pub fn pool(&self) -> &Arc<EnginePool> {
        &self.pool
    }

    /// Drains: refuses new streams and connections, lets every open stream decode what it has
    /// sent, closes each with 1001, then stops (streams still open after the drain timeout are
    /// cut). Returns the number of connections cut.
    pub async fn shutdown(self) -> Result<usize> {
        self.pool.drain();
        if let Some(e) = &self.encode {
            e.drain();
        }
        let _ = self.shutdown.send(true);
        let deadline = tokio::time::Instant::now() + self.config.drain_timeout;
        while self.connections.count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let cut = self.connections.count();
        match tokio::time::timeout_at(deadline, self.task).await {
            Ok(Ok(Ok(()))) | Err(_) => Ok(cut),
            Ok(Ok(Err(e))) => Err(Error::io("Server::shutdown", self.addr.to_string(), e)),
            Ok(Err(e)) => Err(Error::input("Server::shutdown", e.to_string())),
        }
    }
}
