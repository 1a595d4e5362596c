//! ACP's checkpoint extension methods (SPEC §13), named by ACP's rule for extensions (a leading
//! underscore): `_pen/revertTurn` and `_pen/forkSession`, with pen/revertTurn's and
//! pen/forkSession's params and results. A revert changes files the client has open through its
//! file system (`fs/write_text_file`) when it offers one, as a turn's writes do.

use super::*;
use crate::checkpoint::{self, CheckpointError, Scope};
use crate::protocol::{ForkSessionParams, ForkSessionResult, RevertTurnParams, RevertTurnResult};

/// The extension method that reverts a turn and every later one.
pub const REVERT_TURN: &str = "_pen/revertTurn";
/// The extension method that forks a session before a turn.
pub const FORK_SESSION: &str = "_pen/forkSession";

fn rpc_error(error: CheckpointError) -> RpcError {
    match error {
        CheckpointError::Store(SessionError::NotFound(id)) => {
            AcpError::Session(SessionError::NotFound(id)).into()
        }
        CheckpointError::Store(err @ SessionError::NoSuchTurn { .. }) => {
            RpcError::invalid_params(err.to_string())
        }
        CheckpointError::Busy(message) => RpcError::new(rpc::INVALID_REQUEST, message),
        other => RpcError::new(rpc::INTERNAL_ERROR, other.to_string()),
    }
}

impl AgentState {
    /// `_pen/revertTurn`: the session must be open on this connection (its workspace is the
    /// session's cwd).
    pub(super) async fn revert_turn(
        &self,
        params: RevertTurnParams,
    ) -> Result<RevertTurnResult, RpcError> {
        let session = self.session(&params.session_id)?;
        let engine = self.engine.clone().map_err(AcpError::NoStore)?;
        let scope = Scope {
            store: Arc::clone(engine.store()),
            workspace: session.workspace.clone(),
            limits: self.config.limits(),
            editor: session
                .files
                .clone()
                .map(|files| files as Arc<dyn tools::Editor + Send + Sync>),
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

    /// `_pen/forkSession`: any stored session; the fork is loaded with `session/load`.
    pub(super) async fn fork_session(
        &self,
        params: ForkSessionParams,
    ) -> Result<ForkSessionResult, RpcError> {
        let engine = self.engine.clone().map_err(AcpError::NoStore)?;
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
