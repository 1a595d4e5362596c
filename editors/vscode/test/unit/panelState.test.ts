//! The panel's model: live events, stored entries and the owner's actions reduce to the same
//! items. Each test compares a one-line-per-item outline of the model with the expected one.

import * as assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  actionsFor,
  appendEntries,
  applyEvent,
  approvalAnswered,
  approvalRequested,
  daemonStopped,
  emptyModel,
  type PanelModel,
  promptAnswered,
  promptFailed,
  promptSent,
  reverted,
  switchSession,
  trimNotice,
  usageLine,
} from '../../src/panelState';
import { TURN_ERROR_KINDS } from '../../src/protocol.generated';
import type { EventParams, RevertTurnResult, TranscriptRecord, TurnErrorKind } from '../../src/protocol.generated';

const S = 's_1';
const T = 't_1';

function session(): PanelModel {
  return switchSession(emptyModel(), S);
}

let seq = 0;
function ev(kind: string, data: Record<string, unknown>, turnId = T): EventParams {
  seq += 1;
  return { sessionId: S, turnId, seq, kind, data } as EventParams;
}

/** A stored entry, as `pen/getTranscript` sends it. */
function entry(seq: number, kind: string, data: unknown, turnId: string | undefined = T): TranscriptRecord {
  return { seq, turnId, createdAt: 0, kind, data } as TranscriptRecord;
}

/** One line per item: what the panel shows, without ids. */
function outline(m: PanelModel): string[] {
  return m.items.map((item) => {
    switch (item.kind) {
      case 'user':
        return `user: ${item.text}`;
      case 'answer':
        return `answer: ${item.text}`;
      case 'tool':
        return (
          `tool ${item.tool} [${item.summary}] ${item.state}` +
          (item.pendingApproval ? ' ASKING' : '') +
          (item.decision !== null ? ` decision=${item.decision}` : '') +
          (item.diff !== null ? ' +diff' : '') +
          (item.excerpt !== null ? ` excerpt=${item.excerpt}` : '')
        );
      case 'trim':
        return `trim: ${item.title}`;
      case 'turnEnd':
        return `end ${item.stopReason}` + (item.lastError !== null ? `: ${item.lastError}` : '') +
          (item.actions.length > 0 ? ` [${item.actions.join(',')}]` : '') +
          (item.hint !== null ? ` hint=${item.hint}` : '') +
          (item.usage !== null ? ` usage=${item.usage}` : '');
      case 'revert':
        return `revert ${item.turns.join(',')}: ` + item.files.map((f) => `${f.path}=${f.status}` + (f.diff !== null ? '+diff' : '')).join(' ') +
          (item.commands.length > 0 ? ` commands=${item.commands.map((c) => c.summary).join(',')}` : '') +
          (item.conflicts ? ' CONFLICTS' : '');
      case 'note':
        return `note ${item.level}: ${item.text}`;
    }
  });
}

function reduce(m: PanelModel, events: EventParams[]): PanelModel {
  return events.reduce(applyEvent, m);
}

