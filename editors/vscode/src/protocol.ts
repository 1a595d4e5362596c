//! The wire types of pen's protocol (docs/protocol.md) that the extension uses.

export interface SessionInfo {
  sessionId: string;
  title?: string | null;
  createdAt: number;
  updatedAt: number;
  entryCount: number;
}

export interface ListSessionsResult {
  sessions: SessionInfo[];
  nextCursor?: string | null;
}

export type EntryKind = 'user_prompt' | 'assistant_message' | 'tool_call' | 'tool_result' | 'event';

/** One stored transcript entry; payloads are snake_case. */
export interface TranscriptEntry {
  seq: number;
  kind: EntryKind | string;
  turnId?: string | null;
  payload: Record<string, unknown>;
  createdAt?: number;
}

export interface GetTranscriptResult {
  sessionId: string;
  entries: TranscriptEntry[];
  nextAfterSeq?: number | null;
}

export interface PromptResult {
  sessionId: string;
  turnId: string;
  stopReason: string;
  lastError?: string | null;
  /** `history_unrepairable` when the session can never run a turn again: offer a new one. */
  errorKind?: string | null;
}

/** A `pen/event` notification. */
export interface PenEvent {
  sessionId: string;
  turnId?: string;
  seq?: number;
  kind: string;
  data: Record<string, unknown>;
}

/** The params of `pen/requestApproval` (and the data of `approval_requested`). */
export interface ApprovalParams {
  sessionId: string;
  turnId?: string;
  callId: string;
  tool: string;
  arguments?: Record<string, unknown>;
  diff?: string;
}

export type Decision = 'allow' | 'allow_for_session' | 'deny';

export interface ApprovalAnswer {
  decision: Decision;
  reason?: string;
}
