//! The panel's model and the pure functions that reduce pen's events, stored transcript
//! entries and the owner's actions into it. The extension host owns the model and posts it to
//! the webview, which only renders; the unit tests cover this module.
//!
//! Every function returns a new model and never mutates its argument: an item whose content
//! changes is replaced by a copy with a higher `rev`, so the webview re-renders only those.

import { CALL_OUTCOMES } from './protocol.generated';
import type {
  ApprovalParams,
  CallOutcome,
  Decision,
  EntryBody,
  EventBody,
  EventParams,
  FileStatus,
  PlanStepInfo,
  PromptResponse,
  RevertTurnResult,
  SessionSummary,
  TranscriptRecord,
  TrimmedData,
  TurnErrorKind,
  Usage,
} from './protocol.generated';

/** The life of a tool call, as the card shows it: running, waiting, or how it ended. */
export type ToolState = 'running' | 'awaiting_approval' | CallOutcome;

/** Something the owner can do about a turn that ended in error; the extension runs it.
 * `retry` sends the turn's prompt again. */
export type TurnAction = 'setApiKey' | 'openSettings' | 'newSession' | 'retry' | 'showLog';

interface ItemBase {
  id: string;
  rev: number;
}

export interface UserItem extends ItemBase {
  kind: 'user';
  text: string;
}

/** The model's answer text (markdown), streamed or stored. */
export interface AnswerItem extends ItemBase {
  kind: 'answer';
  turnId: string | null;
  text: string;
}

export interface ToolItem extends ItemBase {
  kind: 'tool';
  callId: string;
  tool: string;
  /** What the call works on, in a line, as pen sends it (its tool computes it). */
  summary: string;
  state: ToolState;
  isError: boolean;
  /** The start of the result (or the error), for the expandable part of the card. */
  excerpt: string | null;
  /** For pen_edit: the unified diff pen showed when it asked. */
  diff: string | null;
  /** Set when the write would not be revertible (its file is over the checkpoint store). */
  notRevertible: string | null;
  /** True while pen waits for the owner's answer. */
  pendingApproval: boolean;
  /** The owner's answer, once given; `withdrawn` when Stop came first. */
  decision: Decision | 'withdrawn' | null;
}

/** A `context_trimmed` report: what was compacted and how many tokens it saved. */
export interface TrimItem extends ItemBase {
  kind: 'trim';
  title: string;
  detail: string;
}

export interface TurnEndItem extends ItemBase {
  kind: 'turnEnd';
  turnId: string | null;
  stopReason: string;
  lastError: string | null;
  /** What the error's kind means for the owner, when the buttons alone do not say it. */
  hint: string | null;
  actions: TurnAction[];
  /** The turn's usage in a line (input, cached share, output); null when none was reported. */
  usage: string | null;
}

/** What "Undo this turn's changes" did (`pen/revertTurn`): every file, the commands whose
 * effects were not reverted, and whether conflicts are left (then the owner may force). */
export interface RevertItem extends ItemBase {
  kind: 'revert';
  /** The turn the owner undid (the revert covers it and every later turn). */
  turnId: string;
  turns: string[];
  files: { path: string; status: FileStatus; diff: string | null; reason: string | null }[];
  commands: { tool: string; summary: string }[];
  /** True when some files are conflicts and the revert was not forced. */
  conflicts: boolean;
}

/** A note from the extension itself (the daemon restarted, a request failed). */
export interface NoteItem extends ItemBase {
  kind: 'note';
  level: 'info' | 'error';
  text: string;
}

export type Item = UserItem | AnswerItem | ToolItem | TrimItem | TurnEndItem | RevertItem | NoteItem;

export interface PanelModel {
  sessionId: string | null;
  sessions: SessionSummary[];
  items: Item[];
  /** True from the owner's prompt until pen answers `pen/prompt`. */
  running: boolean;
  /** What the running turn does now, for the panel's status line. */
  status: string;
  /** The turns whose end is rendered: `turn_ended` and the `pen/prompt` answer both report it. */
  endedTurns: string[];
  /** The session's usage so far in a line, from the last `usage` event or turn end; null
   * until one reports it. */
  sessionUsage: string | null;
  /** The editor focus the next prompt carries, as its chip shows it ("a.ts:3-9"); null when
   * there is none or the owner removed the chip. */
  focus: string | null;
  /** The instruction files the session uses, in a line ("AGENTS.md 1.2 KB (cut)"); null
   * when it has none. */
  instructions: string | null;
  /** The session's plan as pen last set it (each `plan` event or entry replaces the whole
   * list): one checklist, updated in place; null when there is none or it was cleared. */
  plan: PlanStepInfo[] | null;
  nextId: number;
}