describe('live events', () => {
  test('a plan is one checklist, replaced whole by each update, live or stored', () => {
    const first = [
      { text: 'read the parser', status: 'in_progress' },
      { text: 'fix it', status: 'pending' },
    ];
    const second = [
      { text: 'read the parser', status: 'done' },
      { text: 'fix it', status: 'in_progress' },
    ];
    let m = promptSent(session(), 'fix the parser');
    m = reduce(m, [
      ev('tool_call_started', { callId: 'p1', tool: 'pen_plan', summary: '2 steps', arguments: { steps: first } }),
      ev('tool_call_finished', { callId: 'p1', tool: 'pen_plan', state: 'done', isError: false, excerpt: '{"plan":"plan: 0 of 2 done"}' }),
      ev('plan', { steps: first }),
    ]);
    assert.deepEqual(m.plan, first);
    const items = m.items.length;
    m = reduce(m, [ev('plan', { steps: second })]);
    assert.deepEqual(m.plan, second, 'replaced, in order');
    assert.equal(m.items.length, items, 'no card per update');
    // A resumed session shows the same checklist from its stored entries.
    const stored = appendEntries(session(), [entry(1, 'plan', { steps: first }), entry(2, 'plan', { steps: second })]);
    assert.deepEqual(stored.plan, second);
    assert.equal(stored.items.length, 0);
    // An empty list clears it; another session starts without one.
    assert.equal(reduce(m, [ev('plan', { steps: [] })]).plan, null);
    assert.equal(switchSession(m, 's_2').plan, null);
  });

  test('streamed text joins one answer; a tool card splits it', () => {
    let m = promptSent(session(), 'read a');
    m = reduce(m, [
      ev('text_delta', { text: 'Let me ' }),
      ev('text_delta', { text: 'look.' }),
      ev('tool_call_started', { callId: 'c1', tool: 'pen_read', summary: 'a.txt lines 10–29', arguments: { path: 'a.txt', start_line: 10, line_count: 20 } }),
      ev('tool_call_finished', { callId: 'c1', tool: 'pen_read', state: 'done', isError: false, excerpt: '{"content":"x"}' }),
      ev('text_delta', { text: 'It says x.' }),
      ev('turn_ended', { stopReason: 'end_turn', lastError: null }),
    ]);
    assert.deepEqual(outline(m), [
      'user: read a',
      'answer: Let me look.',
      'tool pen_read [a.txt lines 10–29] done excerpt={"content":"x"}',
      'answer: It says x.',
      'end end_turn',
    ]);
    assert.equal(m.running, true, 'running until pen answers pen/prompt');
    m = promptAnswered(m, { sessionId: S, turnId: T, stopReason: 'end_turn' });
    assert.equal(m.running, false);
    assert.equal(outline(m).filter((l) => l.startsWith('end')).length, 1, 'the end is rendered once');
  });

  test('an approval: asked, allowed, done; the status follows', () => {
    let m = promptSent(session(), 'edit');
    m = reduce(m, [ev('tool_call_started', { callId: 'c2', tool: 'pen_edit', summary: 'a.txt', arguments: { path: 'a.txt', edits: [{}] } })]);
    assert.equal(m.status, 'running pen_edit');
    m = approvalRequested(m, { kind: 'tool_call', sessionId: S, turnId: T, callId: 'c2', tool: 'pen_edit', summary: 'a.txt', toolKind: 'edit', arguments: { path: 'a.txt' }, diff: '-a\n+b\n' });
    m = applyEvent(m, ev('approval_requested', { sessionId: S, callId: 'c2', tool: 'pen_edit', diff: '-a\n+b\n' }));
    assert.deepEqual(outline(m).slice(1), ['tool pen_edit [a.txt] awaiting_approval ASKING +diff']);
    assert.equal(m.status, 'waiting for approval');
    m = approvalAnswered(m, 'c2', 'allow');
    assert.deepEqual(outline(m).slice(1), ['tool pen_edit [a.txt] running decision=allow +diff']);
    m = applyEvent(m, ev('tool_call_finished', { callId: 'c2', tool: 'pen_edit', state: 'done', isError: false }));
    assert.deepEqual(outline(m).slice(1), ['tool pen_edit [a.txt] done decision=allow +diff']);
  });

  test('an approval request with no card yet creates it, and its events do not repeat it', () => {
    let m = promptSent(session(), 'edit');
    m = approvalRequested(m, { kind: 'tool_call', sessionId: S, turnId: T, callId: 'c4', tool: 'pen_create', summary: 'n.txt', toolKind: 'edit', arguments: { path: 'n.txt' } });
    assert.deepEqual(outline(m).slice(1), ['tool pen_create [n.txt] awaiting_approval ASKING']);
    m = applyEvent(m, ev('tool_call_started', { callId: 'c4', tool: 'pen_create', summary: 'n.txt', arguments: { path: 'n.txt' } }));
    assert.equal(m.items.length, 2, 'no second card');
  });

  test('a project MCP server asking to start shows its command line', () => {
    let m = promptSent(session(), 'go');
    m = approvalRequested(m, {
      kind: 'start_mcp_server', sessionId: S, turnId: T, callId: 'mcp_start_files',
      server: 'files', commandLine: 'node server.js', root: '/w',
    });
    assert.deepEqual(outline(m).slice(1), ['tool start MCP server [files: node server.js] awaiting_approval ASKING']);
  });

  test('Deny and Stop: denied by the owner, withdrawn, not executed', () => {
    let m = promptSent(session(), 'go');
    m = reduce(m, [
      ev('tool_call_started', { callId: 'c5', tool: 'pen_edit', summary: 'b.txt', arguments: { path: 'b.txt' } }),
      ev('approval_requested', { callId: 'c5', tool: 'pen_edit', summary: 'b.txt', arguments: { path: 'b.txt' } }),
    ]);
    m = approvalAnswered(m, 'c5', 'deny');
    m = reduce(m, [
      ev('tool_call_finished', { callId: 'c5', tool: 'pen_edit', state: 'denied', isError: true, excerpt: 'denied by the owner' }),
      ev('tool_call_started', { callId: 'c6', tool: 'pen_create', summary: 'n.txt', arguments: { path: 'n.txt' } }),
      ev('approval_requested', { callId: 'c6', tool: 'pen_create', summary: 'n.txt', arguments: { path: 'n.txt' } }),
      ev('approval_withdrawn', { callId: 'c6' }),
      ev('tool_call_finished', { callId: 'c6', tool: 'pen_create', state: 'not_executed', isError: true, excerpt: 'not executed (stopped)' }),
      ev('tool_call_finished', { callId: 'c7', tool: 'pen_read', state: 'not_executed', isError: true, excerpt: 'not executed (stopped)' }),
      ev('turn_ended', { stopReason: 'cancelled', lastError: null }),
    ]);
    assert.deepEqual(outline(m).slice(1), [
      'tool pen_edit [b.txt] denied decision=deny excerpt=denied by the owner',
      'tool pen_create [n.txt] not_executed decision=withdrawn excerpt=not executed (stopped)',
      'tool pen_read [] not_executed excerpt=not executed (stopped)',
      'end cancelled',
    ]);
  });

  test('events of another session are ignored', () => {
    const m = session();
    assert.equal(applyEvent(m, { ...ev('text_delta', { text: 'x' }), sessionId: 's_other' }), m);
  });

  test('a failed turn offers the actions of its kind; prose without a kind offers only the log', () => {
    const lastError = 'The request does not fit the prompt budget: start a new session (pen/newSession)';
    let m = promptSent(session(), 'go');
    m = promptAnswered(m, { sessionId: S, turnId: T, stopReason: 'error', lastError, errorKind: 'budget_too_large' });
    assert.deepEqual(outline(m).slice(1), [
      'end error: The request does not fit the prompt budget: start a new session [newSession,openSettings,showLog]',
    ]);
    m = promptAnswered(promptSent(session(), 'go'), { sessionId: S, turnId: 't2', stopReason: 'error', lastError });
    assert.deepEqual(outline(m).slice(1), ['end error: The request does not fit the prompt budget: start a new session [showLog]']);
  });

  test('the daemon stopping ends the turn and every pending approval', () => {
    let m = promptSent(session(), 'go');
    m = reduce(m, [
      ev('tool_call_started', { callId: 'c8', tool: 'pen_command', summary: 'make', arguments: { command: 'make' } }),
      ev('approval_requested', { callId: 'c8', tool: 'pen_command', summary: 'make', arguments: { command: 'make' } }),
    ]);
    m = daemonStopped(m, 'pen serve stopped unexpectedly; restarting in 1 s');
    assert.equal(m.running, false);
    assert.deepEqual(outline(m).slice(1), [
      'tool pen_command [make] unknown',
      'note error: pen serve stopped unexpectedly; restarting in 1 s',
    ]);
    m = promptFailed(m, 'The turn failed: connection closed');
    assert.equal(m.running, false);
  });
});

