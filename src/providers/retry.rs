//! Retries with backoff around any [`Provider`]: 429, 5xx, dropped connections and timeouts are
//! tried again, honouring the provider's `Retry-After`; nothing else is.
//!
//! Two rules bound what a retry may do:
//! - **Never a flagged rejection.** A context-window rejection is the loop's to recover (it
//!   shrinks the newest tool results and retries once); a cancelled request stays cancelled.
//!   Both follow from [`ProviderError::is_retryable`].
//! - **Never after streaming.** An attempt that already passed text to `on_event` is not retried
//!   even when its error is retryable: the text reached the user, and a second answer would be
//!   appended to the first, which cannot be un-sent. The error is returned and the loop decides.

use super::wire;
use super::{ModelRequest, ModelResponse, Provider, ProviderError, StreamEvent};
use crate::limits::{
    PROVIDER_RETRY_AFTER_CAP, PROVIDER_RETRY_BASE_DELAY, PROVIDER_RETRY_MAX_DELAY,
};
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 0 is read as 1.
    pub max_attempts: u32,
    /// The backoff before the first retry, doubled for each later one.
    pub base_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
    /// The longest wait a `Retry-After` can impose.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// `max_attempts` attempts with the delays of [`crate::limits`].
    pub fn new(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base_delay: PROVIDER_RETRY_BASE_DELAY,
            max_delay: PROVIDER_RETRY_MAX_DELAY,
            max_retry_after: PROVIDER_RETRY_AFTER_CAP,
        }
    }

    /// The wait before retry number `retry` (1 for the first) after `error`: its `Retry-After`
    /// when it has one, capped; else exponential backoff with jitter, between half and all of
    /// `base_delay * 2^(retry-1)`, capped at `max_delay`.
    pub fn delay(&self, retry: u32, error: &ProviderError) -> Duration {
        if let Some(wait) = error.retry_after {
            return wait.min(self.max_retry_after);
        }
        let doubled = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)));
        let backoff = doubled.min(self.max_delay);
        backoff / 2 + backoff.mul_f64(fastrand::f64() / 2.0)
    }
}

/// A provider that retries its inner provider's retryable failures (see the module docs).
pub struct Retrying<P> {
    inner: P,
    policy: RetryPolicy,
}

impl<P: Provider> Retrying<P> {
    pub fn new(inner: P, policy: RetryPolicy) -> Retrying<P> {
        Retrying { inner, policy }
    }
}

impl<P: Provider> Provider for Retrying<P> {
    fn usage_is_total(&self) -> bool {
        self.inner.usage_is_total()
    }

    fn check_usage(&self, request: &ModelRequest, usage: &super::Usage) -> Option<String> {
        self.inner.check_usage(request, usage)
    }

