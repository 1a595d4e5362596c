//! Generated from pen's Rust protocol types (src/protocol.rs) by ts-rs; do not edit.
//! Update: PEN_UPDATE_GENERATED=1 cargo test --lib protocol::codegen

export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]?: JsonValue } | null;

/** The `pen/…` methods. */
export const METHODS = {
  CALL_TOOL: 'pen/callTool',
  LIST_TOOLS: 'pen/listTools',
  GET_CONFIG: 'pen/getConfig',
  SET_CONFIG: 'pen/setConfig',
  NEW_SESSION: 'pen/newSession',
  LIST_SESSIONS: 'pen/listSessions',
  GET_TRANSCRIPT: 'pen/getTranscript',
  PROMPT: 'pen/prompt',
  STOP: 'pen/stop',
  MCP_STATUS: 'pen/mcpStatus',
  REVERT_TURN: 'pen/revertTurn',
  FORK_SESSION: 'pen/forkSession',
  GET_SESSION_CONTEXT: 'pen/getSessionContext',
  EVENT: 'pen/event',
  REQUEST_APPROVAL: 'pen/requestApproval',
} as const;

export const STOP_REASONS = ['end_turn', 'cancelled', 'max_turn_requests', 'error'] as const;

export const TURN_ERROR_KINDS = ['context_window', 'auth', 'rate_limit', 'network', 'provider_bad_request', 'no_provider', 'budget_too_large', 'history_unrepairable', 'session_busy', 'store'] as const;

export const CALL_OUTCOMES = ['done', 'error', 'denied', 'stale_authority', 'not_executed', 'interrupted', 'unknown'] as const;

export const EVENT_KINDS = ['text_delta', 'tool_call_started', 'approval_requested', 'approval_withdrawn', 'tool_call_finished', 'context_trimmed', 'usage', 'mcp_server', 'instructions_changed', 'context_window', 'provider_warning', 'plan', 'turn_ended'] as const;

export const ENTRY_KINDS = ['user_prompt', 'assistant_message', 'tool_call', 'tool_result', 'turn_ended', 'context_trimmed', 'context_window_rejected', 'tool_allowed_for_session', 'plan', 'context_window', 'provider_warning', 'instructions_changed', 'session_context', 'instructions_delivered', 'context_compacted', 'revert_started', 'files_reverted', 'event'] as const;

export const TRIM_REASONS = ['budget', 'context_window_exceeded'] as const;

export const DECISIONS = ['allow', 'allow_for_session', 'deny'] as const;

export const APPROVAL_KINDS = ['tool_call', 'start_mcp_server'] as const;

export const FILE_STATUSES = ['reverted', 'deleted', 'unchanged', 'conflict', 'not_revertible', 'not_reverted'] as const;

export const MCP_SERVER_STATES = ['idle', 'starting', 'running', 'failed', 'not_approved', 'denied', 'refused', 'disabled'] as const;

export const WINDOW_SOURCES = ['config', 'llama_cpp_props', 'ollama_show', 'vllm_models', 'lm_studio_models', 'hosted_table', 'default'] as const;

export const TOOL_KINDS = ['read', 'edit', 'search', 'execute', 'other'] as const;

export const PLAN_STEP_STATUSES = ['pending', 'in_progress', 'done'] as const;

/**
 * How a tool call ended: the `status` of its stored result, the `state` of its
 * `tool_call_finished` event.
 */
export type CallOutcome = "done" | "error" | "denied" | "stale_authority" | "not_executed" | "interrupted" | "unknown";

/**
 * Why a turn ended.
 */
export type StopReason = "end_turn" | "cancelled" | "max_turn_requests" | "error";

/**
 * What kind of failure ended a turn with `error`: the clients choose their actions from it
 * (a new session, the provider settings, a retry), never from the wording of `last_error`.
 */
export type TurnErrorKind = "context_window" | "auth" | "rate_limit" | "network" | "provider_bad_request" | "no_provider" | "budget_too_large" | "history_unrepairable" | "session_busy" | "store";

/**
 * The owner's decision, as the client sends it.
 */
export type Decision = "allow" | "allow_for_session" | "deny";