describe('context_trimmed notices', () => {
  test('after a provider rejection', () => {
    const n = trimNotice({ reason: 'context_window_exceeded', shrunkCallIds: ['c1', 'c2'], headBytes: 2048 });
    assert.equal(n.title, 'Context trimmed: 2 tool results cut to a 2048-byte head');
    assert.match(n.detail, /rejected the request as too long.*Calls: c1, c2/);
  });

  test('by the prompt budget: what was compacted and the tokens before and after', () => {
    const n = trimNotice({
      reason: 'budget',
      policyVersion: 3,
      excerptedCallIds: ['c1'],
      omittedCallIds: [],
      droppedExchanges: [[1, 9]],
      droppedCount: 2,
      tokensBefore: 12345,
      tokensAfter: 5000,
      budget: 5184,
    });
    assert.equal(
      n.title,
      'Context trimmed: 1 tool result excerpted, 2 earlier exchanges dropped (9 entries); 12,345 → 5,000 tokens (budget 5,184)',
    );
  });

  test('by the prompt budget: excerpts that were left out too are counted', () => {
    const n = trimNotice({
      reason: 'budget',
      policyVersion: 3,
      excerptedCallIds: ['c1', 'c2', 'c3'],
      omittedCallIds: ['c1', 'c2'],
      droppedExchanges: [],
      droppedCount: 0,
      tokensBefore: 9000,
      tokensAfter: 5100,
      budget: 5184,
    });
    assert.equal(
      n.title,
      'Context trimmed: 3 tool results excerpted, 2 of them left out; 9,000 → 5,100 tokens (budget 5,184)',
    );
  });
});

