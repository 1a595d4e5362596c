//! What the HTTP backends share: the client, sending a request, reading `Retry-After`, turning
//! transport failures and statuses into [`ProviderError`]s, the wording that means "over the
//! context window", the one Stop rule ([`read_until_done`]) and, for the two backends that
//! answer in server-sent events, the whole request/stream loop ([`complete_sse`]): each of
//! them supplies only its request body, its error classifier and its [`StreamDecoder`].
//!
//! Server-sent events are parsed by `eventsource-stream`, which implements the WHATWG framing
//! (CRLF, CR or LF line ends, multi-line `data:`, comments, a leading BOM, characters split
//! across network reads) so the backends only see whole events.

use super::{ErrorKind, ModelResponse, ProviderError, StreamEvent};
use crate::limits::{PROVIDER_ERROR_BODY_BYTES, PROVIDER_ERROR_MESSAGE_BYTES};
use eventsource_stream::{EventStream, EventStreamError};
use futures::{Stream, StreamExt, TryStreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// Turns one backend's stream of server-sent events into a complete answer.
pub(crate) trait StreamDecoder {
    /// Takes one event (its `event:` name, empty when it has none, and its `data:`), reporting
    /// text to `on_event` as it arrives. Returns `true` once the stream's terminator arrived:
    /// nothing after it is read.
    fn event(
        &mut self,
        name: &str,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<bool, ProviderError>;

    /// Called when the terminator arrived or the stream ended; decides whether the answer is
    /// whole. A stream that ended early is an error, never a short answer.
    fn finish(self) -> Result<ModelResponse, ProviderError>;
}

/// How far an answer has come, after one piece of its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The answer is still arriving.
    More,
    /// The answer is whole (its terminator arrived) but trailing events may follow, such as
    /// Bedrock's `metadata` after `messageStop`: they are read unless Stop comes first, and
    /// then the answer is kept without them.
    Complete,
    /// The stream's last event arrived: nothing after it is read.
    Done,
}

/// Why [`read_until_done`] stopped reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The piece that makes the answer done arrived.
    Done,
    /// The stream ended (the connection closed).
    Closed,
    /// Stop fired while a whole answer waited for its trailing events; bytes of a piece may be
    /// left unread, which does not make the answer short.
    StoppedWhole,
}

/// The content type of a server-sent event stream.
pub(crate) const SSE_CONTENT_TYPE: &str = "text/event-stream";

/// One streamed request, start to end, for the backends that answer in server-sent events
/// (OpenAI-compatible and Anthropic): send it, classify a failed status with `classify` (the
/// backend's reading of its error envelope), decode the events with `decoder`, and end at the
/// terminator, on an error, or on Stop as [`read_until_done`] says. A stream that closes
/// before its terminator is the decoder's to refuse (a `Network` error, never a short answer).
pub(crate) async fn complete_sse<D: StreamDecoder>(
    request: reqwest::RequestBuilder,
    classify: fn(Option<u16>, &str) -> ProviderError,
    decoder: D,
    on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<ModelResponse, ProviderError> {
    let sent = send(request, SSE_CONTENT_TYPE, |status, _, body| {
        classify(Some(status), body)
    });
    let response = until_stopped(cancel, sent).await?;
    decode_stream(
        response.bytes_stream().map_err(transport_error),
        decoder,
        on_event,
        cancel,
    )
    .await
}

/// The one HTTP client a provider uses for all its requests (its connection pool is shared by
/// retries). `timeout` bounds silence, not the whole answer: see
/// [`crate::limits::PROVIDER_REQUEST_TIMEOUT`].
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    super::http_client_builder()
        .connect_timeout(timeout)
        .read_timeout(timeout)
        .build()
        .map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("could not set up the HTTP client: {}", error_chain(&e)),
            )
        })
}

/// Checks a base URL and returns it without a trailing slash.
pub(crate) fn base_url(url: &str) -> Result<String, ProviderError> {
    let trimmed = url.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(trimmed.to_string()),
        _ => Err(ProviderError::new(
            ErrorKind::Config,
            format!("base_url `{trimmed}` is not an http:// or https:// URL"),
        )),
    }
}

