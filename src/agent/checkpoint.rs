//! The turn's side of checkpoints (SPEC §13): every write a tool makes in a turn is recorded
//! in the session's checkpoint store before it is made, under the turn's and the call's ids.

use std::sync::Arc;

use crate::session::SessionStore;
use crate::session::checkpoints::{Before, NewWrite};
use crate::tools::write::EditPlan;
use crate::tools::{PendingWrite, WriteRecorder};

/// Records the writes of one call of a turn.
pub struct TurnRecorder {
    pub store: Arc<SessionStore>,
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    /// `checkpoint_store_bytes`.
    pub limit: u64,
}

/// What the owner is told when a write's pre-image will not be kept.
fn too_large(size: u64, limit: u64) -> String {
    format!(
        "not revertible: too large (the file is {size} bytes and the session's checkpoints may \
         hold {limit} bytes, checkpoint_store_bytes); a revert will not restore it"
    )
}

impl TurnRecorder {
    /// The approval request's note for `plan` when its pre-image would not be stored.
    pub async fn not_revertible(&self, plan: &EditPlan) -> Option<String> {
        let store = Arc::clone(&self.store);
        let session_id = self.session_id.clone();
        let before = plan.before_bytes().to_vec();
        let limit = self.limit;
        let fits =
            tokio::task::spawn_blocking(move || store.checkpoint_fits(&session_id, &before, limit))
                .await;
        match fits {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => Some(too_large(plan.planned_len(), self.limit)),
            Ok(Err(e)) => Some(format!("not revertible: the checkpoint store failed ({e})")),
            Err(e) => Some(format!("not revertible: the checkpoint store failed ({e})")),
        }
    }
}

impl WriteRecorder for TurnRecorder {
    fn before_write(&self, write: &PendingWrite<'_>) -> Result<(), String> {
        let path = write.absolute.to_string_lossy();
        let recorded = self
            .store
            .record_write(
                &self.session_id,
                &NewWrite {
                    turn_id: &self.turn_id,
                    call_id: &self.call_id,
                    tool: write.tool,
                    path: &path,
                    display: write.display,
                    before: write.before,
                    mode: write.mode,
                    after: write.after,
                },
                self.limit,
            )
            .map_err(|e| e.to_string())?;
        if let Before::TooLarge { size, .. } = recorded {
            tracing::info!(path = %path, size, "{}", too_large(size, self.limit));
        }
        Ok(())
    }
}
