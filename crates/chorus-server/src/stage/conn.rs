//! The parts of a model endpoint's WebSocket connection that do not depend on the model: waiting
//! for `start` (within the open timeout, refusing binary and early `cancel`), reading the client
//! while the job runs (`cancel`, a second `start`, a disconnect), and the error-then-close ending.

use axum::extract::ws::{Message, WebSocket};

use super::error::{StageError, StageErrorCode};
use super::fields::ClientMessage;
use super::socket;
use crate::gate::ws::too_big;
use crate::protocol::close_code;
use crate::server::AppState;
use crate::ws::stopping;

/// Reads one text message as a client message.
pub(crate) type Parse<T> = fn(&str) -> Result<ClientMessage<T>, StageError>;

/// Why a connection ends.
pub(crate) enum End {
    /// The peer is gone; just drop the socket (and with it the job, which cancels it).
    Quiet,
    /// `end` was sent: close normally.
    Ended,
    /// Send this error, then close.
    Error(StageError),
}

pub(crate) fn error(code: StageErrorCode, message: impl Into<String>) -> End {
    End::Error(StageError::new(code, message))
}

/// The refusal of a new job while the server drains; `jobs` names them ("songs").
pub(crate) fn draining(jobs: &str) -> End {
    error(
        StageErrorCode::Draining,
        format!("the server is shutting down and starts no new {jobs}"),
    )
}

/// A failed read: a message over the limit is named to the client (close 1009); anything else
/// means the peer is gone.
pub(crate) fn read_failed(state: &AppState, e: &axum::Error) -> End {
    match too_big(state, e) {
        Some(message) => error(StageErrorCode::MessageTooBig, message),
        None => End::Quiet,
    }
}

/// Waits for `start`: the parsed request, or how the connection ends without one.
pub(crate) async fn await_start<T>(
    socket: &mut WebSocket,
    state: &AppState,
    parse: Parse<T>,
    jobs: &str,
) -> Result<Box<T>, End> {
    let timeout = state.config.open_timeout;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut shutdown = state.shutdown.clone();
    loop {
        let msg = tokio::select! {
            _ = &mut deadline => return Err(error(
                StageErrorCode::StartTimeout,
                format!("no `start` message within {} s", timeout.as_secs_f64()),
            )),
            _ = stopping(&mut shutdown) => return Err(draining(jobs)),
            msg = socket.recv() => msg,
        };
        match msg {
            Some(Err(e)) => return Err(read_failed(state, &e)),
            None | Some(Ok(Message::Close(_))) => return Err(End::Quiet),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Binary(_))) => {
                return Err(error(
                    StageErrorCode::NotStarted,
                    "binary message before `start` (the client sends JSON text only)",
                ))
            }
            Some(Ok(Message::Text(text))) => {
                return match parse(&text).map_err(End::Error)? {
                    ClientMessage::Start(req) => Ok(req),
                    ClientMessage::Cancel => {
                        Err(error(StageErrorCode::NotStarted, "`cancel` before `start`"))
                    }
                }
            }
        }
    }
}

/// Handles one client message while the job runs (`cancel` calls `cancel`); `Some` ends the
/// connection (and the job). `endpoint` and `job` name them in errors.
pub(crate) fn handle_input<T>(
    state: &AppState,
    msg: Option<Result<Message, axum::Error>>,
    parse: Parse<T>,
    cancel: impl FnOnce(),
    (endpoint, job): (&str, &str),
) -> Option<End> {
    match msg {
        Some(Err(e)) => Some(read_failed(state, &e)),
        None | Some(Ok(Message::Close(_))) => Some(End::Quiet),
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
        Some(Ok(Message::Binary(_))) => Some(End::Error(StageError::bad_request(format!(
            "binary messages are not accepted on {endpoint}"
        )))),
        Some(Ok(Message::Text(text))) => match parse(&text) {
            Ok(ClientMessage::Cancel) => {
                cancel();
                None
            }
            Ok(ClientMessage::Start(_)) => Some(error(
                StageErrorCode::AlreadyStarted,
                format!("a connection carries one {job}: `start` was already sent"),
            )),
            Err(e) => Some(End::Error(e)),
        },
    }
}

/// Ends the connection: a normal close after `end` (with `reason`), or the error message
/// `{"type": "error", "code", "message"}` and its close code.
pub(crate) async fn finish(
    socket: &mut WebSocket,
    state: &AppState,
    end: End,
    reason: &'static str,
) {
    let timeout = state.config.write_timeout;
    match end {
        End::Quiet => {}
        End::Ended => socket::close(socket, close_code::NORMAL, reason, timeout).await,
        End::Error(err) => {
            let msg = serde_json::json!({
                "type": "error",
                "code": err.code.as_str(),
                "message": err.message,
            });
            if socket::send_json(socket, &msg, timeout).await.is_ok() {
                socket::close(socket, err.code.close_code(), err.code.as_str(), timeout).await;
            }
        }
    }
}