/// A header value for a secret: refused with a message that does not repeat it, and marked
/// sensitive so that no debug output of the request shows it.
pub(crate) fn secret_header(value: &str) -> Result<reqwest::header::HeaderValue, ProviderError> {
    let mut header = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
        ProviderError::new(
            ErrorKind::Config,
            "the API key holds characters an HTTP header cannot carry",
        )
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// Sends a request and returns the response when it succeeded with a body of
/// `content_type` (a missing content type is taken on trust). A failed status is classified by
/// `classify` (given the status, the headers and at most [`PROVIDER_ERROR_BODY_BYTES`] of the
/// body) with the `Retry-After` the response carried.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    content_type: &str,
    classify: impl FnOnce(u16, &HeaderMap, &str) -> ProviderError,
) -> Result<reqwest::Response, ProviderError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let retry_after = retry_after(&headers, SystemTime::now());
        let body = read_excerpt(response).await?;
        let mut error = classify(status.as_u16(), &headers, &body);
        error.retry_after = retry_after;
        return Err(error);
    }
    // A server that ignored `stream: true`, or a base URL that points at some other web page,
    // answers 200 with something else; saying so beats reporting an empty stream.
    let received = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or(content_type)
        .to_string();
    if !received.starts_with(content_type) {
        let body = read_excerpt(response).await?;
        return Err(ProviderError {
            kind: ErrorKind::Protocol,
            status: Some(status.as_u16()),
            message: format!(
                "expected `{content_type}` but got `{received}`: {}",
                excerpt(&body)
            ),
            retry_after: None,
        });
    }
    Ok(response)
}

/// Decodes a stream of body bytes as server-sent events with `decoder`: the part of
/// [`complete_sse`] that needs no server, so the unit tests can split bytes anywhere.
pub(crate) async fn decode_stream<S, B, D>(
    bytes: S,
    mut decoder: D,
    on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<ModelResponse, ProviderError>
where
    S: Stream<Item = Result<B, ProviderError>>,
    B: AsRef<[u8]>,
    D: StreamDecoder,
{
    let events = EventStream::new(bytes).map(|item| {
        item.map_err(|error| match error {
            EventStreamError::Transport(error) => error,
            EventStreamError::Utf8(error) => ProviderError::new(
                ErrorKind::Protocol,
                format!("the event stream is not UTF-8: {error}"),
            ),
            EventStreamError::Parser(error) => ProviderError::new(
                ErrorKind::Protocol,
                format!("the event stream could not be parsed: {error}"),
            ),
        })
    });
    read_until_done(events, cancel, |event| {
        Ok(match decoder.event(&event.event, &event.data, on_event)? {
            true => Progress::Done,
            false => Progress::More,
        })
    })
    .await?;
    decoder.finish()
}

/// Feeds a response's pieces (events, or byte chunks a backend frames itself) to `take` until
/// it says [`Progress::Done`], the stream ends, or an error. Every backend's Stop semantics
/// live here (SPEC §5, "Stop: an answer that arrives just after Stop is kept"):
/// - What has already arrived is decoded first (the read is polled before `cancel`), so an
///   answer whose terminator is in hand when Stop fires is returned whole.
/// - Once the answer waits for the network, Stop ends it at once with `Cancelled` (the
///   response is dropped, closing the connection), unless the answer is already
///   [`Progress::Complete`]: then it is returned without its trailing events.
pub(crate) async fn read_until_done<S, T>(
    pieces: S,
    cancel: &CancellationToken,
    mut take: impl FnMut(T) -> Result<Progress, ProviderError>,
) -> Result<Ending, ProviderError>
where
    S: Stream<Item = Result<T, ProviderError>>,
{
    let mut pieces = std::pin::pin!(pieces);
    let mut complete = false;
    loop {
        let next = tokio::select! {
            biased;
            next = pieces.next() => next,
            () = cancel.cancelled() => {
                return if complete { Ok(Ending::StoppedWhole) } else { Err(cancelled()) };
            }
        };
        let Some(piece) = next else {
            return Ok(Ending::Closed);
        };
        match take(piece?)? {
            Progress::More => {}
            Progress::Complete => complete = true,
            Progress::Done => return Ok(Ending::Done),
        }
    }
}

/// Runs `work` (sending a request, waiting for its headers) until it ends or `cancel` fires,
/// then `Cancelled`: nothing of the answer has arrived yet, so nothing is lost.
pub(crate) async fn until_stopped<T>(
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    tokio::select! {
        biased;
        result = work => result,
        () = cancel.cancelled() => Err(cancelled()),
    }
}

/// Reads at most [`PROVIDER_ERROR_BODY_BYTES`] of a body as text.
async fn read_excerpt(response: reqwest::Response) -> Result<String, ProviderError> {
    let mut body = Vec::new();
    let mut chunks = std::pin::pin!(response.bytes_stream());
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(transport_error)?;
        let room = PROVIDER_ERROR_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == PROVIDER_ERROR_BODY_BYTES {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Classifies a failure of the HTTP exchange itself.
pub(crate) fn transport_error(error: reqwest::Error) -> ProviderError {
    let (kind, what) = if error.is_timeout() {
        (ErrorKind::Timeout, "the provider did not answer in time")
    } else if error.is_connect() {
        (ErrorKind::Network, "could not connect to the provider")
    } else {
        (ErrorKind::Network, "the connection to the provider failed")
    };
    ProviderError::new(kind, format!("{what}: {}", error_chain(&error)))
}

/// An error and its sources on one line: reqwest's own message names only the URL, the cause
/// (refused, reset, timed out) is in its sources.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Runs one request of a backend (see [`complete_sse`]), prefixing an error's message with the
/// backend's `label` and removing `api_key` from it.
pub(crate) async fn labelled(
    label: &str,
    api_key: Option<&str>,
    work: impl std::future::Future<Output = Result<ModelResponse, ProviderError>>,
) -> Result<ModelResponse, ProviderError> {
    work.await.map_err(|mut error| {
        error.message = format!("{label}: {}", error.message);
        redact(error, api_key)
    })
}

/// The extended-thinking budget to send with `request`: `None` when `budget_tokens` is 0 (off).
/// Thinking tokens count against the answer's output limit, and Anthropic and Bedrock refuse a
/// budget that is not below it; that is refused here, before any request, saying which keys to
/// change, rather than raising `max_output_tokens` behind the prompt budget's back (the budget
/// reserves exactly `max_output_tokens` of the window).
pub(crate) fn thinking_budget(
    budget_tokens: u32,
    request: &super::ModelRequest,
) -> Result<Option<u32>, ProviderError> {
    if budget_tokens == 0 {
        return Ok(None);
    }
    if budget_tokens >= request.max_output_tokens {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "reasoning_budget_tokens ({budget_tokens}) must be less than max_output_tokens \
                 ({}), which the thinking counts against: raise max_output_tokens or lower \
                 reasoning_budget_tokens",
                request.max_output_tokens
            ),
        ));
    }
    Ok(Some(budget_tokens))
}