/**
 * Why the model stopped answering.
 */
export type FinishReason = "end_turn" | "tool_use" | "max_tokens" | "other";

/**
 * Where an MCP server is in its life.
 */
export type McpServerState = "idle" | "starting" | "running" | "failed" | "not_approved" | "denied" | "refused" | "disabled";

/**
 * `pen/mcpStatus` answer: each MCP server's status, for the panels.
 */
export type McpStatusResponse = { servers: Array<McpServerStatus>, };

/**
 * One MCP server's status.
 */
export type McpServerStatus = { name: string, status: McpServerState, 
/**
 * Why it is not running (with the tail of its stderr), when it is not.
 */
reason: string | null, toolCount: number, 
/**
 * About how many tokens its tools' schemas add to every request.
 */
schemaTokens: number, 
/**
 * Whether it comes from the workspace's `.mcp.json`.
 */
project: boolean, };

/**
 * `pen/callTool` params: one native tool, no model.
 */
export type CallToolParams = { name: string, arguments: JsonValue, };

/**
 * `pen/newSession` params.
 */
export type NewSessionParams = { title?: string, };

/**
 * `pen/listSessions` params.
 */
export type ListSessionsParams = { cursor?: string, limit?: number, 
/**
 * List sessions with no work in them too (entries but no assistant message: a first
 * prompt whose provider failed). Default false.
 */
includeEmpty?: boolean, };

/**
 * A session as the protocol shows it.
 */
export type SessionSummary = { sessionId: string, title: string | null, 
/**
 * Unix milliseconds.
 */
createdAt: number, updatedAt: number, entryCount: number, };

/**
 * `pen/listSessions` result.
 */
export type ListSessionsResponse = { sessions: Array<SessionSummary>, nextCursor?: string, };

/**
 * `pen/getTranscript` params.
 */
export type GetTranscriptParams = { sessionId: string, afterSeq?: number, limit?: number, };

/**
 * `pen/getTranscript` result.
 */
export type TranscriptResponse = { sessionId: string, entries: Array<TranscriptRecord>, nextAfterSeq?: number, };

/**
 * `pen/revertTurn` params: revert `turnId` and every later turn of the session (SPEC §13).
 */
export type RevertTurnParams = { sessionId: string, turnId: string, 
/**
 * Also overwrite files that changed after pen wrote them (the conflicts).
 */
force?: boolean, };

/**
 * What a revert made of one file.
 */
export type FileStatus = "reverted" | "deleted" | "unchanged" | "conflict" | "not_revertible" | "not_reverted";

/**
 * One file of a revert.
 */
export type RevertedFileReport = { path: string, status: FileStatus, 
/**
 * The turns that wrote it, newest first.
 */
turns: Array<string>, 
/**
 * For a conflict: the diff from what the file holds to what `force` would make it.
 */
diff?: string, reason?: string, };

/**
 * A call of the reverted turns whose effects were not reverted (a command, an MCP tool).
 */
export type UnrevertedCall = { turnId: string, tool: string, summary: string, };

/**
 * An earlier revert of the session that a crash stopped, as the next revert found it.
 */
export type InterruptedRevertReport = { 
/**
 * Its turns, newest first.
 */
turns: Array<string>, 
/**
 * Each of its files as it stood: unchanged (reverted), not reverted (still as the turns
 * left it) or a conflict (changed since).
 */
files: Array<RevertedFileReport>, 
/**
 * What the model is told with its next prompt.
 */
note: string, };

/**
 * `pen/revertTurn` result.
 */
export type RevertTurnResult = { sessionId: string, 
/**
 * The reverted turns, newest first (the order they were undone in).
 */
turns: Array<string>, files: Array<RevertedFileReport>, 
/**
 * Their effects were not reverted.
 */
commands: Array<UnrevertedCall>, 
/**
 * What the model is told with its next prompt.
 */
note: string, 
/**
 * An earlier revert of the session that a crash stopped (`kill -9`, a power cut), which
 * this one found open and closed first.
 */
interrupted?: InterruptedRevertReport, 
/**
 * Turns a fork copied from its original session without their checkpoints (a fork made
 * by an earlier pen): their files were not reverted (revert them in the original).
 */
withoutCheckpoints?: Array<string>, };