/** A chip's label for the active file and its selection (lines 1-based, inclusive). */
export function focusLabel(file: string, selection: { startLine: number; endLine: number } | null): string {
  const name = file.split(/[\\/]/).pop() ?? file;
  return selection === null ? name : `${name}:${selection.startLine}-${selection.endLine}`;
}

/** The panel's line for the instruction files of a session (`pen/getSessionContext`). */
export function instructionsLine(
  files: { path: string; bytes: number; cut: boolean; refused?: string }[],
): string | null {
  if (files.length === 0) {
    return null;
  }
  const size = (bytes: number): string => (bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KB`);
  return (
    'Instructions: ' +
    files
      .map((f) => (f.refused !== undefined ? `${f.path} (not read)` : `${f.path} ${size(f.bytes)}${f.cut ? ' (cut)' : ''}`))
      .join(', ')
  );
}

export function emptyModel(): PanelModel {
  return {
    sessionId: null,
    sessions: [],
    items: [],
    running: false,
    status: '',
    endedTurns: [],
    sessionUsage: null,
    focus: null,
    instructions: null,
    plan: null,
    nextId: 1,
  };
}

/** Words for the states of `tool_call_finished` (and the stored `status` of a tool result). */
export const STATE_LABELS: Record<ToolState, string> = {
  running: 'running',
  awaiting_approval: 'waiting for approval',
  done: 'done',
  error: 'error',
  denied: 'denied by the owner',
  stale_authority: 'approval no longer applies',
  not_executed: 'not executed',
  interrupted: 'interrupted — inspect the state before retrying',
  unknown: 'outcome unknown — inspect the state before retrying',
};

const FINISHED_STATES: ReadonlySet<string> = new Set<string>(CALL_OUTCOMES);

function asString(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

function asNumber(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function asRecord(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

function formatTokens(n: number): string {
  return n.toLocaleString('en-US');
}

/**
 * Usage in a line: the input in total, the share of it read from the provider's cache (only
 * when the provider reports cache reads), and the output. Anything that is not a usage object
 * is `null`.
 */
export function usageLine(usage: Usage | null | undefined): string | null {
  const u = asRecord(usage);
  const input = asNumber(u.inputTokens);
  const output = asNumber(u.outputTokens);
  if (input === null || output === null) {
    return null;
  }
  const read = asNumber(u.cacheReadTokens);
  const cached = read === null ? '' : ` (${input > 0 ? Math.floor((read * 100) / input) : 0}% cached)`;
  return `${formatTokens(input)} input tokens${cached}, ${formatTokens(output)} output tokens`;
}

/**
 * The notice for a `context_trimmed` report, in either of its two shapes: the recovery after a
 * provider rejected the request as too long (`shrunkCallIds`, `headBytes`, and in a stored entry
 * the provider's words), and the prompt-budget planner (`excerptedCallIds`, `omittedCallIds`,
 * `droppedExchanges`, `tokensBefore`/`tokensAfter`).
 */
export function trimNotice(data: TrimmedData): { title: string; detail: string } {
  const compacted: string[] = [];
  let tokens = '';
  let why: string;
  let ids: string[];
  if (data.reason === 'context_window_exceeded') {
    const shrunk = asArray(data.shrunkCallIds);
    if (shrunk.length > 0) {
      compacted.push(
        `${plural(shrunk.length, 'tool result', 'tool results')} cut to a ${asNumber(data.headBytes) ?? '?'}-byte head`,
      );
    }
    const providerMessage = asString(data.providerMessage);
    why =
      'The provider rejected the request as too long' +
      (providerMessage !== null ? ` (${providerMessage})` : '') +
      '; pen trimmed it and retried';
    ids = shrunk.filter((id): id is string => typeof id === 'string');
  } else {
    const excerpted = asArray(data.excerptedCallIds);
    const omitted = asArray(data.omittedCallIds);
    const dropped = asArray(data.droppedExchanges);
    if (excerpted.length > 0) {
      compacted.push(`${plural(excerpted.length, 'tool result', 'tool results')} excerpted`);
    }
    if (omitted.length > 0) {
      compacted.push(`${omitted.length} of them left out`);
    }
    // The exchanges left out: `droppedCount`; `droppedExchanges` are their entries' seq spans
    // (adjacent exchanges joined into one span).
    const droppedCount = asNumber(data.droppedCount) ?? dropped.length;
    if (droppedCount > 0) {
      const entries = dropped.reduce<number>((sum, range) => {
        const r = asArray(range);
        const first = asNumber(r[0]);
        const last = asNumber(r[1]);
        return sum + (first !== null && last !== null && last >= first ? last - first + 1 : 0);
      }, 0);
      compacted.push(
        `${plural(droppedCount, 'earlier exchange', 'earlier exchanges')} dropped` +
          (entries > 0 ? ` (${plural(entries, 'entry', 'entries')})` : ''),
      );
    }
    const before = asNumber(data.tokensBefore);
    const after = asNumber(data.tokensAfter);
    const budget = asNumber(data.budget);
    tokens =
      before !== null && after !== null
        ? `; ${formatTokens(before)} → ${formatTokens(after)} tokens` +
          (budget !== null ? ` (budget ${formatTokens(budget)})` : '')
        : '';
    why = 'The conversation outgrew the context window; pen compacted the request';
    ids = excerpted.filter((id): id is string => typeof id === 'string');
  }
  const what = compacted.length > 0 ? compacted.join(', ') : 'nothing cut';
  return {
    title: `Context trimmed: ${what}${tokens}`,
    detail: why + (ids.length > 0 ? `. Calls: ${ids.join(', ')}` : '') + '. The stored transcript is unchanged.',
  };
}

/**
 * Text for the owner. pen's errors are written for every client and may name a protocol method,
 * "start a new session (pen/newSession)", which means nothing in the panel: the method goes, and
 * the words stay beside the button that does it (see `actionsFor`).
 */
export function forUser(text: string): string {
  return text.replace(/\s*\(pen\/[A-Za-z]+\)/g, '').replace(/\bpen\/newSession\b/g, 'a new session');
}

/** What the panel offers for a turn that ended in error, by pen's `errorKind`: the actions
 * (buttons) and, where the buttons do not say it, a hint. The wording of `lastError` is shown,
 * never parsed. */
export function actionsFor(
  stopReason: string,
  errorKind: TurnErrorKind | null | undefined,
): { actions: TurnAction[]; hint: string | null } {
  if (stopReason !== 'error' && errorKind == null) {
    return { actions: [], hint: null };
  }
  switch (errorKind) {
    case 'history_unrepairable':
      return { actions: ['newSession', 'showLog'], hint: 'This session cannot continue: start a new one.' };
    case 'context_window':
      return {
        actions: ['newSession', 'openSettings', 'showLog'],
        hint: "The conversation no longer fits the model's context window: start a new session.",
      };
    case 'no_provider':
      return {
        actions: ['openSettings', 'setApiKey', 'showLog'],
        hint: 'No model provider is configured: choose one in the settings, or set an API key.',
      };
    case 'auth':
      return {
        actions: ['setApiKey', 'openSettings', 'showLog'],
        hint: 'The provider refused the credentials: check the API key and the provider settings.',
      };
    case 'rate_limit':
      return { actions: ['retry', 'showLog'], hint: 'The provider is rate-limiting requests: retry in a moment.' };
    case 'network':
      return { actions: ['retry', 'showLog'], hint: 'The provider could not be reached: retry.' };
    case 'session_busy':
      return {
        actions: ['showLog'],
        hint: 'Another pen is running a turn in this session: wait for it, or stop it there.',
      };
    case 'budget_too_large':
      return { actions: ['newSession', 'openSettings', 'showLog'], hint: null };
    case 'provider_bad_request':
      return { actions: ['openSettings', 'showLog'], hint: null };
    default:
      return { actions: ['showLog'], hint: null };
  }
}

function push(model: PanelModel, item: Omit<Item, 'id' | 'rev'>): PanelModel {
  const full = { ...item, id: `i${model.nextId}`, rev: 1 } as Item;
  return { ...model, items: [...model.items, full], nextId: model.nextId + 1 };
}

/** Replace the item at `index` with `changes` applied and a higher `rev`. */
function update<T extends Item>(model: PanelModel, index: number, changes: Partial<T>): PanelModel {
  const items = model.items.slice();
  const old = items[index] as T;
  items[index] = { ...old, ...changes, rev: old.rev + 1 };
  return { ...model, items };
}

function findTool(model: PanelModel, callId: string): number {
  for (let i = model.items.length - 1; i >= 0; i--) {
    const item = model.items[i];
    if (item.kind === 'tool' && item.callId === callId) {
      return i;
    }
  }
  return -1;
}

/** Answer text: continues the last answer of the turn when nothing came in between. */
function appendText(model: PanelModel, turnId: string | null, text: string): PanelModel {
  if (text === '') {
    return model;
  }
  const last = model.items[model.items.length - 1];
  if (last !== undefined && last.kind === 'answer' && last.turnId === turnId) {
    return update<AnswerItem>(model, model.items.length - 1, { text: last.text + text });
  }
  return push(model, { kind: 'answer', turnId, text } as AnswerItem);
}

/** A call's card: `summary` is what pen says the call works on (its tool computes it). */
function toolStarted(model: PanelModel, callId: string, tool: string, summary: string): PanelModel {
  if (findTool(model, callId) >= 0) {
    return model;
  }
  return push(model, {
    kind: 'tool',
    callId,
    tool,
    summary,
    state: 'running',
    isError: false,
    excerpt: null,
    diff: null,
    notRevertible: null,
    pendingApproval: false,
    decision: null,
  } as ToolItem);
}

function toolFinished(
  model: PanelModel,
  callId: string,
  tool: string,
  state: string,
  isError: boolean,
  excerpt: string | null,
): PanelModel {
  let m = model;
  let index = findTool(m, callId);
  if (index < 0) {
    m = toolStarted(m, callId, tool, '');
    index = m.items.length - 1;
  }
  const known = FINISHED_STATES.has(state) ? (state as ToolState) : 'unknown';
  return update<ToolItem>(m, index, { state: known, isError, excerpt, pendingApproval: false });
}

/**
 * An approval request from `pen/requestApproval`: its card (created if need be) waits for the
 * owner's answer. pen writes the request after the events that precede it, so the card and the
 * text before it are normally there already.
 */
export function approvalRequested(model: PanelModel, params: ApprovalParams): PanelModel {
  if (params.sessionId !== model.sessionId) {
    return model;
  }
  // A project MCP server asking to start: its exact command line is what the owner approves.
  const asked =
    params.kind === 'start_mcp_server'
      ? { tool: 'start MCP server', summary: `${params.server}: ${params.commandLine}`, diff: null, notRevertible: null }
      : { tool: params.tool, summary: params.summary, diff: params.diff ?? null, notRevertible: params.notRevertible ?? null };
  let m = toolStarted(model, params.callId, asked.tool, asked.summary);
  const index = findTool(m, params.callId);
  const tool = m.items[index] as ToolItem;
  if (tool.decision !== null || FINISHED_STATES.has(tool.state)) {
    return m;
  }
  if (tool.pendingApproval && tool.diff === asked.diff) {
    return m;
  }
  m = update<ToolItem>(m, index, {
    state: 'awaiting_approval',
    pendingApproval: true,
    diff: asked.diff,
    notRevertible: asked.notRevertible,
  });
  return { ...m, status: 'waiting for approval' };
}

/** The owner answered in the panel (or the request was cancelled). */
export function approvalAnswered(model: PanelModel, callId: string, decision: Decision | 'withdrawn'): PanelModel {
  const index = findTool(model, callId);
  if (index < 0) {
    return model;
  }
  const tool = model.items[index] as ToolItem;
  if (!tool.pendingApproval) {
    return model;
  }
  const state: ToolState = tool.state === 'awaiting_approval' ? 'running' : tool.state;
  const m = update<ToolItem>(model, index, { pendingApproval: false, decision, state });
  return { ...m, status: m.running ? `running ${tool.tool}` : '' };
}

function turnEnded(
  model: PanelModel,
  turnId: string | null,
  stopReason: string,
  lastError: string | null,
  errorKind: TurnErrorKind | null = null,
  usage: Usage | null = null,
  sessionUsage: Usage | null = null,
): PanelModel {
  if (turnId !== null && model.endedTurns.includes(turnId)) {
    return model;
  }
  const pushed = push(model, {
    kind: 'turnEnd',
    turnId,
    stopReason,
    lastError: lastError === null ? null : forUser(lastError),
    ...actionsFor(stopReason, errorKind),
    usage: usageLine(usage),
  } as TurnEndItem);
  const m = { ...pushed, sessionUsage: usageLine(sessionUsage) ?? pushed.sessionUsage };
  // A turn that ends leaves no approval pending and nothing running.
  let out: PanelModel = {
    ...m,
    endedTurns: turnId !== null ? [...m.endedTurns, turnId] : m.endedTurns,
  };
  out.items.forEach((item, index) => {
    if (item.kind === 'tool' && (item.pendingApproval || item.state === 'running' || item.state === 'awaiting_approval')) {
      out = update<ToolItem>(out, index, { pendingApproval: false, state: 'unknown' });
    }
  });
  return out;
}

/**
 * One step of a session, live (`pen/event`) or stored (`pen/getTranscript`): both are tagged
 * `kind`/`data` by pen, and the kinds they share carry the same data, so one reducer renders
 * both and a resumed session looks like a live one.
 */
function reduce(model: PanelModel, turnId: string | null, body: EventBody | EntryBody, seq: number): PanelModel {
  switch (body.kind) {
    case 'user_prompt':
      return push(model, { kind: 'user', text: asString(body.data.text) ?? '' } as UserItem);
    case 'text_delta':
    case 'assistant_message':
      // An answer's tool calls are rendered from the tool_call entries that follow it.
      return appendText(model, turnId, asString(body.data.text) ?? '');
    case 'tool_call_started':
    case 'tool_call':
      return toolStarted(
        model,
        asString(body.data.callId) ?? `seq${seq}`,
        asString(body.data.tool) ?? '?',
        asString(body.data.summary) ?? '',
      );
    case 'approval_requested':
      return approvalRequested(model, { ...body.data, sessionId: model.sessionId ?? '' });
    case 'approval_withdrawn':
      return approvalAnswered(model, asString(body.data.callId) ?? '?', 'withdrawn');
    case 'tool_call_finished':
    case 'tool_result': {
      const d = body.data;
      return toolFinished(
        model,
        asString(d.callId) ?? `seq${seq}`,
        asString(d.tool) ?? '?',
        asString(d.state) ?? 'unknown',
        d.isError === true,
        asString('excerpt' in d ? d.excerpt : d.content),
      );
    }
    case 'context_trimmed':
      return push(model, { kind: 'trim', ...trimNotice(body.data) } as TrimItem);
    case 'context_window':
      // One line at a session's first turn: the model, its window and where that came from.
      return push(model, { kind: 'trim', title: 'Context window', detail: asString(body.data.line) ?? '' } as TrimItem);
    case 'provider_warning':
      return push(model, { kind: 'trim', title: 'Provider warning', detail: asString(body.data.message) ?? '' } as TrimItem);
    case 'usage':
      // One request's usage: the session's line follows it; the turn's shows at its end.
      return { ...model, sessionUsage: usageLine(body.data.session) ?? model.sessionUsage };
    case 'turn_ended':
      return turnEnded(
        model,
        turnId,
        asString(body.data.stopReason) ?? 'unknown',
        asString(body.data.lastError),
        body.data.errorKind ?? null,
        body.data.usage ?? null,
        body.data.sessionUsage ?? null,
      );
    case 'instructions_changed':
      return instructionsChanged(model, body.data.files);
    case 'plan':
      // The whole list each time: the checklist is replaced, never added to.
      return { ...model, plan: body.data.steps.length > 0 ? body.data.steps : null };
    default:
      // The provider's rejection is shown by the context_trimmed entry after it; grants by the
      // decisions on the cards; reverts by their answers; the session's context by its chip;
      // events of a newer pen are not shown.
      return model;
  }
}

/** The answer of `pen/revertTurn` for `turnId`, as an item of the panel. */
export function reverted(model: PanelModel, turnId: string, result: RevertTurnResult, forced: boolean): PanelModel {
  if (result.sessionId !== model.sessionId) {
    return model;
  }
  const files = result.files.map((f) => ({ path: f.path, status: f.status, diff: f.diff ?? null, reason: f.reason ?? null }));
  return push(model, {
    kind: 'revert',
    turnId,
    turns: result.turns,
    files,
    commands: result.commands.map((c) => ({ tool: c.tool, summary: c.summary })),
    conflicts: !forced && files.some((f) => f.status === 'conflict'),
  } as RevertItem);
}

/** A root instruction file changed during the session: the prompt carried the new text. */
function instructionsChanged(model: PanelModel, files: { path: string }[]): PanelModel {
  const names = files.map((f) => f.path).join(', ');
  return note(model, 'info', `The project's instructions changed (${names}); this prompt carried the new text to pen.`);
}

/** One live `pen/event` of the current session; events of other sessions are ignored. */
export function applyEvent(model: PanelModel, event: EventParams): PanelModel {
  if (event.sessionId !== model.sessionId) {
    return model;
  }
  const m = reduce(model, event.turnId ?? null, event, event.seq);
  if (event.kind === 'tool_call_started' && m !== model && model.running) {
    return { ...m, status: `running ${asString(event.data.tool) ?? '?'}` };
  }
  return m;
}

/** The owner sent a prompt: it shows at once and the turn is running. */
export function promptSent(model: PanelModel, text: string): PanelModel {
  const m = push(model, { kind: 'user', text } as UserItem);
  return { ...m, running: true, status: 'thinking' };
}

/** pen answered `pen/prompt`: the turn is over (its `turn_ended` may or may not be rendered). */
export function promptAnswered(model: PanelModel, result: PromptResponse): PanelModel {
  let m = model;
  if (result.sessionId === model.sessionId) {
    m = turnEnded(
      m,
      result.turnId,
      result.stopReason,
      result.lastError ?? null,
      result.errorKind ?? null,
      result.usage ?? null,
      result.sessionUsage ?? null,
    );
  }
  return { ...m, running: false, status: '' };
}

/** `pen/prompt` failed as a request (the daemon went away, a turn was already running, …).
 * `kind` is the error's `data.kind` when pen gave one: `session_busy` says another pen (or this
 * one) runs a turn in the session. */
export function promptFailed(model: PanelModel, message: string, kind: string | null = null): PanelModel {
  const text =
    kind === 'session_busy'
      ? `${message}\nAnother pen is running a turn in this session: wait for it, or stop it there.`
      : message;
  const m = note(model, 'error', text);
  return { ...m, running: false, status: '' };
}

export function note(model: PanelModel, level: 'info' | 'error', text: string): PanelModel {
  return push(model, { kind: 'note', level, text: forUser(text) } as NoteItem);
}

/** The daemon stopped: no turn runs any more and no approval can be answered. */
export function daemonStopped(model: PanelModel, message: string): PanelModel {
  let m = model;
  m.items.forEach((item, index) => {
    if (item.kind === 'tool' && (item.pendingApproval || item.state === 'running' || item.state === 'awaiting_approval')) {
      m = update<ToolItem>(m, index, { pendingApproval: false, state: 'unknown' });
    }
  });
  if (m.running) {
    m = note(m, 'error', message);
  }
  return { ...m, running: false, status: '' };
}

export function withSessions(model: PanelModel, sessions: SessionSummary[]): PanelModel {
  return { ...model, sessions };
}

/** Show another session (or a new, empty one): its items come from its transcript. */
export function switchSession(model: PanelModel, sessionId: string | null): PanelModel {
  return { ...emptyModel(), sessions: model.sessions, sessionId, focus: model.focus, nextId: model.nextId };
}

/**
 * Render stored entries (one page of `pen/getTranscript`) after the ones already rendered,
 * through the reducer of live events.
 */
export function appendEntries(model: PanelModel, entries: TranscriptRecord[]): PanelModel {
  let m = model;
  for (const entry of entries) {
    m = reduce(m, entry.turnId ?? null, entry, entry.seq);
  }
  return m;
}

/** Words for a stop reason, as the end of a turn shows them. */
export function stopReasonLabel(stopReason: string): string {
  switch (stopReason) {
    case 'end_turn':
      return 'Turn complete';
    case 'cancelled':
      return 'Stopped';
    case 'max_turn_requests':
      return 'Stopped: the turn made its maximum number of model requests (max_turn_requests); ask pen to continue';
    case 'error':
      return 'The turn failed';
    default:
      return `Turn ended: ${stopReason}`;
  }
}

/** Messages the webview sends to the extension. */
export type FromWebview =
  | { type: 'ready' }
  | { type: 'send'; text: string }
  | { type: 'stop' }
  | { type: 'approve'; callId: string; decision: Decision }
  | { type: 'newSession' }
  | { type: 'switchSession'; sessionId: string }
  | { type: 'openDiff'; callId: string }
  | { type: 'revertTurn'; turnId: string; force: boolean }
  | { type: 'forkSession'; turnId: string }
  | { type: 'action'; action: TurnAction }
  | { type: 'dropFocus' };

/** Messages the extension sends to the webview. */
export type ToWebview =
  | { type: 'model'; model: PanelModel }
  | { type: 'prefill'; text: string }
  | { type: 'focus' };
