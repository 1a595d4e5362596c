//! The stdio transport: LSP base-protocol framing that survives bad input.
//!
//! tower-lsp-server's own `Server` stops reading after the first frame it cannot decode, so one
//! malformed message would end an editor's whole session. This loop frames messages itself:
//! a bad header, a body that is not JSON or not a JSON-RPC message, or a message over
//! [`MAX_MESSAGE_BYTES`] is answered with the JSON-RPC error it deserves (id `null` when the
//! id cannot be known) and reading goes on with the next frame. Requests are dispatched to the
//! `LspService` concurrently, while notifications run to completion in arrival order, so a
//! request always sees every document change sent before it. Server-to-client messages and
//! every answer are written by one writer task, a whole frame at a time, server-to-client
//! messages first, so a handler's notifications reach the client before its answer.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::future::poll_fn;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tower::Service;
use tower_lsp_server::ClientSocket;
use tower_lsp_server::jsonrpc::{Request, Response};

/// The largest message read. A larger one is skipped unread and answered with an error.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// The longest header line accepted; a longer one is not a header.
const MAX_HEADER_LINE: usize = 8 * 1024;

/// JSON-RPC error codes this layer answers with.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// What one attempt to read a frame produced.
enum Frame {
    Body(Vec<u8>),
    /// The frame was unusable; answer with this error and read on.
    Bad {
        code: i64,
        message: String,
    },
    Eof,
}

/// Serves `service` on the given streams until `exit` or end of input.
/// `optional_params` names methods whose params are all optional: for them an absent or `null`
/// params field is passed on as `{}`, since tower-lsp-server's handlers cannot accept both "no
/// params" and an object.
pub async fn serve<I, O, S>(
    stdin: I,
    stdout: O,
    mut service: S,
    socket: ClientSocket,
    optional_params: &[&str],
) where
    I: AsyncRead + Unpin,
    O: AsyncWrite + Unpin + Send + 'static,
    S: Service<Request, Response = Option<Response>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display,
{
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let (client_requests, mut client_responses) = socket.split();
    let writer = tokio::spawn(write_frames(stdout, client_requests, out_rx));

    let mut reader = BufReader::new(stdin);
    loop {
        let body = match read_frame(&mut reader).await {
            Frame::Eof => break,
            Frame::Bad { code, message } => {
                tracing::warn!("bad frame: {message}");
                send_error(&out_tx, Value::Null, code, &message);
                continue;
            }
            Frame::Body(body) => body,
        };
        let mut value: Value = match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(e) => {
                send_error(
                    &out_tx,
                    Value::Null,
                    PARSE_ERROR,
                    &format!("Parse error: {e}"),
                );
                continue;
            }
        };
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        if let Some(method) = value.get("method").and_then(Value::as_str)
            && optional_params.contains(&method)
            && value.get("params").is_none_or(Value::is_null)
        {
            value["params"] = Value::Object(serde_json::Map::new());
        }
        if value.get("method").is_some() {
            let request: Request = match serde_json::from_value(value) {
                Ok(request) => request,
                Err(e) => {
                    send_error(
                        &out_tx,
                        id,
                        INVALID_REQUEST,
                        &format!("Invalid request: {e}"),
                    );
                    continue;
                }
            };
            let exit = request.method() == "exit";
            if let Err(e) = poll_fn(|cx| service.poll_ready(cx)).await {
                tracing::error!("service stopped: {e}");
                break;
            }
            let is_notification = request.id().is_none();
            let future = service.call(request);
            let answer_tx = out_tx.clone();
            let answer = async move {
                match future.await {
                    Ok(Some(response)) => {
                        if let Ok(body) = serde_json::to_vec(&response) {
                            let _ = answer_tx.send(body);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!("request failed: {e}"),
                }
            };
            if is_notification {
                // Notifications (didOpen, didChange, …) take effect in order, before any later
                // message is dispatched: a request must see every change sent before it.
                answer.await;
            } else {
                tokio::spawn(answer);
            }
            if exit {
                break;
            }
        } else if value.get("id").is_some()
            && (value.get("result").is_some() || value.get("error").is_some())
        {
            match serde_json::from_value::<Response>(value) {
                Ok(response) => {
                    if client_responses.send(response).await.is_err() {
                        break;
                    }
                }
                Err(e) => tracing::warn!("unusable response from the client: {e}"),
            }
        } else {
            send_error(
                &out_tx,
                id,
                INVALID_REQUEST,
                "Invalid request: not a JSON-RPC request, notification or response",
            );
        }
    }
    drop(out_tx);
    // Answers already queued are written; requests still running are abandoned with the client.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}

fn send_error(out: &mpsc::UnboundedSender<Vec<u8>>, id: Value, code: i64, message: &str) {
    let body = json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id});
    let _ = out.send(body.to_string().into_bytes());
}