/**
 * `pen/forkSession` params: a new session whose history is the original's before
 * `beforeTurnId`.
 */
export type ForkSessionParams = { sessionId: string, beforeTurnId: string, };

/**
 * `pen/forkSession` result.
 */
export type ForkSessionResult = { 
/**
 * The new session.
 */
sessionId: string, forkedFrom: string, beforeTurnId: string, };

/**
 * One entry of `pen/getTranscript`: its place in the session and its typed content, tagged
 * `kind`/`data` in camelCase like a `pen/event`. The kinds a live turn also reports
 * (`turn_ended`, `context_trimmed`) carry the very data type of that event, and a stored call
 * or result carries the fields of `tool_call_started` / `tool_call_finished`, so a client
 * renders stored and live entries with one code path.
 */
export type TranscriptRecord = { seq: number, turnId?: string, 
/**
 * Unix milliseconds.
 */
createdAt: number, } & ({ "kind": "user_prompt", "data": { text: string, } } | { "kind": "assistant_message", "data": { text: string, toolCalls: Array<AssistantCall>, finishReason: FinishReason | null, usage: Usage | null, 
/**
 * The model that answered.
 */
model: string | null, 
/**
 * The uncalibrated token estimate of the request this answers.
 */
estimatedInputTokens: number | null, } } | { "kind": "tool_call", "data": { callId: string, tool: string, 
/**
 * What the call works on, in a line, as `tool_call_started` has it.
 */
summary: string, 
/**
 * What the tool does, as `tool_call_started` has it.
 */
toolKind: ToolKind, 
/**
 * The parsed arguments, or the model's raw text when it was not JSON.
 */
arguments: JsonValue, } } | { "kind": "tool_result", "data": { callId: string, tool: string | null, 
/**
 * `done` or `error` (from `isError`) for a result an older pen stored without one.
 */
state: CallOutcome, isError: boolean, content: string, } } | { "kind": "turn_ended", "data": TurnOutcome } | { "kind": "context_trimmed", "data": TrimmedData } | { "kind": "context_window_rejected", "data": { model: string, estimatedTokens: number, reason: string, } } | { "kind": "tool_allowed_for_session", "data": { tool: string, } } | { "kind": "plan", "data": PlanData } | { "kind": "context_window", "data": ContextWindowData } | { "kind": "provider_warning", "data": { message: string, } } | { "kind": "instructions_changed", "data": { files: Array<InstructionFileInfo>, } } | { "kind": "session_context", "data": { instructions: Array<InstructionFileInfo>, environment: string, } } | { "kind": "instructions_delivered", "data": { callId: string, files: Array<InstructionFileInfo>, } } | { "kind": "context_compacted", "data": { policyVersion: number, droppedCount: number, excerptedThrough: string | null, omittedThrough: string | null, budget: number, lowWater: number, } } | { "kind": "revert_started", "data": { turns: Array<string>, files: Array<string>, } } | { "kind": "files_reverted", "data": { turns: Array<string>, files: Array<RevertedFileStatus>, note: string, interrupted: boolean, } } | { "kind": "event", "data": JsonValue });

/**
 * The `kind` of a [`TranscriptRecord`] and its `data`.
 */
