//! `pen/revertTurn` and `pen/forkSession` (SPEC §13): thin front ends over `checkpoint`, which
//! claims the session (refused while a turn runs there) and reverts through the editor.

use super::*;
use crate::checkpoint::{self, CheckpointError, Scope};
use crate::protocol::{ForkSessionParams, ForkSessionResult, RevertTurnParams, RevertTurnResult};

/// The JSON-RPC error code of a revert or fork refused while a turn runs (as `pen/prompt`'s).
const SESSION_BUSY: i64 = -32001;

fn rpc_error(error: CheckpointError) -> jsonrpc::Error {
    match error {
        CheckpointError::Busy(message) => jsonrpc::Error {
            code: jsonrpc::ErrorCode::ServerError(SESSION_BUSY),
            message: message.into(),
            data: Some(serde_json::json!({"kind": agent::TurnErrorKind::SessionBusy.as_str()})),
        },
        CheckpointError::Store(
            err @ (SessionError::NotFound(_) | SessionError::NoSuchTurn { .. }),
        ) => jsonrpc::Error::invalid_params(err.to_string()),
        other => internal(&other.to_string()),
    }
}

impl Backend {
    pub(super) async fn revert_turn(
        &self,
        params: RevertTurnParams,
    ) -> jsonrpc::Result<RevertTurnResult> {
        let engine = self.engine()?;
        let editor: Arc<dyn tools::Editor + Send + Sync> = self.state.clone();
        let scope = Scope {
            store: Arc::clone(engine.store()),
            workspace: self.state.current_workspace().map_err(|e| internal(&e))?,
            limits: read(&self.state.config).limits(),
            editor: Some(editor),
        };
        let report = checkpoint::revert_turn(
            &engine,
            scope,
            &params.session_id,
            &params.turn_id,
            params.force.unwrap_or(false),
        )
        .await
        .map_err(rpc_error)?;
        Ok(RevertTurnResult::new(&params.session_id, report))
    }

    pub(super) async fn fork_session(
        &self,
        params: ForkSessionParams,
    ) -> jsonrpc::Result<ForkSessionResult> {
        let engine = self.engine()?;
        let forked = checkpoint::fork_session(&engine, &params.session_id, &params.before_turn_id)
            .await
            .map_err(rpc_error)?;
        Ok(ForkSessionResult {
            session_id: forked,
            forked_from: params.session_id,
            before_turn_id: params.before_turn_id,
        })
    }
}