describe('stored transcripts', () => {
  const entries: TranscriptRecord[] = [
    entry(1, 'user_prompt', { text: 'edit a' }),
    entry(2, 'assistant_message', {
      text: '',
      toolCalls: [{ id: 'c1', name: 'pen_read', arguments: '{}' }],
      finishReason: 'tool_use',
      usage: null,
      model: null,
      estimatedInputTokens: null,
    }),
    entry(3, 'tool_call', { callId: 'c1', tool: 'pen_read', summary: 'a.txt', arguments: { path: 'a.txt' } }),
    entry(4, 'tool_result', { callId: 'c1', tool: 'pen_read', content: 'x', isError: false, state: 'done' }),
    entry(5, 'context_window_rejected', { model: 'm', estimatedTokens: 9000, reason: 'HTTP 400: too long' }),
    entry(6, 'context_trimmed', {
      reason: 'context_window_exceeded',
      shrunkCallIds: ['c1'],
      headBytes: 2048,
      providerMessage: 'HTTP 400: too long',
    }),
    entry(7, 'context_trimmed', {
      reason: 'budget',
      policyVersion: 3,
      excerptedCallIds: ['c1'],
      omittedCallIds: [],
      droppedExchanges: [],
      droppedCount: 0,
      tokensBefore: 6247,
      tokensAfter: 4737,
      budget: 5184,
    }),
    entry(8, 'tool_call', { callId: 'c2', tool: 'pen_edit', summary: 'a.txt', arguments: { path: 'a.txt' } }),
    entry(9, 'tool_result', { callId: 'c2', tool: 'pen_edit', content: 'denied by the owner', isError: true, state: 'denied' }),
    entry(10, 'tool_allowed_for_session', { tool: 'pen_command' }),
    entry(11, 'assistant_message', {
      text: 'Done **editing**.',
      toolCalls: [],
      finishReason: 'end_turn',
      usage: null,
      model: null,
      estimatedInputTokens: null,
    }),
    entry(12, 'event', { type: 'from_a_newer_pen' }),
    entry(13, 'turn_ended', { stopReason: 'end_turn', lastError: null, errorKind: null }),
  ];

  test('entries become the items live events make', () => {
    const m = appendEntries(session(), entries);
    assert.deepEqual(outline(m), [
      'user: edit a',
      'tool pen_read [a.txt] done excerpt=x',
      'trim: Context trimmed: 1 tool result cut to a 2048-byte head',
      'trim: Context trimmed: 1 tool result excerpted; 6,247 → 4,737 tokens (budget 5,184)',
      'tool pen_edit [a.txt] denied excerpt=denied by the owner',
      'answer: Done **editing**.',
      'end end_turn',
    ]);
    const shrunk = m.items[2];
    assert.ok(shrunk.kind === 'trim' && shrunk.detail.includes('HTTP 400: too long'));
  });

  test('pages append: two pages render like one', () => {
    const whole = outline(appendEntries(session(), entries));
    const paged = outline(appendEntries(appendEntries(session(), entries.slice(0, 4)), entries.slice(4)));
    assert.deepEqual(paged, whole);
  });

  test('stored events render as the live events of the same fact', () => {
    const files = [{ path: 'AGENTS.md', bytes: 3, cut: false }];
    const window = {
      model: 'm',
      tokens: 2048,
      source: 'llama_cpp_props',
      line: 'model m, context window 2048 tokens (llama.cpp /props)',
      toolsDropped: false,
    };
    const stored = appendEntries(session(), [
      entry(1, 'session_context', { instructions: files, environment: '- pen' }),
      entry(2, 'context_window', window),
      entry(3, 'instructions_changed', { files }),
      entry(4, 'provider_warning', { message: 'truncated' }),
      entry(5, 'instructions_delivered', { callId: 'c1', files }),
      entry(6, 'context_compacted', {
        policyVersion: 4, droppedCount: 1, excerptedThrough: 'c1', omittedThrough: null, budget: 9, lowWater: 5,
      }),
      entry(7, 'revert_started', { turns: [T], files: ['a.txt'] }),
      entry(8, 'files_reverted', { turns: [T], files: [{ path: 'a.txt', status: 'reverted' }], note: 'n', interrupted: false }),
    ]);
    const live = reduce(session(), [
      ev('context_window', window),
      ev('instructions_changed', { files }),
      ev('provider_warning', { message: 'truncated' }),
    ]);
    assert.deepEqual(outline(stored), outline(live));
    assert.deepEqual(outline(stored), [
      'trim: Context window',
      'note info: The project\'s instructions changed (AGENTS.md); this prompt carried the new text to pen.',
      'trim: Provider warning',
    ]);
  });

  test('switching sessions keeps the list and starts empty', () => {
    let m = appendEntries(session(), entries);
    m = { ...m, sessions: [{ sessionId: S, title: 'edit a', createdAt: 0, updatedAt: 0, entryCount: 13 }] };
    const next = switchSession(m, null);
    assert.equal(next.sessionId, null);
    assert.equal(next.items.length, 0);
    assert.equal(next.sessions.length, 1);
    assert.ok(next.nextId >= m.nextId, 'ids are never reused, so the webview never confuses items');
  });
});