export type EntryBody = { "kind": "user_prompt", "data": { text: string, } } | { "kind": "assistant_message", "data": { text: string, toolCalls: Array<AssistantCall>, finishReason: FinishReason | null, usage: Usage | null, 
/**
 * The model that answered.
 */
model: string | null, 
/**
 * The uncalibrated token estimate of the request this answers.
 */
estimatedInputTokens: number | null, } } | { "kind": "tool_call", "data": { callId: string, tool: string, 
/**
 * What the call works on, in a line, as `tool_call_started` has it.
 */
summary: string, 
/**
 * What the tool does, as `tool_call_started` has it.
 */
toolKind: ToolKind, 
/**
 * The parsed arguments, or the model's raw text when it was not JSON.
 */
arguments: JsonValue, } } | { "kind": "tool_result", "data": { callId: string, tool: string | null, 
/**
 * `done` or `error` (from `isError`) for a result an older pen stored without one.
 */
state: CallOutcome, isError: boolean, content: string, } } | { "kind": "turn_ended", "data": TurnOutcome } | { "kind": "context_trimmed", "data": TrimmedData } | { "kind": "context_window_rejected", "data": { model: string, estimatedTokens: number, reason: string, } } | { "kind": "tool_allowed_for_session", "data": { tool: string, } } | { "kind": "plan", "data": PlanData } | { "kind": "context_window", "data": ContextWindowData } | { "kind": "provider_warning", "data": { message: string, } } | { "kind": "instructions_changed", "data": { files: Array<InstructionFileInfo>, } } | { "kind": "session_context", "data": { instructions: Array<InstructionFileInfo>, environment: string, } } | { "kind": "instructions_delivered", "data": { callId: string, files: Array<InstructionFileInfo>, } } | { "kind": "context_compacted", "data": { policyVersion: number, droppedCount: number, excerptedThrough: string | null, omittedThrough: string | null, budget: number, lowWater: number, } } | { "kind": "revert_started", "data": { turns: Array<string>, files: Array<string>, } } | { "kind": "files_reverted", "data": { turns: Array<string>, files: Array<RevertedFileStatus>, note: string, interrupted: boolean, } } | { "kind": "event", "data": JsonValue };

/**
 * A file of a stored revert and what became of it.
 */
export type RevertedFileStatus = { path: string, 
/**
 * `null` when it is not known: a revert a crash stopped, closed by the next turn without
 * a look at its files (or a status a newer pen stored).
 */
status: FileStatus | null, };

/**
 * A tool call inside an answer, as it was made.
 */
export type AssistantCall = { id: string, name: string, 
/**
 * The arguments as the model wrote them (JSON text, or not).
 */
arguments: string, };

/**
 * Token usage as the provider reported it, normalised (see [`providers::Usage`]):
 * `inputTokens` is the whole prompt, of which `cacheReadTokens` came from the provider's cache
 * and `cacheWriteTokens` were written to it; each optional count is absent when the provider
 * did not report it.
 */
export type Usage = { inputTokens: number, outputTokens: number, cacheReadTokens?: number, cacheWriteTokens?: number, reasoningTokens?: number, };

/**
 * `pen/prompt` params: run one turn of the agent in a session.
 */
export type PromptParams = { sessionId: string, text: string, 
/**
 * What the owner has in view: it goes into this prompt (append-only), read from the
 * editor's buffer where the file is open.
 */
context?: PromptContext, };

/**
 * The editor's focus sent with a prompt. Lines are 1-based and inclusive.
 */
export type PromptContext = { 
/**
 * The active file: an absolute path, or one relative to the workspace.
 */
activeFile?: string, 
/**
 * The selection in the active file; without `text`, pen reads those lines (from the
 * editor's buffer when the file is open).
 */
selection?: PromptSelection, 
/**
 * The active file's ranges on screen.
 */
visibleRanges?: Array<LineRange>, };

/**
 * A selection: its lines and, optionally, its text as the editor has it.
 */
export type PromptSelection = { startLine: number, endLine: number, text?: string, };

/**
 * A range of lines, 1-based and inclusive.
 */
export type LineRange = { startLine: number, endLine: number, };

/**
 * `pen/getSessionContext` params.
 */
export type GetSessionContextParams = { sessionId: string, };

/**
 * `pen/getSessionContext` result: the instructions and environment the session's requests
 * carry. `recorded` is false for a session that ran no turn yet: then they are what its first
 * turn would read now.
 */
export type SessionContextResponse = { sessionId: string, recorded: boolean, 
/**
 * The root instruction files in the system part (as recorded at the session's start).
 */
instructions: Array<InstructionFileInfo>, 
/**
 * The root instruction files as the latest `instructions_changed` note gave them, when
 * one changed during the session.
 */
changed?: Array<InstructionFileInfo>, 
/**
 * The nested instruction files delivered with tool results so far.
 */
delivered: Array<InstructionFileInfo>, 
/**
 * The environment block as sent.
 */
environment: string, 
/**
 * The text of the system part's instructions, as sent.
 */
instructionsText: string, };

