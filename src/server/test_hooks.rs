//! The `pen/test/*` methods, served only when `PEN_TEST_HOOKS` is set: the integration tests use them
//! to reach states no client can (a panicking handler, a disk change the watcher saw).

use super::*;
use crate::limits::TEST_HOOK_WAIT;

/// Set to expose `pen/test/panic`, which the tests use to check that a panicking handler is
/// answered with an InternalError and the daemon keeps serving.
pub(super) const TEST_HOOKS_VAR: &str = "PEN_TEST_HOOKS";

impl Backend {
    pub(super) async fn test_panic(&self) -> jsonrpc::Result<Value> {
        panic!("pen/test/panic was called");
    }

    /// Waits (at most `TEST_HOOK_WAIT`) until the watcher has reported a change of `path` since the
    /// model read it; answers whether it did.
    pub(super) async fn test_await_disk_change(&self, params: Value) -> jsonrpc::Result<Value> {
        let path = params
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| jsonrpc::Error::invalid_params("path is required"))?;
        let path = crate::workspace::canonical(Path::new(path));
        let wait = async {
            loop {
                let notified = self.state.disk_changed.notified();
                if self.state.ledger.changed_on_disk(&path) {
                    return;
                }
                notified.await;
            }
        };
        let changed = tokio::time::timeout(TEST_HOOK_WAIT, wait).await.is_ok();
        Ok(serde_json::json!({ "changed": changed }))
    }

    /// Waits (at most `TEST_HOOK_WAIT`) until the disk watcher runs; answers its figures.
    pub(super) async fn test_watch_status(&self) -> jsonrpc::Result<Value> {
        let wait = async {
            loop {
                let notified = self.state.disk_changed.notified();
                let status = {
                    let guard = self.state.watcher.lock().unwrap_or_else(|p| p.into_inner());
                    guard.as_ref().map(|w| serde_json::json!({"watching": true, "watched": w.watched, "truncated": w.truncated}))
                };
                if let Some(status) = status {
                    return status;
                }
                notified.await;
            }
        };
        Ok(tokio::time::timeout(TEST_HOOK_WAIT, wait)
            .await
            .unwrap_or_else(|_| serde_json::json!({"watching": false})))
    }
}
