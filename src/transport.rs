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

use crate::limits::{
    FRAME_EXCERPT_BYTES, FRAME_IDLE_TIMEOUT, MAX_HEADER_LINE_BYTES, MAX_MESSAGE_BYTES,
    TRANSPORT_READ_CHUNK_BYTES, TRANSPORT_WRITER_DRAIN,
};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::future::poll_fn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tower::Service;
use tower_lsp_server::ClientSocket;
use tower_lsp_server::jsonrpc::{Request, Response};

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

    let mut reader = FrameReader::new(stdin);
    loop {
        let body = match reader.read_frame().await {
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
                // Most often a wrong Content-Length: what follows may not start a frame.
                reader.resync();
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
            if client_responses
                .send(client_response(value, &body))
                .await
                .is_err()
            {
                break;
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
    let _ = tokio::time::timeout(TRANSPORT_WRITER_DRAIN, writer).await;
}

/// The client's answer to one of pen's requests, as the request's waiter sees it. JSON-RPC
/// allows `result` or `error`, never both: a response with both, or one that does not parse
/// (an `error` that is not an error object), is passed on as an error, so that a waiter such as
/// an approval fails closed instead of taking the `result` (tower-lsp-server would take it) or
/// waiting for ever. An `"error": null` beside a result carries no error and is ignored. A
/// response whose `body` repeats a key in any object is an error too: serde_json read its last
/// value, and an approval must not mean what one reader of it picks (`crate::json`).
fn client_response(mut value: Value, body: &[u8]) -> Response {
    if let Err(e) = crate::json::from_slice_unique_keys(body) {
        tracing::warn!("a client response repeated a key; taken as an error: {e}");
        return malformed_response(&value, &e);
    }
    let has_error = value.get("error").is_some_and(|e| !e.is_null());
    if let Some(object) = value.as_object_mut() {
        if has_error && object.remove("result").is_some() {
            tracing::warn!(
                "a client response carried both `result` and `error`; taken as an error"
            );
        } else if !has_error {
            object.remove("error");
        }
    }
    match serde_json::from_value::<Response>(value.clone()) {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!("unusable response from the client: {e}");
            malformed_response(&value, &e)
        }
    }
}

/// The error a waiter gets for the client's response `value` that pen cannot use.
fn malformed_response(value: &Value, why: &serde_json::Error) -> Response {
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let id = serde_json::from_value(id).unwrap_or(tower_lsp_server::jsonrpc::Id::Null);
    Response::from_error(
        id,
        tower_lsp_server::jsonrpc::Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest,
            message: format!("the client's response was malformed: {why}").into(),
            data: None,
        },
    )
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

/// Reads frames from a byte stream and finds its way back to the next frame after a bad one.
///
/// A wrong `Content-Length` leaves the stream between frames: a length too short leaves the
/// tail of the body in front of the next header, and a length too long swallows the start of
/// the next frame into the body. Neither may desynchronise the daemon for good, so:
/// - after a framing error (or a body that is not JSON, which the caller reports with
///   [`FrameReader::resync`]), lines that are not headers are skipped until a header line;
/// - a `Content-Length:` header found inside a line of garbage (the tail of a body has no line
///   break before the next header) starts a frame there;
/// - a body is scanned for an embedded `Content-Length: N` line as it is read: valid JSON never
///   holds one (a line break cannot be inside a JSON string), so one there means the length was
///   too long, and the body ends where that header starts;
/// - a body whose bytes stop arriving for [`FRAME_IDLE_TIMEOUT`] while what came is a whole
///   JSON value ends there: its length was too long and no next frame has come to show it.
struct FrameReader<R> {
    inner: R,
    /// Bytes read from `inner` and not consumed yet, oldest first.
    pending: Vec<u8>,
    /// Set after a framing error: skip what is not a header until a header line.
    resyncing: bool,
}

/// What reading one line produced.
enum Line {
    /// A whole line (with its line break, unless the stream ended).
    Text(Vec<u8>),
    /// A line over [`MAX_HEADER_LINE_BYTES`], skipped up to its end or to an embedded header.
    TooLong,
    Eof,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    fn new(inner: R) -> FrameReader<R> {
        FrameReader {
            inner,
            pending: Vec::new(),
            resyncing: false,
        }
    }

    /// Marks the stream as out of step: the last frame's body was unusable.
    fn resync(&mut self) {
        self.resyncing = true;
    }

    /// Reads more bytes into `pending`; 0 at the end of the stream (or on a read error, which
    /// ends the stream as well).
    async fn fill(&mut self) -> usize {
        let mut chunk = vec![0u8; TRANSPORT_READ_CHUNK_BYTES];
        match self.inner.read(&mut chunk).await {
            Ok(n) => {
                self.pending.extend_from_slice(&chunk[..n]);
                n
            }
            Err(_) => 0,
        }
    }

    /// Puts bytes back in front of the stream.
    fn unread(&mut self, bytes: &[u8]) {
        self.pending.splice(0..0, bytes.iter().copied());
    }

    async fn read_line(&mut self) -> Line {
        let mut scanned = 0;
        loop {
            if let Some(end) = memchr::memchr(b'\n', &self.pending[scanned..]) {
                let end = scanned + end + 1;
                if end <= MAX_HEADER_LINE_BYTES {
                    return Line::Text(self.pending.drain(..end).collect());
                }
            }
            if self.pending.len() > MAX_HEADER_LINE_BYTES {
                self.skip_long_line().await;
                return Line::TooLong;
            }
            scanned = self.pending.len();
            if self.fill().await == 0 {
                if self.pending.is_empty() {
                    return Line::Eof;
                }
                return Line::Text(std::mem::take(&mut self.pending));
            }
        }
    }

    /// Discards an overlong line up to its line break, or up to a `Content-Length` header in
    /// it, which is left to be read.
    async fn skip_long_line(&mut self) {
        loop {
            let newline = memchr::memchr(b'\n', &self.pending);
            let limit = newline.map_or(self.pending.len(), |at| at + 1);
            if let Some(at) = find_length_header(&self.pending[..limit]) {
                self.pending.drain(..at);
                return;
            }
            if newline.is_some() {
                self.pending.drain(..limit);
                return;
            }
            // Keep a tail that may hold the start of a header cut by the chunk boundary.
            let keep = self.pending.len().min(HEADER_SCAN_OVERLAP);
            self.pending.drain(..self.pending.len() - keep);
            if self.fill().await == 0 {
                self.pending.clear();
                return;
            }
        }
    }

    /// Reads one frame: header lines up to a blank line, then `Content-Length` bytes.
    async fn read_frame(&mut self) -> Frame {
        let frame = self.read_frame_inner().await;
        if matches!(frame, Frame::Bad { .. }) {
            self.resyncing = true;
        }
        frame
    }

    async fn read_frame_inner(&mut self) -> Frame {
        let mut length: Option<Result<usize, String>> = None;
        let mut saw_header = false;
        loop {
            let line = match self.read_line().await {
                Line::Eof => return Frame::Eof,
                Line::TooLong if self.resyncing => continue,
                Line::TooLong => return bad(PARSE_ERROR, "Parse error: a header line is too long"),
                Line::Text(line) => line,
            };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\r', '\n']);
            if text.is_empty() {
                if saw_header {
                    break;
                }
                // Blank lines between frames are harmless.
                continue;
            }
            let header = text
                .split_once(':')
                .filter(|(name, _)| is_header_name(name));
            let Some((name, value)) = header else {
                // Not a header. A header inside it (after the tail of a body cut short) starts
                // the next frame.
                if let Some(at) = find_length_header(&line) {
                    self.unread(&line[at..]);
                }
                if self.resyncing {
                    tracing::debug!("skipped {} bytes that are not a header", line.len());
                    continue;
                }
                return bad(
                    PARSE_ERROR,
                    &format!(
                        "Parse error: `{}` is not a header",
                        crate::text::cut(text, FRAME_EXCERPT_BYTES)
                    ),
                );
            };
            saw_header = true;
            self.resyncing = false;
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.trim().parse::<usize>().map_err(|_| {
                    format!(
                        "Parse error: Content-Length `{}` is not a number",
                        crate::text::cut(value.trim(), FRAME_EXCERPT_BYTES)
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
        self.read_body(length).await
    }

    /// Reads a body of `length` bytes, ending it early at an embedded frame header or when a
    /// whole JSON value has come and the rest does not (see the type's doc). A body over
    /// [`MAX_MESSAGE_BYTES`] is skipped unread, but scanned for an embedded header all the same.
    async fn read_body(&mut self, length: usize) -> Frame {
        let keep = length <= MAX_MESSAGE_BYTES;
        let mut body: Vec<u8> = Vec::new();
        // Bytes of the body consumed so far (kept in `body` or, for a skipped one, dropped).
        let mut consumed = 0usize;
        loop {
            let take = self.pending.len().min(length - consumed);
            // Scan the new bytes with an overlap, so a header cut by a chunk boundary is seen.
            let seen_before = if keep { body.len() } else { 0 };
            let window_start = seen_before.saturating_sub(HEADER_SCAN_OVERLAP);
            let mut window: Vec<u8> = Vec::new();
            let scan: &[u8] = if keep {
                body.extend(self.pending.drain(..take));
                &body[window_start..]
            } else {
                window.extend_from_slice(&body);
                window.extend(self.pending.drain(..take));
                &window
            };
            if let Some(at) = find_length_header(scan) {
                let at_in_scan = at;
                let embedded = scan[at_in_scan..].to_vec();
                self.unread(&embedded);
                if keep {
                    body.truncate(window_start + at_in_scan);
                    return Frame::Body(body);
                }
                return bad(
                    PARSE_ERROR,
                    "Parse error: the Content-Length did not match the message",
                );
            }
            consumed += take;
            if !keep {
                // Keep only the overlap of a skipped body.
                let tail = window.len().min(HEADER_SCAN_OVERLAP);
                body = window[window.len() - tail..].to_vec();
            }
            if consumed == length {
                break;
            }
            let filled = tokio::time::timeout(FRAME_IDLE_TIMEOUT, self.fill()).await;
            match filled {
                Ok(0) => return Frame::Eof,
                Ok(_) => {}
                Err(_) if keep && is_whole_json(&body) => return Frame::Body(body),
                Err(_) => {
                    if self.fill().await == 0 {
                        return Frame::Eof;
                    }
                }
            }
        }
        if keep {
            self.split_header_at_the_end(&mut body);
            Frame::Body(body)
        } else {
            bad(
                INVALID_REQUEST,
                &format!(
                    "Invalid request: the message is {length} bytes, over pen's {MAX_MESSAGE_BYTES}-byte limit"
                ),
            )
        }
    }
}

impl<R> FrameReader<R> {
    /// A length one to fifteen bytes too long ends the body inside the next frame's
    /// `Content-Length` name, where the body scan cannot see a whole header: when the body ends
    /// with the start of that name and the bytes already read after it complete the header line,
    /// those last bytes go back to the stream.
    fn split_header_at_the_end(&mut self, body: &mut Vec<u8>) {
        const NAME: &[u8] = b"content-length:";
        for cut in (1..=NAME.len().min(body.len())).rev() {
            let suffix = &body[body.len() - cut..];
            if !NAME[..cut].eq_ignore_ascii_case(suffix) {
                continue;
            }
            let mut joined = suffix.to_vec();
            joined.extend_from_slice(&self.pending[..self.pending.len().min(HEADER_SCAN_OVERLAP)]);
            if find_length_header(&joined) == Some(0) {
                self.pending.splice(0..0, suffix.iter().copied());
                body.truncate(body.len() - cut);
                return;
            }
        }
    }
}

/// How far back a scan for an embedded header looks into bytes already scanned: longer than
/// `Content-Length: ` with any plausible number and spaces.
const HEADER_SCAN_OVERLAP: usize = 64;

/// Whether `name` is an HTTP header field name (RFC 9110 token).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The offset of the first complete `Content-Length: N` line in `bytes` (any letter case of
/// the name, spaces around the number, CRLF or LF after it).
fn find_length_header(bytes: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"content-length:";
    const TAIL: usize = 6; // "ength:"
    for needle in [&b"ength:"[..], &b"ENGTH:"[..]] {
        for end in memchr::memmem::find_iter(bytes, needle) {
            let Some(start) = (end + TAIL).checked_sub(NAME.len()) else {
                continue;
            };
            if !bytes[start..end + TAIL].eq_ignore_ascii_case(NAME) {
                continue;
            }
            let rest = &bytes[end + TAIL..];
            let rest = trim_blanks(rest);
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 {
                continue;
            }
            let after = trim_blanks(&rest[digits..]);
            if after.starts_with(b"\r\n") || after.starts_with(b"\n") {
                return Some(start);
            }
        }
    }
    None
}

fn trim_blanks(bytes: &[u8]) -> &[u8] {
    let blanks = bytes
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    &bytes[blanks..]
}

/// Whether `bytes` is one JSON value, whitespace aside.
fn is_whole_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

fn bad(code: i64, message: &str) -> Frame {
    Frame::Bad {
        code,
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads every frame as `serve` does, asking for a resync after a body that is not JSON.
    async fn frames(input: &[u8]) -> Vec<Result<String, i64>> {
        let mut reader = FrameReader::new(input);
        let mut out = Vec::new();
        loop {
            match reader.read_frame().await {
                Frame::Eof => return out,
                Frame::Bad { code, .. } => out.push(Err(code)),
                Frame::Body(body) => {
                    if serde_json::from_slice::<Value>(&body).is_err() {
                        reader.resync();
                    }
                    out.push(Ok(String::from_utf8_lossy(&body).into_owned()));
                }
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_and_bad_ones_reported_in_place() {
        let input = b"Content-Length: 2\r\n\r\n{}\
            Content-Length: nope\r\n\r\n\
            Content-Type: x\r\n\r\n\
            Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 4\r\n\r\nnull\
            \r\nContent-Length: 1\r\n\r\n1\
            garbage line\r\n\r\n";
        assert_eq!(
            frames(input).await,
            vec![
                Ok("{}".into()),
                Err(PARSE_ERROR),
                Err(PARSE_ERROR),
                Ok("null".into()),
                Ok("1".into()),
                Err(PARSE_ERROR),
            ]
        );
    }

    #[tokio::test]
    async fn a_truncated_body_is_the_end() {
        assert_eq!(frames(b"Content-Length: 10\r\n\r\n{}").await, vec![]);
    }

    /// Ten valid requests, `{"jsonrpc":"2.0","id":N,"method":"pen/getConfig"}`, framed.
    fn valid_requests() -> (Vec<String>, Vec<u8>) {
        let bodies: Vec<String> = (1..=10)
            .map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"pen/getConfig"}}"#))
            .collect();
        let mut bytes = Vec::new();
        for body in &bodies {
            bytes.extend_from_slice(
                format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes(),
            );
        }
        (bodies, bytes)
    }

    fn answered(frames: &[Result<String, i64>], bodies: &[String]) -> usize {
        bodies
            .iter()
            .filter(|body| frames.iter().any(|f| f.as_deref() == Ok(body.as_str())))
            .count()
    }

    #[tokio::test]
    async fn a_length_counted_in_characters_costs_only_its_own_frame() {
        let body =
            r#"{"jsonrpc":"2.0","id":0,"method":"pen/newSession","params":{"title":"café"}}"#;
        let (bodies, rest) = valid_requests();
        for length in [
            body.chars().count(),
            body.len() - 30,
            body.len() + 1,
            body.len() + 40,
        ] {
            let mut input = format!("Content-Length: {length}\r\n\r\n{body}").into_bytes();
            input.extend_from_slice(&rest);
            let frames = frames(&input).await;
            assert_eq!(
                answered(&frames, &bodies),
                10,
                "length {length}: {frames:?}"
            );
        }
        // A length too long keeps the whole first message too: it ends at the next header.
        let mut input = format!("Content-Length: {}\r\n\r\n{body}", body.len() + 40).into_bytes();
        input.extend_from_slice(&rest);
        assert_eq!(frames(&input).await[0], Ok(body.to_string()));
    }

    #[tokio::test]
    async fn garbage_too_long_for_a_header_line_still_finds_the_next_header() {
        let (bodies, rest) = valid_requests();
        let mut input = b"Content-Length: 5\r\n\r\n{\"a\":".to_vec();
        input.extend(std::iter::repeat_n(b'x', 3 * MAX_HEADER_LINE_BYTES));
        input.extend_from_slice(&rest);
        let frames = frames(&input).await;
        assert_eq!(answered(&frames, &bodies), 10, "{frames:?}");
    }

    #[tokio::test]
    async fn a_length_over_the_limit_is_scanned_for_the_next_header() {
        let (bodies, rest) = valid_requests();
        let mut input =
            format!("Content-Length: {}\r\n\r\n{{}}", MAX_MESSAGE_BYTES + 1).into_bytes();
        input.extend_from_slice(&rest);
        let frames = frames(&input).await;
        assert_eq!(answered(&frames, &bodies), 10, "{frames:?}");
    }

    /// A frame whose Content-Length is too long and after which nothing comes (the client waits
    /// for its answer) is taken as a whole once its bytes stop.
    #[tokio::test]
    async fn a_stalled_body_that_is_whole_json_is_the_message() {
        let (client, server) = tokio::io::duplex(1024);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let _keep = &mut client_read;
        client_write
            .write_all(b"Content-Length: 50\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1}")
            .await
            .unwrap();
        let mut reader = FrameReader::new(server);
        match reader.read_frame().await {
            Frame::Body(body) => assert_eq!(body, b"{\"jsonrpc\":\"2.0\",\"id\":1}"),
            _ => panic!("no body"),
        }
    }

    /// Header mutations (a byte deleted, inserted, replaced or the length changed) of the first
    /// of eleven frames: the ten after it must come through. Seeded, so reproducible.
    #[tokio::test]
    async fn header_mutations_cost_at_most_the_mutated_frame() {
        let first =
            r#"{"jsonrpc":"2.0","id":0,"method":"pen/newSession","params":{"title":"café"}}"#;
        let header = format!("Content-Length: {}\r\n\r\n", first.len()).into_bytes();
        let (bodies, rest) = valid_requests();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let runs = 500;
        let mut resynced = 0;
        let mut worst = usize::MAX;
        for _ in 0..runs {
            let mut mutated = header.clone();
            let at = (next() as usize) % mutated.len();
            match next() % 4 {
                0 => {
                    mutated.remove(at);
                }
                1 => mutated.insert(at, (next() % 256) as u8),
                2 => mutated[at] = (next() % 256) as u8,
                _ => {
                    let length = (next() % (2 * first.len() as u64 + 2)) as usize;
                    mutated = format!("Content-Length: {length}\r\n\r\n").into_bytes();
                }
            }
            let mut input = mutated.clone();
            input.extend_from_slice(first.as_bytes());
            input.extend_from_slice(&rest);
            let frames = frames(&input).await;
            let got = answered(&frames, &bodies);
            worst = worst.min(got);
            if got == bodies.len() {
                resynced += 1;
            }
        }
        println!(
            "header mutations: {runs} runs, {resynced} kept all 10 later frames, worst {worst} of 10"
        );
        assert!(
            worst >= 9,
            "a mutation cost more than its own frame: worst {worst} of 10"
        );
    }
}