/**
 * One project instruction file a session uses: its path (as tools show paths), its size, and
 * whether the budget cut it or pen refused it (`refused` says why).
 */
export type InstructionFileInfo = { path: string, bytes: number, cut: boolean, refused?: string, };

/**
 * `pen/prompt` result, sent when the turn ends.
 */
export type PromptResponse = { sessionId: string, turnId: string, stopReason: StopReason, lastError?: string, 
/**
 * What kind of failure ended the turn, for a client to act on (a new session for
 * `history_unrepairable`, the provider settings for `auth` …).
 */
errorKind?: TurnErrorKind | null, 
/**
 * The turn's usage: its requests' reported usage, summed.
 */
usage?: Usage, 
/**
 * The session's usage so far, this turn included.
 */
sessionUsage?: Usage, };

/**
 * How a turn ended, as the `turn_ended` event and `pen run --json`'s last line carry it, with
 * the turn's and the session's usage (absent when no request reported any, and in turns an
 * older pen stored).
 */
export type TurnOutcome = { stopReason: StopReason, lastError: string | null, errorKind: TurnErrorKind | null, usage?: Usage, sessionUsage?: Usage, };

/**
 * `usage` data: one provider request's usage, with its turn's and its session's totals so
 * far.
 */
export type UsageData = { 
/**
 * The model that answered.
 */
model: string, request: Usage, turn: Usage, session: Usage, };

/**
 * `pen/stop` params.
 */
export type StopParams = { sessionId: string, };

/**
 * `pen/stop` result: whether a running turn was told to stop.
 */
export type StopResponse = { stopped: boolean, };

/**
 * `pen/event` params: one progress event of a turn.
 */
export type EventParams = { sessionId: string, turnId: string, seq: number, } & ({ "kind": "text_delta", "data": { text: string, } } | { "kind": "tool_call_started", "data": { callId: string, tool: string, 
/**
 * What the call works on, in a line (`a.txt lines 10–60`, `cargo test`), as its tool
 * computes it: the editors show it as it is. Empty when the arguments name nothing.
 */
summary: string, 
/**
 * What the tool does (an MCP tool's is `other`): an editor's icon or grouping.
 */
toolKind: ToolKind, 
/**
 * `null` when the model's arguments were not JSON.
 */
arguments: JsonValue | null, } } | { "kind": "approval_requested", "data": ApprovalParams } | { "kind": "approval_withdrawn", "data": { callId: string, } } | { "kind": "tool_call_finished", "data": { callId: string, tool: string, state: CallOutcome, isError: boolean, excerpt: string, } } | { "kind": "context_trimmed", "data": TrimmedData } | { "kind": "usage", "data": UsageData } | { "kind": "mcp_server", "data": { server: string, state: McpServerState, reason: string | null, } } | { "kind": "instructions_changed", "data": { files: Array<InstructionFileInfo>, } } | { "kind": "context_window", "data": ContextWindowData } | { "kind": "provider_warning", "data": { message: string, } } | { "kind": "plan", "data": PlanData } | { "kind": "turn_ended", "data": TurnOutcome });

/**
 * The `kind` of a `pen/event` and its `data`.
 */
export type EventBody = { "kind": "text_delta", "data": { text: string, } } | { "kind": "tool_call_started", "data": { callId: string, tool: string, 
/**
 * What the call works on, in a line (`a.txt lines 10–60`, `cargo test`), as its tool
 * computes it: the editors show it as it is. Empty when the arguments name nothing.
 */
summary: string, 
/**
 * What the tool does (an MCP tool's is `other`): an editor's icon or grouping.
 */
toolKind: ToolKind, 
/**
 * `null` when the model's arguments were not JSON.
 */
arguments: JsonValue | null, } } | { "kind": "approval_requested", "data": ApprovalParams } | { "kind": "approval_withdrawn", "data": { callId: string, } } | { "kind": "tool_call_finished", "data": { callId: string, tool: string, state: CallOutcome, isError: boolean, excerpt: string, } } | { "kind": "context_trimmed", "data": TrimmedData } | { "kind": "usage", "data": UsageData } | { "kind": "mcp_server", "data": { server: string, state: McpServerState, reason: string | null, } } | { "kind": "instructions_changed", "data": { files: Array<InstructionFileInfo>, } } | { "kind": "context_window", "data": ContextWindowData } | { "kind": "provider_warning", "data": { message: string, } } | { "kind": "plan", "data": PlanData } | { "kind": "turn_ended", "data": TurnOutcome };

