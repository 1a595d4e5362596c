--- pen's protocol names, generated from the Rust types (src/protocol.rs); do not edit.
--- Update: PEN_UPDATE_GENERATED=1 cargo test --lib protocol::codegen
--- Every method name and enum value the plugin compares against comes from here.
local M = {}

M.methods = {
  CALL_TOOL = 'pen/callTool',
  LIST_TOOLS = 'pen/listTools',
  GET_CONFIG = 'pen/getConfig',
  SET_CONFIG = 'pen/setConfig',
  NEW_SESSION = 'pen/newSession',
  LIST_SESSIONS = 'pen/listSessions',
  GET_TRANSCRIPT = 'pen/getTranscript',
  PROMPT = 'pen/prompt',
  STOP = 'pen/stop',
  MCP_STATUS = 'pen/mcpStatus',
  REVERT_TURN = 'pen/revertTurn',
  FORK_SESSION = 'pen/forkSession',
  GET_SESSION_CONTEXT = 'pen/getSessionContext',
  EVENT = 'pen/event',
  REQUEST_APPROVAL = 'pen/requestApproval',
}

M.stop_reason = {
  END_TURN = 'end_turn',
  CANCELLED = 'cancelled',
  MAX_TURN_REQUESTS = 'max_turn_requests',
  ERROR = 'error',
}

M.error_kind = {
  CONTEXT_WINDOW = 'context_window',
  AUTH = 'auth',
  RATE_LIMIT = 'rate_limit',
  NETWORK = 'network',
  PROVIDER_BAD_REQUEST = 'provider_bad_request',
  NO_PROVIDER = 'no_provider',
  BUDGET_TOO_LARGE = 'budget_too_large',
  HISTORY_UNREPAIRABLE = 'history_unrepairable',
  SESSION_BUSY = 'session_busy',
  STORE = 'store',
}

M.call_outcome = {
  DONE = 'done',
  ERROR = 'error',
  DENIED = 'denied',
  STALE_AUTHORITY = 'stale_authority',
  NOT_EXECUTED = 'not_executed',
  INTERRUPTED = 'interrupted',
  UNKNOWN = 'unknown',
}

M.event_kind = {
  TEXT_DELTA = 'text_delta',
  TOOL_CALL_STARTED = 'tool_call_started',
  APPROVAL_REQUESTED = 'approval_requested',
  APPROVAL_WITHDRAWN = 'approval_withdrawn',
  TOOL_CALL_FINISHED = 'tool_call_finished',
  CONTEXT_TRIMMED = 'context_trimmed',
  USAGE = 'usage',
  MCP_SERVER = 'mcp_server',
  INSTRUCTIONS_CHANGED = 'instructions_changed',
  CONTEXT_WINDOW = 'context_window',
  PROVIDER_WARNING = 'provider_warning',
  PLAN = 'plan',
  TURN_ENDED = 'turn_ended',
}

M.entry_kind = {
  USER_PROMPT = 'user_prompt',
  ASSISTANT_MESSAGE = 'assistant_message',
  TOOL_CALL = 'tool_call',
  TOOL_RESULT = 'tool_result',
  TURN_ENDED = 'turn_ended',
  CONTEXT_TRIMMED = 'context_trimmed',
  CONTEXT_WINDOW_REJECTED = 'context_window_rejected',
  TOOL_ALLOWED_FOR_SESSION = 'tool_allowed_for_session',
  PLAN = 'plan',
  CONTEXT_WINDOW = 'context_window',
  PROVIDER_WARNING = 'provider_warning',
  INSTRUCTIONS_CHANGED = 'instructions_changed',
  SESSION_CONTEXT = 'session_context',
  INSTRUCTIONS_DELIVERED = 'instructions_delivered',
  CONTEXT_COMPACTED = 'context_compacted',
  REVERT_STARTED = 'revert_started',
  FILES_REVERTED = 'files_reverted',
  EVENT = 'event',
}

M.trim_reason = {
  BUDGET = 'budget',
  CONTEXT_WINDOW_EXCEEDED = 'context_window_exceeded',
}

M.decision = {
  ALLOW = 'allow',
  ALLOW_FOR_SESSION = 'allow_for_session',
  DENY = 'deny',
}

M.approval_kind = {
  TOOL_CALL = 'tool_call',
  START_MCP_SERVER = 'start_mcp_server',
}

M.file_status = {
  REVERTED = 'reverted',
  DELETED = 'deleted',
  UNCHANGED = 'unchanged',
  CONFLICT = 'conflict',
  NOT_REVERTIBLE = 'not_revertible',
  NOT_REVERTED = 'not_reverted',
}

M.mcp_server_state = {
  IDLE = 'idle',
  STARTING = 'starting',
  RUNNING = 'running',
  FAILED = 'failed',
  NOT_APPROVED = 'not_approved',
  DENIED = 'denied',
  REFUSED = 'refused',
  DISABLED = 'disabled',
}

M.window_source = {
  CONFIG = 'config',
  LLAMA_CPP_PROPS = 'llama_cpp_props',
  OLLAMA_SHOW = 'ollama_show',
  VLLM_MODELS = 'vllm_models',
  LM_STUDIO_MODELS = 'lm_studio_models',
  HOSTED_TABLE = 'hosted_table',
  DEFAULT = 'default',
}

M.tool_kind = {
  READ = 'read',
  EDIT = 'edit',
  SEARCH = 'search',
  EXECUTE = 'execute',
  OTHER = 'other',
}

M.plan_step_status = {
  PENDING = 'pending',
  IN_PROGRESS = 'in_progress',
  DONE = 'done',
}

for name, values in pairs(M) do
  setmetatable(values, { __index = function(_, key)
    error(('pen.protocol.%s has no %s'):format(name, tostring(key)), 2)
  end })
end

return M
