//! Writes to a model endpoint's WebSocket: each within the write timeout (a client that stops
//! reading is cut off, never waited for), and a close that lingers for the client's reply.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};

/// How long a closing connection waits for the client's close reply, so that the client reads
/// the last message before the socket goes.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// A failed write.
pub(crate) enum SendFailed {
    Closed,
    TimedOut,
}

/// Sends `msg` within `timeout`.
pub(crate) async fn send(
    socket: &mut WebSocket,
    msg: Message,
    timeout: Duration,
) -> Result<(), SendFailed> {
    match tokio::time::timeout(timeout, socket.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(SendFailed::Closed),
        Err(_) => Err(SendFailed::TimedOut),
    }
}

/// Sends `msg` as JSON text within `timeout`.
pub(crate) async fn send_json<T: serde::Serialize>(
    socket: &mut WebSocket,
    msg: &T,
    timeout: Duration,
) -> Result<(), SendFailed> {
    let text = serde_json::to_string(msg).map_err(|_| SendFailed::Closed)?;
    send(socket, Message::Text(text.into()), timeout).await
}

/// Sends a close frame, then waits briefly for the client's close reply.
pub(crate) async fn close(
    socket: &mut WebSocket,
    code: u16,
    reason: &'static str,
    timeout: Duration,
) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    if send(socket, Message::Close(Some(frame)), timeout)
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        while let Some(Ok(msg)) = socket.recv().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}