/**
 * `context_trimmed` data: a budget report, or the cut after a context-window rejection.
 */
export type TrimmedData = { "reason": "budget", policyVersion: number, excerptedCallIds: Array<string>, omittedCallIds: Array<string>, droppedExchanges: Array<[number, number]>, 
/**
 * How many older exchanges were left out (`droppedExchanges` joins adjacent ones).
 */
droppedCount: number, tokensBefore: number, tokensAfter: number, budget: number, } | { "reason": "context_window_exceeded", shrunkCallIds: Array<string>, headBytes: number, 
/**
 * The provider's words, in a stored entry (`pen/getTranscript`); live events have
 * none.
 */
providerMessage?: string, };

/**
 * `context_window` data: the window the session's requests to `model` are planned under from
 * here on, where it came from, and `line`, the one line to show.
 */
export type ContextWindowData = { model: string, tokens: number, source: WindowSource, line: string, 
/**
 * The most output tokens the model may produce, when the source says (the hosted table).
 */
maxOutputTokens?: number, 
/**
 * The window the model was trained on, when the server says (Ollama).
 */
trainedTokens?: number, 
/**
 * The server's chat template renders no tool definitions, so pen sends none.
 */
toolsDropped: boolean, };

/**
 * The data of a `plan` event and entry: the session's whole plan, in order, as the model last
 * set it (empty: cleared). An editor shows one checklist and replaces it with each.
 */
export type PlanData = { steps: Array<PlanStepInfo>, };

/**
 * One step of the session's plan.
 */
export type PlanStepInfo = { text: string, status: PlanStepStatus, };

/**
 * Where a step of the session's plan stands.
 */
export type PlanStepStatus = "pending" | "in_progress" | "done";

/**
 * Where a context window came from.
 */
export type WindowSource = "config" | "llama_cpp_props" | "ollama_show" | "vllm_models" | "lm_studio_models" | "hosted_table" | "default";

/**
 * What a tool does, as people are shown it (`tools::registry::ToolKind` on the wire).
 */
export type ToolKind = "read" | "edit" | "search" | "execute" | "other";

/**
 * `pen/requestApproval` params: what the owner is asked to approve, tagged `kind`.
 */
export type ApprovalParams = { "kind": "tool_call", sessionId: string, turnId: string, callId: string, tool: string, 
/**
 * What the call works on, in a line, as its tool computes it: the editors show it
 * as it is.
 */
summary: string, 
/**
 * What the tool does, as `tool_call_started` has it.
 */
toolKind: ToolKind, arguments: JsonValue, 
/**
 * For pen_edit: the unified diff the edit would make.
 */
diff?: string, 
/**
 * Set when the write will not be revertible (its file is over the session's
 * checkpoint store limit): `"not revertible: too large (…)"`.
 */
notRevertible?: string, } | { "kind": "start_mcp_server", sessionId: string, turnId: string, callId: string, server: string, commandLine: string, root: string, };

/**
 * The client's answer to `pen/requestApproval`: an object with a known `decision` and at most
 * a string `reason`, nothing else. Anything else fails to parse, and a failed answer is never
 * an allow (fail closed): an array (`["allow"]`, which serde would take field by field), a
 * string, `null`, an unknown decision or field, a `reason` that is not a string.
 */
export type ApprovalResponse = { decision: Decision, reason?: string, };

/** The kind of a `pen/event`. */
export type EventKind = EventBody['kind'];

/** The kind of a `pen/getTranscript` entry. */
export type EntryKind = EntryBody['kind'];