/// The one writer of stdout. Server-to-client messages (notifications such as `pen/event`, and
/// requests) are preferred over answers whenever both are waiting: a handler that sent its
/// notifications before answering has them queued in the socket first, so they are written
/// before its answer.
async fn write_frames<O: AsyncWrite + Unpin>(
    mut stdout: O,
    mut client_requests: impl futures::Stream<Item = Request> + Unpin,
    mut answers: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut socket_open = true;
    loop {
        let body = tokio::select! {
            biased;
            request = client_requests.next(), if socket_open => match request {
                Some(request) => match serde_json::to_vec(&request) {
                    Ok(body) => body,
                    Err(_) => continue,
                },
                None => {
                    socket_open = false;
                    continue;
                }
            },
            answer = answers.recv() => match answer {
                Some(body) => body,
                None => return,
            },
        };
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend_from_slice(&body);
        if stdout.write_all(&frame).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

/// Reads one frame: header lines up to a blank line, then `Content-Length` bytes.
async fn read_frame<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Frame {
    let mut length: Option<Result<usize, String>> = None;
    let mut saw_header = false;
    loop {
        let mut line = Vec::new();
        match (&mut *reader)
            .take(MAX_HEADER_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return Frame::Eof,
            Ok(_) => {}
            Err(_) => return Frame::Eof,
        }
        if line.len() > MAX_HEADER_LINE {
            // Skip the rest of this overlong line.
            let mut rest = Vec::new();
            if reader.read_until(b'\n', &mut rest).await.unwrap_or(0) == 0 {
                return Frame::Eof;
            }
            return bad(PARSE_ERROR, "Parse error: a header line is too long");
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if saw_header {
                break;
            }
            // Blank lines between frames are harmless.
            continue;
        }
        saw_header = true;
        let Some((name, value)) = text.split_once(':') else {
            return bad(
                PARSE_ERROR,
                &format!("Parse error: `{}` is not a header", truncate(text)),
            );
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            length = Some(value.trim().parse::<usize>().map_err(|_| {
                format!(
                    "Parse error: Content-Length `{}` is not a number",
                    truncate(value.trim())
                )
            }));
        }
    }
    let length = match length {
        Some(Ok(length)) => length,
        Some(Err(message)) => return bad(PARSE_ERROR, &message),
        None => {
            return bad(
                PARSE_ERROR,
                "Parse error: the message has no Content-Length header",
            );
        }
    };
    if length > MAX_MESSAGE_BYTES {
        // Skip the body without holding it.
        let skipped = tokio::io::copy(
            &mut (&mut *reader).take(length as u64),
            &mut tokio::io::sink(),
        )
        .await;
        if skipped.map_or(true, |n| n < length as u64) {
            return Frame::Eof;
        }
        return bad(
            INVALID_REQUEST,
            &format!(
                "Invalid request: the message is {length} bytes, over pen's {MAX_MESSAGE_BYTES}-byte limit"
            ),
        );
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).await.is_err() {
        return Frame::Eof;
    }
    Frame::Body(body)
}

fn bad(code: i64, message: &str) -> Frame {
    Frame::Bad {
        code,
        message: message.to_string(),
    }
}

fn truncate(text: &str) -> &str {
    &text[..crate::tools::floor_char_boundary(text, 80)]
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8]) -> Vec<Result<String, i64>> {
        let mut reader = BufReader::new(input);
        let mut out = Vec::new();
        loop {
            match read_frame(&mut reader).await {
                Frame::Eof => return out,
                Frame::Bad { code, .. } => out.push(Err(code)),
                Frame::Body(body) => out.push(Ok(String::from_utf8(body).unwrap())),
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_and_bad_ones_reported_in_place() {
        let input = b"Content-Length: 2\r\n\r\n{}\
            Content-Length: nope\r\n\r\n\
            garbage line\r\n\r\n\
            Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 4\r\n\r\nnull\
            \r\nContent-Length: 1\r\n\r\n1";
        assert_eq!(
            frames(input).await,
            vec![
                Ok("{}".into()),
                Err(PARSE_ERROR),
                Err(PARSE_ERROR),
                Ok("null".into()),
                Ok("1".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_truncated_body_is_the_end() {
        assert_eq!(frames(b"Content-Length: 10\r\n\r\n{}").await, vec![]);
    }
}