/// The error a backend returns when Stop was requested.
pub(crate) fn cancelled() -> ProviderError {
    ProviderError::new(ErrorKind::Cancelled, "the request was cancelled")
}

/// The delay a response asks for: `retry-after-ms` (milliseconds, sent by OpenAI), else
/// `Retry-After` as seconds or as an HTTP date (a date in the past means now).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(millis) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The kind an HTTP status means on its own.
pub(crate) fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Auth,
        408 => ErrorKind::Timeout,
        429 => ErrorKind::RateLimited,
        400..=499 => ErrorKind::BadRequest,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::Protocol,
    }
}

/// Wording with which providers and local servers reject a prompt over the context window.
/// Lower case; matched against the lowered message of an HTTP 400 or 413.
const CONTEXT_OVERFLOW_WORDING: &[&str] = &[
    // OpenAI, vLLM, llama-cpp-python: "This model's maximum context length is 512 tokens."
    "maximum context length",
    // Ollama: "the input length exceeds the context length"; newer vLLM: "the model's context
    // length is only 4096 tokens".
    "context length",
    // OpenAI's newer wording: "Your input exceeds the context window of this model."
    "context window",
    // llama-server: "request (4031 tokens) exceeds the available context size (512 tokens)".
    "context size",
    // Anthropic: "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000".
    "context limit",
    "too many tokens",
    // Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"; Ollama: "prompt too long".
    "prompt is too long",
    "prompt too long",
];

/// Wording of a rejected *output* limit, which shrinking the prompt cannot fix, even where it
/// also names the context length (vLLM: "'max_tokens' or 'max_completion_tokens' is too large:
/// 5000. This model's maximum context length is 4096 tokens…").
const OUTPUT_LIMIT_WORDING: &[&str] = &[
    "maximum allowed number of output tokens",
    "max_tokens is too large",
    "'max_tokens' or 'max_completion_tokens' is too large",
    "max_completion_tokens is too large",
];

