//! The gate every connection, request and WebSocket message passes through before an endpoint
//! sees it: the connection limits ([`accept`]), API keys and body limits ([`request`], one table
//! of endpoints), and the WebSocket message limit ([`ws`]). A new endpoint adds one row to
//! `request::ENDPOINTS` and, if it upgrades, takes [`ws::LimitedUpgrade`].

pub(crate) mod accept;
mod config;
mod keys;
mod metrics;
pub(crate) mod request;
pub(crate) mod ws;

use std::sync::Arc;

use tokio::sync::Semaphore;

pub use config::*;
pub use keys::{ApiKeys, API_KEYS_ENV};
pub use metrics::{GateMetrics, Refusal};

/// The gate's settings and books, shared by the accept loop and every request.
pub(crate) struct Gate {
    pub(crate) limits: Limits,
    pub(crate) keys: Option<ApiKeys>,
    pub(crate) public_metrics: bool,
    pub(crate) metrics: GateMetrics,
    pub(crate) conns: accept::ConnTable,
    /// Upload permits, when their number is limited.
    uploads: Option<Arc<Semaphore>>,
}

impl Gate {
    pub(crate) fn new(limits: Limits, keys: Option<ApiKeys>, public_metrics: bool) -> Self {
        let uploads =
            (limits.max_uploads > 0).then(|| Arc::new(Semaphore::new(limits.max_uploads)));
        Self {
            limits,
            keys,
            public_metrics,
            metrics: GateMetrics::default(),
            conns: accept::ConnTable::default(),
            uploads,
        }
    }
}