describe('helpers', () => {
  test('a card shows the summary pen sends, never one of its own', () => {
    // pen computes a call's summary from its tool's spec; the panel renders it as sent, even
    // where the arguments would say otherwise.
    const m = reduce(session(), [
      ev('tool_call_started', { callId: 'c1', tool: 'mcp__s__t', summary: 'what pen says', arguments: { path: 'other' } }),
      ev('tool_call_started', { callId: 'c2', tool: 'mcp__s__u', arguments: { path: 'p' } }),
    ]);
    assert.deepEqual(outline(m), ['tool mcp__s__t [what pen says] running', 'tool mcp__s__u [] running']);
  });

  test('actions for errors come from the kind alone', () => {
    assert.deepEqual(actionsFor('end_turn', null), { actions: [], hint: null });
    assert.deepEqual(actionsFor('error', null).actions, ['showLog']);
    const want: Record<TurnErrorKind, string[]> = {
      history_unrepairable: ['newSession', 'showLog'],
      context_window: ['newSession', 'openSettings', 'showLog'],
      no_provider: ['openSettings', 'setApiKey', 'showLog'],
      auth: ['setApiKey', 'openSettings', 'showLog'],
      rate_limit: ['retry', 'showLog'],
      network: ['retry', 'showLog'],
      session_busy: ['showLog'],
      budget_too_large: ['newSession', 'openSettings', 'showLog'],
      provider_bad_request: ['openSettings', 'showLog'],
      store: ['showLog'],
    };
    for (const kind of TURN_ERROR_KINDS) {
      assert.deepEqual(actionsFor('error', kind).actions, want[kind], kind);
    }
    assert.match(actionsFor('error', 'session_busy').hint ?? '', /Another pen is running a turn/);
  });

  // Each kind the panel acts on reaches the same action live (turn_ended), from the pen/prompt
  // answer and from the stored transcript, whatever the prose says: the prose is one that would
  // have led the old regexes astray.
  for (const [kind, action] of [
    ['history_unrepairable', 'newSession'],
    ['context_window', 'newSession'],
    ['no_provider', 'openSettings'],
    ['auth', 'setApiKey'],
    ['rate_limit', 'retry'],
    ['network', 'retry'],
  ] as [TurnErrorKind, string][]) {
    test(`${kind}: live, answered and stored turns offer ${action}`, () => {
      const error = 'the model provider said: HTTP 401, start a new session';
      const live = applyEvent(
        promptSent(session(), 'go'),
        ev('turn_ended', { stopReason: 'error', lastError: error, errorKind: kind }, 't7'),
      );
      const answered = promptAnswered(promptSent(session(), 'go'), {
        sessionId: S,
        turnId: 't9',
        stopReason: 'error',
        lastError: error,
        errorKind: kind,
      });
      const stored = appendEntries(session(), [entry(1, 'turn_ended', { stopReason: 'error', lastError: error, errorKind: kind }, 't8')]);
      for (const model of [live, answered, stored]) {
        const end = model.items.find((item) => item.kind === 'turnEnd');
        assert.ok(end !== undefined && end.kind === 'turnEnd');
        assert.equal(end.actions[0], action, kind);
        assert.ok(end.hint !== null, kind);
      }
    });
  }

  test('a session another pen runs says so', () => {
    const m = promptFailed(promptSent(session(), 'go'), 'The turn failed: session is running a turn in another pen (pid 7)', 'session_busy');
    assert.match(outline(m).at(-1) ?? '', /Another pen is running a turn in this session/);
    assert.equal(m.running, false);
  });

  test('a history pen cannot repair offers a new session, live and from the transcript', () => {
    const error = 'entry 3 repeats tool call id a; the session history is inconsistent';
    const live = applyEvent(
      promptSent(session(), 'go'),
      ev('turn_ended', { stopReason: 'error', lastError: error, errorKind: 'history_unrepairable' }),
    );
    const answered = promptAnswered(promptSent(session(), 'go'), {
      sessionId: S,
      turnId: 't9',
      stopReason: 'error',
      lastError: error,
      errorKind: 'history_unrepairable',
    });
    const stored = appendEntries(session(), [
      entry(1, 'turn_ended', { stopReason: 'error', lastError: error, errorKind: 'history_unrepairable' }, 't8'),
    ]);
    for (const model of [live, answered, stored]) {
      const end = model.items.find((item) => item.kind === 'turnEnd');
      assert.ok(end !== undefined && end.kind === 'turnEnd');
      assert.deepEqual(end.actions, ['newSession', 'showLog']);
    }
  });

  test('an error never shows a protocol method: it says "start a new session" and offers the button', () => {
    const lastError =
      'the current prompt with its latest tool calls: about 947 tokens, more than the 400 the request may use; ' +
      'shorten the prompt, or start a new session (pen/newSession) and carry over only what matters';
    const live = promptAnswered(promptSent(session(), 'x'), {
      sessionId: S,
      turnId: T,
      stopReason: 'error',
      lastError,
      errorKind: 'budget_too_large',
    });
    const stored = appendEntries(session(), [
      entry(1, 'turn_ended', { stopReason: 'error', lastError, errorKind: 'budget_too_large' }, undefined),
    ]);
    for (const m of [live, stored]) {
      const end = outline(m).at(-1) ?? '';
      assert.ok(!end.includes('pen/'), end);
      assert.ok(end.includes('or start a new session and carry over only what matters'), end);
      assert.ok(end.endsWith('[newSession,openSettings,showLog]'), end);
    }
    const failed = promptFailed(session(), 'Could not start a new session: use pen/newSession first (pen/prompt)');
    assert.deepEqual(outline(failed), ['note error: Could not start a new session: use a new session first']);
  });

  test('the reducers never mutate their input', () => {
    const m = promptSent(session(), 'x');
    const frozen = JSON.stringify(m);
    applyEvent(m, ev('text_delta', { text: 'y' }));
    approvalRequested(m, { kind: 'tool_call', sessionId: S, turnId: T, callId: 'c', tool: 't', summary: '', toolKind: 'other', arguments: {} });
    appendEntries(m, [entry(1, 'user_prompt', { text: 'z' })]);
    assert.equal(JSON.stringify(m), frozen);
  });

  test('usage: each turn ends with its figures and the session line follows every report', () => {
    const request = { inputTokens: 2000, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 1900 };
    const turn = { inputTokens: 4100, outputTokens: 30, cacheReadTokens: 1900, cacheWriteTokens: 2050 };
    const earlier = { inputTokens: 12000, outputTokens: 500, cacheReadTokens: 9000 };
    let m = promptSent(session(), 'read a');
    m = applyEvent(m, ev('usage', { model: 'm', request, turn: request, session: request }));
    assert.equal(m.sessionUsage, '2,000 input tokens (0% cached), 20 output tokens');
    m = reduce(m, [
      ev('usage', { model: 'm', request, turn, session: turn }),
      ev('turn_ended', { stopReason: 'end_turn', lastError: null, errorKind: null, usage: turn, sessionUsage: turn }),
    ]);
    assert.deepEqual(outline(m).at(-1), 'end end_turn usage=4,100 input tokens (46% cached), 30 output tokens');
    assert.equal(m.sessionUsage, '4,100 input tokens (46% cached), 30 output tokens');
    // A stored session shows the same: per turn at its end, the session's from the last end.
    const stored = appendEntries(session(), [
      entry(1, 'turn_ended', { stopReason: 'end_turn', lastError: null, errorKind: null, usage: earlier, sessionUsage: earlier }, 't0'),
      entry(2, 'turn_ended', { stopReason: 'end_turn', lastError: null, errorKind: null, usage: turn, sessionUsage: turn }, 't1'),
    ]);
    assert.deepEqual(outline(stored), [
      'end end_turn usage=12,000 input tokens (75% cached), 500 output tokens',
      'end end_turn usage=4,100 input tokens (46% cached), 30 output tokens',
    ]);
    assert.equal(stored.sessionUsage, '4,100 input tokens (46% cached), 30 output tokens');
    // The pen/prompt answer carries the same totals when it comes first.
    const answered = promptAnswered(promptSent(session(), 'go'), {
      sessionId: S,
      turnId: 't9',
      stopReason: 'end_turn',
      usage: turn,
      sessionUsage: turn,
    });
    assert.equal(answered.sessionUsage, '4,100 input tokens (46% cached), 30 output tokens');
    // An older pen's turn end has no usage: nothing is made up.
    const old = appendEntries(session(), [entry(1, 'turn_ended', { stopReason: 'end_turn', lastError: null, errorKind: null })]);
    assert.deepEqual(outline(old), ['end end_turn']);
    assert.equal(old.sessionUsage, null);
    assert.equal(usageLine({ inputTokens: 120, outputTokens: 3 }), '120 input tokens, 3 output tokens');
    assert.equal(usageLine(undefined), null);
  });
});

