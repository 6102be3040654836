//! The WebSocket message limit: every upgrade is configured with it, and a read that ran into it
//! becomes a named error for the connection to send before it closes (1009).

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};

use super::metrics::Refusal;
use crate::server::AppState;

/// A WebSocket upgrade whose messages and frames are held to `--max-ws-message`.
pub(crate) struct LimitedUpgrade(pub WebSocketUpgrade);

impl FromRequestParts<AppState> for LimitedUpgrade {
    type Rejection = WebSocketUpgradeRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let ws = WebSocketUpgrade::from_request_parts(parts, state).await?;
        let max = state.gate.limits.max_ws_message;
        // A frame's length is checked from its header, before its payload is read.
        Ok(Self(ws.max_message_size(max).max_frame_size(max)))
    }
}

/// When a failed read was a message over the limit: counts it and says so for the client.
pub(crate) fn too_big(state: &AppState, e: &axum::Error) -> Option<String> {
    let source = std::error::Error::source(e)?;
    match source.downcast_ref::<WsError>()? {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            state.gate.metrics.refused(Refusal::MessageTooBig);
            Some(format!(
                "a message of {size} bytes: this server takes messages of at most {max_size} bytes (--max-ws-message)"
            ))
        }
        _ => None,
    }
}
