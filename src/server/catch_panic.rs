//! One tower layer that turns a panic in any handler into an InternalError answer.

use super::*;

/// Catches a panic in any handler and answers the request with an InternalError, so one bad
/// request never takes the daemon down.
pub(super) struct CatchPanic<S>(pub(super) S);

impl<S> Service<Request> for CatchPanic<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Option<Response>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Option<Response>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let id = request.id().cloned();
        let method = request.method().to_string();
        let future = AssertUnwindSafe(self.0.call(request)).catch_unwind();
        Box::pin(async move {
            match future.await {
                Ok(result) => result,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(%method, "handler panicked: {what}");
                    Ok(id.map(|id| {
                        Response::from_error(
                            id,
                            internal(&format!("pen failed while handling {method}: {what}")),
                        )
                    }))
                }
            }
        })
    }
}