/// Whether a rejection's wording says the prompt is over the context window (and not that the
/// requested output is over the model's output limit).
pub(crate) fn says_context_overflow(message: &str) -> bool {
    let message = message.to_lowercase();
    CONTEXT_OVERFLOW_WORDING
        .iter()
        .any(|phrase| message.contains(phrase))
        && !OUTPUT_LIMIT_WORDING
            .iter()
            .any(|phrase| message.contains(phrase))
}

/// At most [`PROVIDER_ERROR_MESSAGE_BYTES`] of a provider's wording, cut on a character
/// boundary, on one line.
pub(crate) fn excerpt(text: &str) -> String {
    let text = text.trim();
    let end = crate::text::floor_char_boundary(text, PROVIDER_ERROR_MESSAGE_BYTES);
    let mut cut: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if end < text.len() {
        cut.push('…');
    }
    cut
}

/// The message of an error that happened at `status` (or inside the stream when `None`).
pub(crate) fn describe(status: Option<u16>, wording: &str) -> String {
    match status {
        Some(status) => format!("HTTP {status}: {}", excerpt(wording)),
        None => format!("error in the stream: {}", excerpt(wording)),
    }
}

/// Removes a secret from an error message: a provider may echo the key it refused.
pub(crate) fn redact(mut error: ProviderError, secret: Option<&str>) -> ProviderError {
    if let Some(secret) = secret.filter(|s| !s.is_empty()) {
        error.message = error.message.replace(secret, "[redacted]");
    }
    error
}

/// Decodes SSE `body` with `decoder`, delivered in pieces of `piece` bytes as a network would,
/// and returns the answer with the text deltas reported on the way. For the backends' tests.
#[cfg(test)]
pub(crate) fn decode_in_pieces<D: StreamDecoder>(
    body: &str,
    piece: usize,
    decoder: D,
) -> (Result<ModelResponse, ProviderError>, Vec<String>) {
    let deltas = std::sync::Mutex::new(Vec::new());
    let on_event = |event: StreamEvent| {
        let StreamEvent::TextDelta(text) = event;
        deltas.lock().unwrap().push(text);
    };
    let pieces: Vec<Result<Vec<u8>, ProviderError>> = body
        .as_bytes()
        .chunks(piece)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let result = futures::executor::block_on(decode_stream(
        futures::stream::iter(pieces),
        decoder,
        &on_event,
        &CancellationToken::new(),
    ));
    (result, deltas.into_inner().unwrap())
}

/// A recorded error body: what it is, its HTTP status (none for an error inside a stream), the
/// body, and the kind it must be classified as. For the backends' tests.
#[cfg(test)]
pub(crate) type ClassifiedCase = (&'static str, Option<u16>, &'static str, ErrorKind);

