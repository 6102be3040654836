//! What the gate counts: refusals by reason, missing or wrong keys by endpoint, open connections.

use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_engine::ErrorCounts;

/// Why the gate refused a connection, a request or a message (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The server-wide connection limit was reached.
    Connections,
    /// The client's address holds its limit of connections.
    ConnectionsPerClient,
    /// The request's headers did not arrive in time.
    HeaderTimeout,
    /// The request's body did not arrive in time.
    BodyTimeout,
    /// The request's body is larger than its endpoint takes.
    BodyTooLarge,
    /// Every upload slot is taken.
    Uploads,
    /// A WebSocket message larger than the limit.
    MessageTooBig,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connections => "connections",
            Self::ConnectionsPerClient => "connections_per_client",
            Self::HeaderTimeout => "header_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::BodyTooLarge => "body_too_large",
            Self::Uploads => "uploads",
            Self::MessageTooBig => "message_too_big",
        }
    }
}

#[derive(Default)]
pub struct GateMetrics {
    refused: ErrorCounts,
    unauthorized: ErrorCounts,
    /// TCP connections open now (upgraded WebSockets included).
    pub(crate) open_connections: AtomicUsize,
}

impl GateMetrics {
    pub fn refused(&self, why: Refusal) {
        self.refused.inc(why.as_str());
    }

    /// Refusals of `why` so far.
    pub fn refused_count(&self, why: Refusal) -> u64 {
        self.refused.get(why.as_str())
    }

    pub(crate) fn unauthorized(&self, endpoint: &'static str) {
        self.unauthorized.inc(endpoint);
    }

    pub fn render(&self, out: &mut String) {
        let open = self.open_connections.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP chorus_open_connections TCP connections open (WebSockets included).\n\
             # TYPE chorus_open_connections gauge\nchorus_open_connections {open}"
        );
        let _ = writeln!(
            out,
            "# HELP chorus_refused_total Connections, requests and messages refused by a limit, by reason.\n\
             # TYPE chorus_refused_total counter"
        );
        for (reason, n) in self.refused.snapshot() {
            let _ = writeln!(out, "chorus_refused_total{{reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP chorus_unauthorized_total Requests refused for a missing or wrong API key, by endpoint.\n\
             # TYPE chorus_unauthorized_total counter"
        );
        for (endpoint, n) in self.unauthorized.snapshot() {
            let _ = writeln!(
                out,
                "chorus_unauthorized_total{{endpoint=\"{endpoint}\"}} {n}"
            );
        }
    }
}