describe('checkpoints', () => {
  test('an approval says when the write will not be revertible', () => {
    let m = promptSent(session(), 'edit');
    m = approvalRequested(m, {
      kind: 'tool_call', sessionId: S, turnId: T, callId: 'c1', tool: 'pen_edit', summary: 'big.txt', toolKind: 'edit', arguments: { path: 'big.txt' },
      diff: '-a\n+b\n', notRevertible: 'not revertible: too large (…)',
    });
    const card = m.items.find((i) => i.kind === 'tool');
    assert.ok(card !== undefined && card.kind === 'tool');
    assert.equal(card.notRevertible, 'not revertible: too large (…)');
  });

  test("an undo lists every file, conflicts with their diffs, and offers to force only then", () => {
    const result: RevertTurnResult = {
      sessionId: S,
      turns: ['t3', 't2'],
      files: [
        { path: 'a.txt', status: 'reverted', turns: ['t3', 't2'] },
        { path: 'n.txt', status: 'deleted', turns: ['t2'] },
        { path: 'b.txt', status: 'conflict', turns: ['t3'], diff: '-mine\n+theirs\n', reason: 'it changed after pen wrote it' },
      ],
      commands: [{ turnId: 't3', tool: 'pen_command', summary: 'make' }],
      note: '[pen] …',
    };
    let m = reverted(session(), 't2', result, false);
    assert.deepEqual(outline(m), ['revert t3,t2: a.txt=reverted n.txt=deleted b.txt=conflict+diff commands=make CONFLICTS']);
    m = reverted(session(), 't2', { ...result, files: [{ path: 'b.txt', status: 'reverted', turns: ['t3'] }] }, true);
    assert.deepEqual(outline(m), ['revert t3,t2: b.txt=reverted commands=make']);
    // Another session's answer is not shown.
    assert.deepEqual(outline(reverted(session(), 't2', { ...result, sessionId: 'other' }, false)), []);
  });
});