/// Checks a backend's classifier against recorded bodies: each gets its kind, and is flagged as
/// a context-window rejection exactly when that is its kind.
#[cfg(test)]
pub(crate) fn check_classified(
    cases: &[ClassifiedCase],
    classify: impl Fn(Option<u16>, &str) -> ProviderError,
) {
    for (case, status, body, kind) in cases {
        let error = classify(*status, body);
        assert_eq!(error.kind, *kind, "{case}: {}", error.message);
        assert_eq!(
            error.context_window_exceeded(),
            *kind == ErrorKind::ContextWindowExceeded,
            "{case}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    type Pairs = &'static [(&'static str, &'static str)];

    fn headers(pairs: Pairs) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    /// The progress item `item` makes: 2 is Bedrock's `messageStop` (whole), 3 its `metadata`
    /// (the last event), 9 an SSE terminator.
    fn progress_of(item: u32) -> Progress {
        match item {
            2 => Progress::Complete,
            3 | 9 => Progress::Done,
            _ => Progress::More,
        }
    }

    /// Runs [`read_until_done`] over items sent on a channel: `first` is there from the start;
    /// once the reader took item 1 and waits for more, `then` arrives and Stop fires, both
    /// before the reader is polled again (as when the last bytes and the user's Stop come
    /// together). Returns the result and the items taken.
    async fn read_with_stop(
        first: &[u32],
        then: &[u32],
    ) -> (Result<Ending, ProviderError>, Vec<u32>) {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        for item in first {
            sender.send(Ok(*item)).unwrap();
        }
        let pieces = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
        let cancel = CancellationToken::new();
        let (took_first, first_taken) = tokio::sync::oneshot::channel();
        let mut took_first = Some(took_first);
        let mut taken = Vec::new();
        let read = read_until_done(pieces, &cancel, |item| {
            taken.push(item);
            if let Some(signal) = took_first.take() {
                let _ = signal.send(());
            }
            Ok(progress_of(item))
        });
        let (result, ()) = tokio::join!(read, async {
            first_taken.await.unwrap();
            for item in then {
                sender.send(Ok(*item)).unwrap();
            }
            cancel.cancel();
        });
        (result, taken)
    }

    #[tokio::test]
    async fn stop_keeps_an_answer_whose_terminator_arrived_and_cancels_one_still_streaming() {
        // The terminator arrived with Stop: it is read first, and the answer is whole.
        let (result, taken) = read_with_stop(&[1], &[9]).await;
        assert_eq!((result, taken), (Ok(Ending::Done), vec![1, 9]));
        // Stop while the answer still waits for the network: cancelled at once.
        let (result, taken) = read_with_stop(&[1], &[]).await;
        assert_eq!(result.map_err(|e| e.kind), Err(ErrorKind::Cancelled));
        assert_eq!(taken, [1]);
        // Whole (Bedrock's messageStop) and waiting for trailing events: kept without them.
        let (result, taken) = read_with_stop(&[1, 2], &[]).await;
        assert_eq!((result, taken), (Ok(Ending::StoppedWhole), vec![1, 2]));
        // What arrived is decoded before Stop is looked at, to the last event.
        let (result, taken) = read_with_stop(&[1], &[2, 3]).await;
        assert_eq!((result, taken), (Ok(Ending::Done), vec![1, 2, 3]));
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let cases: &[(Pairs, Option<Duration>)] = &[
            (&[("retry-after", "1")], Some(Duration::from_secs(1))),
            (&[("retry-after", " 30 ")], Some(Duration::from_secs(30))),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:28:20 GMT")],
                Some(Duration::from_secs(20)),
            ),
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")],
                Some(Duration::ZERO),
            ),
            (
                &[("retry-after-ms", "250"), ("retry-after", "1")],
                Some(Duration::from_millis(250)),
            ),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "-1")], None),
            (&[], None),
        ];
        for (pairs, expected) in cases {
            assert_eq!(retry_after(&headers(pairs), now), *expected, "{pairs:?}");
        }
    }

    #[test]
    fn statuses_map_to_kinds() {
        let cases = [
            (400, ErrorKind::BadRequest),
            (401, ErrorKind::Auth),
            (403, ErrorKind::Auth),
            (404, ErrorKind::BadRequest),
            (408, ErrorKind::Timeout),
            (413, ErrorKind::BadRequest),
            (429, ErrorKind::RateLimited),
            (500, ErrorKind::Server),
            (503, ErrorKind::Server),
            (529, ErrorKind::Server),
            (302, ErrorKind::Protocol),
        ];
        for (status, kind) in cases {
            assert_eq!(kind_for_status(status), kind, "HTTP {status}");
        }
    }

    #[test]
    fn excerpt_cuts_on_a_character_boundary_and_flattens_lines() {
        let long = "é".repeat(PROVIDER_ERROR_MESSAGE_BYTES);
        let cut = excerpt(&long);
        assert!(cut.len() <= PROVIDER_ERROR_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(
            excerpt("  <html>\n<body>busy</body>\n"),
            "<html> <body>busy</body>"
        );
    }

    #[test]
    fn redact_removes_the_key_wherever_it_appears() {
        let error = ProviderError::new(
            ErrorKind::Auth,
            "HTTP 401: Incorrect API key provided: sk-secret-123.",
        );
        let redacted = redact(error, Some("sk-secret-123"));
        assert_eq!(
            redacted.message,
            "HTTP 401: Incorrect API key provided: [redacted]."
        );
    }

    #[test]
    fn base_url_must_be_http_and_loses_its_trailing_slash() {
        assert_eq!(
            base_url("http://127.0.0.1:11434/v1/").unwrap(),
            "http://127.0.0.1:11434/v1"
        );
        for bad in ["127.0.0.1:8080", "ftp://example.com", ""] {
            assert_eq!(base_url(bad).unwrap_err().kind, ErrorKind::Config, "{bad}");
        }
    }
}
