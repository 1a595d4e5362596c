//! An MCP server's tool as a turn calls it ([`crate::tools::Tool`]): it runs alone, asks the
//! owner unless `auto_approve` covers it, calls its server, and its result is capped with a
//! note that it cannot page.

use super::{McpTools, ToolInfo, auto_approved, observation};
use crate::tools::subject::Subject;
use crate::tools::{Prepared, Recorder, Tool, ToolError};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One tool of a turn's MCP servers, as the latest refresh of their lists has it.
struct ServerTool {
    tools: Arc<McpTools>,
    name: String,
    info: ToolInfo,
    /// The result cap (`max_tool_result_bytes`), as pen's own results are cut to.
    max_result_bytes: usize,
}

impl McpTools {
    /// The MCP tool the model calls `name`, its results cut to `max_result_bytes`. A tool of a
    /// server that is down now is still an MCP tool: its call says the server is down.
    pub fn get(self: &Arc<Self>, name: &str, max_result_bytes: usize) -> Option<Arc<dyn Tool>> {
        let info = self.tool(name)?;
        Some(Arc::new(ServerTool {
            tools: Arc::clone(self),
            name: name.to_string(),
            info,
            max_result_bytes,
        }))
    }
}

impl Tool for ServerTool {
    /// Never: its server's `readOnlyHint` is the server's word, which decides only whether
    /// `auto_approve`'s `mcp__server__*` covers it; a call runs alone.
    fn read_only(&self) -> bool {
        false
    }

    /// Like pen_command, unless `auto_approve` covers it (a server's `mcp__server__*` only for
    /// tools it says only read).
    fn needs_approval(&self, auto_approve: &[String]) -> bool {
        !auto_approved(auto_approve, &self.name, &self.info)
    }

    fn class(&self, _arguments: &Value) -> crate::mode::CallClass {
        crate::mode::CallClass::Mcp {
            read_only_hint: self.info.read_only_hint,
        }
    }

    fn subject(&self, arguments: &Value) -> Subject {
        Subject::of_arguments(arguments)
    }

    fn run(
        &self,
        call: Prepared,
        _recorder: Option<Recorder>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (arguments, _) = call.into_parts();
        self.tools.call(&self.name, arguments, cancel)
    }

    fn observe(&self, result: &Result<Value, ToolError>) -> String {
        observation(result, self.max_result_bytes)
    }
}