    /// Sends the request up to `max_attempts` times. A wait between attempts ends at once with
    /// `Cancelled` when `cancel` fires. The error of the last attempt is returned, its message
    /// saying how many attempts were made.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(async move {
            let max_attempts = self.policy.max_attempts.max(1);
            let mut attempt = 1;
            loop {
                let streamed = AtomicBool::new(false);
                let forward = |event: StreamEvent| {
                    streamed.store(true, Ordering::Relaxed);
                    on_event(event);
                };
                let mut error = match self.inner.complete(request, &forward, cancel).await {
                    Ok(response) => return Ok(response),
                    Err(error) => error,
                };
                let retry = error.is_retryable()
                    && attempt < max_attempts
                    && !streamed.load(Ordering::Relaxed)
                    && !cancel.is_cancelled();
                if !retry {
                    if attempt > 1 {
                        error.message = format!("{} (after {attempt} attempts)", error.message);
                    }
                    return Err(error);
                }
                let delay = self.policy.delay(attempt, &error);
                tracing::warn!(
                    attempt,
                    max_attempts,
                    kind = ?error.kind,
                    status = ?error.status,
                    delay_ms = delay.as_millis() as u64,
                    "provider request failed; retrying: {}",
                    error.message
                );
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(wire::cancelled()),
                    _ = tokio::time::sleep(delay) => {}
                }
                attempt += 1;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ErrorKind, FinishReason};
    use std::sync::Mutex;

    /// One scripted attempt: text streamed first, if any, then success or an error of a kind.
    type Answer = (Option<&'static str>, Result<(), ErrorKind>);

    /// A provider that answers from a script and counts the attempts.
    struct Scripted {
        answers: Mutex<Vec<Answer>>,
        attempts: Mutex<u32>,
    }

    impl Scripted {
        fn new(answers: Vec<Answer>) -> Scripted {
            Scripted {
                answers: Mutex::new(answers.into_iter().rev().collect()),
                attempts: Mutex::new(0),
            }
        }
    }

    impl Provider for Scripted {
        fn complete<'a>(
            &'a self,
            _request: &'a ModelRequest,
            on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
            *self.attempts.lock().unwrap() += 1;
            let (text, outcome) = self.answers.lock().unwrap().pop().expect("scripted answer");
            if let Some(text) = text {
                on_event(StreamEvent::TextDelta(text.into()));
            }
            Box::pin(async move {
                match outcome {
                    Ok(()) => Ok(ModelResponse {
                        text: "ok".into(),
                        tool_calls: vec![],
                        finish_reason: FinishReason::EndTurn,
                        usage: None,
                        reasoning: vec![],
                    }),
                    Err(kind) => Err(ProviderError::new(kind, "scripted failure")),
                }
            })
        }
    }

    fn quick(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            max_retry_after: Duration::from_millis(5),
        }
    }

    fn request() -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![],
            tools: vec![],
            max_output_tokens: 1,
            cache: Default::default(),
        }
    }

    async fn run(
        policy: RetryPolicy,
        scripted: Scripted,
    ) -> (Result<ModelResponse, ProviderError>, u32) {
        let retrying = Retrying::new(scripted, policy);
        let result = retrying
            .complete(&request(), &|_| {}, &CancellationToken::new())
            .await;
        let attempts = *retrying.inner.attempts.lock().unwrap();
        (result, attempts)
    }

    #[tokio::test]
    async fn retryable_errors_are_retried_until_success() {
        let scripted = Scripted::new(vec![
            (None, Err(ErrorKind::RateLimited)),
            (None, Err(ErrorKind::Server)),
            (None, Err(ErrorKind::Network)),
            (None, Err(ErrorKind::Timeout)),
            (None, Ok(())),
        ]);
        let (result, attempts) = run(quick(5), scripted).await;
        assert_eq!(result.unwrap().text, "ok");
        assert_eq!(attempts, 5);
    }

    #[tokio::test]
    async fn the_last_error_is_returned_after_max_attempts() {
        let scripted = Scripted::new(vec![(None, Err(ErrorKind::Server)); 3]);
        let (result, attempts) = run(quick(3), scripted).await;
        let error = result.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Server);
        assert_eq!(error.message, "scripted failure (after 3 attempts)");
        assert_eq!(attempts, 3);
    }

    #[tokio::test]
    async fn flagged_and_final_errors_are_not_retried() {
        for kind in [
            ErrorKind::ContextWindowExceeded,
            ErrorKind::Cancelled,
            ErrorKind::BadRequest,
            ErrorKind::Auth,
            ErrorKind::Protocol,
            ErrorKind::Config,
        ] {
            let scripted = Scripted::new(vec![(None, Err(kind)), (None, Ok(()))]);
            let (result, attempts) = run(quick(4), scripted).await;
            let error = result.unwrap_err();
            assert_eq!(error.kind, kind);
            assert_eq!(error.message, "scripted failure", "{kind:?}");
            assert_eq!(attempts, 1, "{kind:?}");
        }
    }

    #[tokio::test]
    async fn an_attempt_that_streamed_text_is_not_retried() {
        let scripted = Scripted::new(vec![(Some("Hel"), Err(ErrorKind::Network)), (None, Ok(()))]);
        let (result, attempts) = run(quick(4), scripted).await;
        assert_eq!(result.unwrap_err().kind, ErrorKind::Network);
        assert_eq!(attempts, 1);
    }

    #[tokio::test]
    async fn zero_attempts_still_sends_once() {
        let scripted = Scripted::new(vec![(None, Err(ErrorKind::Server))]);
        let (result, attempts) = run(quick(0), scripted).await;
        assert_eq!(result.unwrap_err().kind, ErrorKind::Server);
        assert_eq!(attempts, 1);
    }

    #[tokio::test]
    async fn cancel_ends_the_wait_between_attempts() {
        let policy = RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_secs(3600),
            max_delay: Duration::from_secs(3600),
            max_retry_after: Duration::from_secs(3600),
        };
        let retrying = Retrying::new(
            Scripted::new(vec![(None, Err(ErrorKind::Server)), (None, Ok(()))]),
            policy,
        );
        let cancel = CancellationToken::new();
        // The first attempt fails at once, so the retry is waiting out its hour when cancel
        // fires.
        let request = request();
        let (result, ()) = tokio::join!(retrying.complete(&request, &|_| {}, &cancel), async {
            tokio::task::yield_now().await;
            cancel.cancel();
        });
        assert_eq!(result.unwrap_err().kind, ErrorKind::Cancelled);
        assert_eq!(*retrying.inner.attempts.lock().unwrap(), 1);
    }

    #[test]
    fn delays_double_with_jitter_up_to_the_cap_and_honour_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            max_retry_after: Duration::from_secs(60),
        };
        let plain = ProviderError::new(ErrorKind::Server, "busy");
        for (retry, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let full = Duration::from_millis(full);
            for _ in 0..20 {
                let delay = policy.delay(retry, &plain);
                assert!(
                    delay >= full / 2 && delay <= full,
                    "retry {retry}: {delay:?}"
                );
            }
        }
        let mut limited = ProviderError::new(ErrorKind::RateLimited, "slow down");
        limited.retry_after = Some(Duration::from_secs(7));
        assert_eq!(policy.delay(1, &limited), Duration::from_secs(7));
        limited.retry_after = Some(Duration::from_secs(3600));
        assert_eq!(policy.delay(1, &limited), Duration::from_secs(60));
    }
}
