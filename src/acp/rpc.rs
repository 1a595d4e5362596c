//! JSON-RPC 2.0 over newline-delimited stdio, both ways: the client's requests and
//! notifications in, pen's answers, notifications and its own requests to the client
//! (`session/request_permission`, `fs/*`) out.
//!
//! Architecture invariant: one writer task owns stdout and writes whole lines, so a message is
//! never interleaved with another; `serde_json` escapes every newline inside strings, so no
//! frame carries one. A line that is not a JSON-RPC message gets an error answer and the
//! connection keeps reading.

use crate::limits::MAX_ACP_LINE_BYTES;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::{mpsc, oneshot};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (JSON-RPC error {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }

    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    fn to_value(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One message read from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The client's answer to one of pen's requests.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
    /// A line that is no message: answered with this error (to `id` when it could be read).
    Invalid {
        id: Value,
        error: RpcError,
    },
}

/// Reads the next message, one line of at most [`MAX_ACP_LINE_BYTES`]: `None` at the end of
/// input. A longer line is consumed to its end and read as invalid; blank lines are skipped.
pub async fn read_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Incoming>> {
    loop {
        match read_line(reader).await? {
            Line::End => return Ok(None),
            Line::TooLong => {
                return Ok(Some(Incoming::Invalid {
                    id: Value::Null,
                    error: RpcError::new(
                        PARSE_ERROR,
                        format!(
                            "the message is longer than {MAX_ACP_LINE_BYTES} bytes; it was skipped"
                        ),
                    ),
                }));
            }
            // A blank line between messages carries nothing; read on.
            Line::Text(line) if line.iter().all(u8::is_ascii_whitespace) => {}
            Line::Text(line) => return Ok(Some(parse(&line))),
        }
    }
}

enum Line {
    Text(Vec<u8>),
    TooLong,
    End,
}

async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            if line.is_empty() && !too_long {
                return Ok(Line::End);
            }
            break;
        }
        let (taken, ended) = match memchr::memchr(b'\n', buffer) {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if !too_long {
            if line.len() + taken > MAX_ACP_LINE_BYTES + 1 {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&buffer[..taken]);
            }
        }
        reader.consume(taken);
        if ended {
            break;
        }
    }
    Ok(if too_long {
        Line::TooLong
    } else {
        Line::Text(line)
    })
}

/// Reads one line as a JSON-RPC message.
pub fn parse(line: &[u8]) -> Incoming {
    let invalid = |id: Value, code: i64, message: String| Incoming::Invalid {
        id,
        error: RpcError::new(code, message),
    };
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return invalid(
                Value::Null,
                PARSE_ERROR,
                format!(
                    "the line is not JSON ({e}); each message is one line of JSON, with no newline inside it"
                ),
            );
        }
    };
    let Value::Object(mut message) = value else {
        return invalid(
            Value::Null,
            INVALID_REQUEST,
            "a message must be a JSON object (batches are not used by ACP)".into(),
        );
    };
    let id = message.remove("id");
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "the message has no \"jsonrpc\": \"2.0\"".into(),
        );
    }
    let params = message.remove("params").unwrap_or(Value::Null);
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) if id.is_string() || id.is_number() => {
            Incoming::Request { id, method, params }
        }
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => invalid(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "the method must be a string and the id a string or a number".into(),
        ),
        // An answer that repeats a key means what its reader picks (serde_json: the last
        // value); pen refuses it, so an approval is never read from one (`crate::json`).
        (None, Some(id)) => {
            if let Err(e) = crate::json::from_slice_unique_keys(line) {
                return Incoming::Response {
                    id,
                    result: Err(RpcError::new(
                        INVALID_REQUEST,
                        format!("the answer is malformed: {e}"),
                    )),
                };
            }
            let result = match (message.remove("result"), message.remove("error")) {
                (_, Some(error)) => Err(RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the client gave no message")
                        .to_string(),
                    data: error.get("data").cloned(),
                }),
                (Some(result), None) => Ok(result),
                (None, None) => {
                    return invalid(
                        id,
                        INVALID_REQUEST,
                        "a response needs a result or an error".into(),
                    );
                }
            };
            Incoming::Response { id, result }
        }
        (None, None) => invalid(
            Value::Null,
            INVALID_REQUEST,
            "the message has neither a method nor an id".into(),
        ),
    }
}

/// Why one of pen's requests to the client got no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Rejected(RpcError),
    #[error("the client is gone")]
    Gone,
}

/// The sending half of the connection, shared by every handler.
pub struct Connection {
    lines: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>,
    next_id: AtomicU64,
}

impl Connection {
    /// A connection whose lines go to `lines` (the writer task writes them out).
    pub fn new(lines: mpsc::UnboundedSender<String>) -> Connection {
        Connection {
            lines,
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        }
    }

