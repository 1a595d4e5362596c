//! The tool host of a turn: the native tools over a workspace, its limits, the session's read
//! ledger and, under the daemon, the editor's open documents.

use super::ToolHost;
use crate::limits::Limits;
use crate::tools::{self, Editor, ReadLedger, ToolContext, ToolError};
use crate::workspace::Workspace;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs tools for a turn.
pub struct LocalTools {
    pub workspace: Workspace,
    pub limits: Limits,
    pub ledger: Arc<ReadLedger>,
    pub editor: Option<Arc<dyn Editor + Send + Sync>>,
}

impl LocalTools {
    fn context(&self) -> ToolContext<'_> {
        ToolContext {
            workspace: &self.workspace,
            limits: &self.limits,
            ledger: Some(&self.ledger),
            editor: self.editor.as_deref().map(|e| e as &dyn Editor),
        }
    }
}

impl ToolHost for LocalTools {
    fn call(&self, name: &str, arguments: &Value) -> Result<Value, ToolError> {
        tools::call(name, arguments, &self.context())
    }

    fn command(
        &self,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let workspace = self.workspace.clone();
        let limits = self.limits.clone();
        Box::pin(async move {
            let args = tools::parse_arguments(&arguments)?;
            let ctx = ToolContext {
                workspace: &workspace,
                limits: &limits,
                ledger: None,
                editor: None,
            };
            tools::command::run(args, &ctx, &cancel).await
        })
    }

    fn preview_edit(&self, arguments: &Value) -> Result<(String, String), ToolError> {
        let args = tools::parse_arguments(arguments)?;
        let (value, hash) = tools::write::preview(args, &self.context())?;
        Ok((value["diff"].as_str().unwrap_or_default().to_string(), hash))
    }

    fn observation(&self, result: &Result<Value, ToolError>) -> String {
        tools::observation(result, &self.limits)
    }
}