    fn send(&self, message: Value) {
        // Serializing a `Value` cannot fail; a closed writer means the client is gone.
        let _ = self.lines.send(message.to_string());
    }

    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        self.send(match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_value()}),
        });
    }

    pub fn notify(&self, method: &str, params: &impl Serialize) {
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request to the client and waits for its answer.
    pub async fn request(&self, method: &str, params: &impl Serialize) -> Result<Value, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer_tx, answer_rx) = oneshot::channel();
        self.lock_pending().insert(id, answer_tx);
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        // Forgotten again if this wait is dropped (a timeout), so a late answer is ignored.
        let guard = PendingGuard {
            connection: self,
            id,
        };
        let answer = answer_rx.await;
        drop(guard);
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(CallError::Rejected(error)),
            Err(_) => Err(CallError::Gone),
        }
    }

    /// Hands the client's answer to the request waiting for it; an answer to nothing pen asked
    /// (or asked and stopped waiting for) is dropped.
    pub fn resolve(&self, id: &Value, result: Result<Value, RpcError>) {
        let waiting = id.as_u64().and_then(|id| self.lock_pending().remove(&id));
        match waiting {
            Some(waiting) => {
                let _ = waiting.send(result);
            }
            None => tracing::debug!("an answer to no pending request: {id}"),
        }
    }

    /// Fails every request still waiting for the client: it is gone.
    pub fn close(&self) {
        self.lock_pending().clear();
    }

    fn lock_pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct PendingGuard<'a> {
    connection: &'a Connection,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.connection.lock_pending().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_code(incoming: Incoming) -> i64 {
        match incoming {
            Incoming::Invalid { error, .. } => error.code,
            other => panic!("not invalid: {other:?}"),
        }
    }

    /// Issue 26, item 12: an answer that repeats a key reaches its waiter as an error.
    #[test]
    fn an_answer_that_repeats_a_key_is_an_error_for_its_waiter() {
        let line = br#"{"jsonrpc":"2.0","id":4,"result":{"outcome":{"outcome":"selected","optionId":"reject_once","optionId":"allow_once"}}}"#;
        match parse(line) {
            Incoming::Response {
                id,
                result: Err(error),
            } => {
                assert_eq!(id, json!(4));
                assert!(error.message.contains("\"optionId\""), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_are_read_as_requests_notifications_responses_or_errors() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#),
            Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"a": 1})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#),
            Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({})
            }
        );
        assert_eq!(
            parse(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":null}\r\n"),
            Incoming::Response {
                id: json!(7),
                result: Ok(Value::Null)
            }
        );
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}"#),
            Incoming::Response {
                result: Err(RpcError { code: -32601, .. }),
                ..
            }
        ));
        assert_eq!(error_code(parse(b"{\"jsonrpc\":\"2.0\",")), PARSE_ERROR);
        assert_eq!(error_code(parse(b"\"id\":1}")), PARSE_ERROR);
        assert_eq!(error_code(parse(b"[1,2]")), INVALID_REQUEST);
        assert_eq!(
            error_code(parse(br#"{"id":1,"method":"initialize"}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            error_code(parse(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            error_code(parse(br#"{"jsonrpc":"2.0","id":3}"#)),
            INVALID_REQUEST
        );
    }

    #[tokio::test]
    async fn a_line_over_the_cap_is_skipped_and_the_next_is_read() {
        let mut input = vec![b'x'; MAX_ACP_LINE_BYTES + 10];
        input.extend_from_slice(b"\n\n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n");
        let mut reader = tokio::io::BufReader::new(&input[..]);
        let first = read_message(&mut reader).await.unwrap().unwrap();
        assert_eq!(error_code(first), PARSE_ERROR);
        let second = read_message(&mut reader).await.unwrap().unwrap();
        assert!(matches!(second, Incoming::Notification { method, .. } if method == "m"));
        assert!(read_message(&mut reader).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn requests_to_the_client_get_their_answers_and_fail_when_it_goes() {
        let (lines_tx, mut lines_rx) = mpsc::unbounded_channel();
        let connection = std::sync::Arc::new(Connection::new(lines_tx));
        let asking = {
            let connection = connection.clone();
            tokio::spawn(async move { connection.request("fs/read_text_file", &json!({})).await })
        };
        let sent: Value = serde_json::from_str(&lines_rx.recv().await.unwrap()).unwrap();
        connection.resolve(&sent["id"], Ok(json!({"content": "x"})));
        assert_eq!(asking.await.unwrap().unwrap(), json!({"content": "x"}));
        let asking = {
            let connection = connection.clone();
            tokio::spawn(async move { connection.request("m", &json!({})).await })
        };
        lines_rx.recv().await.unwrap();
        connection.close();
        assert!(matches!(asking.await.unwrap(), Err(CallError::Gone)));
    }
}
