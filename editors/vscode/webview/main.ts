//! The panel's script, in the webview: renders the model the extension posts (keyed by item id
//! and revision, so streaming re-renders only the growing answer) and sends the owner's actions.

import DOMPurify from 'dompurify';
import MarkdownIt from 'markdown-it';
import {
  type FromWebview,
  type Item,
  type PanelModel,
  STATE_LABELS,
  stopReasonLabel,
  type ToolItem,
  type ToWebview,
  type TurnAction,
} from '../src/panelState';

interface VsCodeApi {
  postMessage(message: FromWebview): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
// Raw HTML in the model's answer is shown as text, and what markdown-it renders is sanitized too.
const markdown = new MarkdownIt({ html: false, linkify: true, breaks: false });

const log = document.getElementById('log') as HTMLElement;
const status = document.getElementById('status') as HTMLElement;
const sessionUsage = document.getElementById('session-usage') as HTMLElement;
const form = document.getElementById('composer') as HTMLFormElement;
const prompt = document.getElementById('prompt') as HTMLTextAreaElement;
const send = document.getElementById('send') as HTMLButtonElement;
const stop = document.getElementById('stop') as HTMLButtonElement;
const sessionSelect = document.getElementById('session') as HTMLSelectElement;
const newSession = document.getElementById('new-session') as HTMLButtonElement;
const instructions = document.getElementById('instructions') as HTMLElement;
const plan = document.getElementById('plan') as HTMLElement;
const planSteps = document.getElementById('plan-steps') as HTMLOListElement;
const focusChip = document.getElementById('focus-chip') as HTMLElement;
const focusLabel = document.getElementById('focus-label') as HTMLElement;
const dropFocus = document.getElementById('drop-focus') as HTMLButtonElement;

const rendered = new Map<string, { rev: number; el: HTMLElement }>();
let model: PanelModel | null = null;

const ACTION_LABELS: Record<TurnAction, string> = {
  setApiKey: 'Set API key',
  openSettings: 'Open settings',
  newSession: 'Start a new session',
  retry: 'Retry',
  showLog: 'Show log',
};

const STATE_ICONS: Record<ToolItem['state'], string> = {
  running: 'loading codicon-modifier-spin',
  awaiting_approval: 'question',
  done: 'check',
  error: 'error',
  denied: 'circle-slash',
  stale_authority: 'history',
  not_executed: 'debug-stop',
  interrupted: 'warning',
  unknown: 'warning',
};

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className !== undefined) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function icon(name: string): HTMLElement {
  const i = el('i', `codicon codicon-${name}`);
  i.setAttribute('aria-hidden', 'true');
  return i;
}

function button(label: string, className: string, onClick: () => void, iconName?: string): HTMLButtonElement {
  const b = el('button', className);
  b.type = 'button';
  if (iconName !== undefined) {
    b.append(icon(iconName), ' ');
  }
  b.append(label);
  b.setAttribute('aria-label', label);
  b.addEventListener('click', onClick);
  return b;
}

function renderMarkdown(text: string): HTMLElement {
  const div = el('div', 'markdown');
  div.innerHTML = DOMPurify.sanitize(markdown.render(text));
  return div;
}

/** A unified diff with added and removed lines marked (as text, never HTML). */
function renderDiff(diff: string): HTMLElement {
  const pre = el('pre', 'diff');
  for (const line of diff.replace(/\r/g, '').replace(/\n$/, '').split('\n')) {
    const cls = line.startsWith('+++') || line.startsWith('---')
      ? 'file'
      : line.startsWith('@@')
        ? 'hunk'
        : line.startsWith('+')
          ? 'add'
          : line.startsWith('-')
            ? 'del'
            : 'ctx';
    pre.append(el('span', `line ${cls}`, line + '\n'));
  }
  return pre;
}

function renderTool(item: ToolItem, old: HTMLElement | undefined): HTMLElement {
  const card = el('section', `card tool state-${item.state}`);
  card.dataset.callId = item.callId;
  card.setAttribute('aria-label', `${item.tool} ${item.summary}: ${STATE_LABELS[item.state]}`);
  const head = el('div', 'card-head');
  head.append(icon(STATE_ICONS[item.state]), el('span', 'tool-name', item.tool));
  if (item.summary !== '') {
    head.append(el('code', 'args', item.summary));
  }
  head.append(el('span', 'state', STATE_LABELS[item.state]));
  card.append(head);
  if (item.decision === 'withdrawn') {
    card.append(el('div', 'decision', 'Approval withdrawn: the turn was stopped.'));
  }
  if (item.notRevertible !== null) {
    card.append(el('div', 'decision not-revertible', item.notRevertible));
  }
  if (item.diff !== null) {
    card.append(renderDiff(item.diff));
    const open = button('Open diff', 'secondary small', () => vscode.postMessage({ type: 'openDiff', callId: item.callId }), 'diff');
    open.setAttribute('aria-label', `Open diff of ${item.summary || item.tool}`);
    card.append(open);
  }
  if (item.excerpt !== null && item.excerpt !== '') {
    const details = el('details', 'result');
    // Failures open by default: their text says what to do.
    const wasOpen = old?.querySelector('details.result')?.hasAttribute('open');
    details.open = wasOpen ?? item.state !== 'done';
    details.append(el('summary', undefined, item.isError ? 'Error' : 'Result'), el('pre', 'excerpt', item.excerpt));
    card.append(details);
  }
  if (item.pendingApproval) {
    const group = el('div', 'approval');
    group.setAttribute('role', 'group');
    group.setAttribute('aria-label', `Approve ${item.tool} ${item.summary}`);
    const answer = (decision: 'allow' | 'allow_for_session' | 'deny') => () =>
      vscode.postMessage({ type: 'approve', callId: item.callId, decision });
    group.append(
      el('span', 'question', `pen wants to run ${item.tool}${item.summary ? ' on ' + item.summary : ''}.`),
      button('Allow', 'primary', answer('allow'), 'check'),
      button('Allow for session', 'secondary', answer('allow_for_session'), 'check-all'),
      button('Deny', 'secondary danger', answer('deny'), 'close'),
    );
    card.append(group);
  }
  return card;
}

function renderItem(item: Item, old: HTMLElement | undefined): HTMLElement {
  switch (item.kind) {
    case 'user': {
      const div = el('div', 'msg user');
      div.append(el('div', 'who', 'You'), el('div', 'text', item.text));
      return div;
    }
    case 'answer': {
      const div = el('div', 'msg answer');
      div.append(renderMarkdown(item.text));
      return div;
    }
    case 'tool':
      return renderTool(item, old);
    case 'trim': {
      const div = el('div', 'notice trim');
      div.setAttribute('role', 'note');
      const title = el('div', 'title');
      title.append(icon('fold'), ' ', el('strong', undefined, item.title));
      div.append(title, el('div', 'detail', item.detail));
      return div;
    }
    case 'turnEnd': {
      const div = el('div', `turn-end reason-${item.stopReason}`);
      div.append(el('div', 'label', stopReasonLabel(item.stopReason)));
      if (item.usage !== null) {
        div.append(el('div', 'usage', `This turn: ${item.usage}`));
      }
      if (item.lastError !== null) {
        div.setAttribute('role', 'alert');
        div.append(el('div', 'last-error', item.lastError));
      }
      if (item.hint !== null) {
        div.append(el('div', 'hint', item.hint));
      }
      if (item.actions.length > 0) {
        const actions = el('div', 'turn-actions');
        for (const action of item.actions) {
          actions.append(button(ACTION_LABELS[action], 'secondary small', () => vscode.postMessage({ type: 'action', action })));
        }
        div.append(actions);
      }
      if (item.turnId !== null) {
        const turnId = item.turnId;
        const checkpoint = el('div', 'turn-actions checkpoint');
        checkpoint.append(
          button("Undo this turn's changes", 'secondary small', () => vscode.postMessage({ type: 'revertTurn', turnId, force: false }), 'discard'),
          button('Fork from here', 'secondary small', () => vscode.postMessage({ type: 'forkSession', turnId }), 'repo-forked'),
        );
        div.append(checkpoint);
      }
      return div;
    }
    case 'revert': {
      const div = el('section', 'card revert');
      div.setAttribute('aria-label', `Undo of ${item.turns.length} turn(s)`);
      div.append(el('div', 'card-head', `Undid ${item.turns.length} turn(s), newest first`));
      const list = el('ul', 'files');
      for (const file of item.files) {
        const li = el('li', `file status-${file.status}`);
        li.append(el('code', undefined, file.path), ` ${file.status.replace('_', ' ')}`);
        if (file.reason !== null) {
          li.append(el('div', 'reason', file.reason));
        }
        if (file.diff !== null) {
          li.append(renderDiff(file.diff));
        }
        list.append(li);
      }
      if (item.files.length === 0) {
        list.append(el('li', 'file', 'No file was changed by these turns.'));
      }
      div.append(list);
      for (const command of item.commands) {
        div.append(el('div', 'reason', `Not reverted (its effects are unknown): ${command.tool} ${command.summary}`));
      }
      if (item.conflicts) {
        const turnId = item.turnId;
        div.append(button('Overwrite the changed files', 'secondary danger small', () => vscode.postMessage({ type: 'revertTurn', turnId, force: true }), 'warning'));
      }
      return div;
    }
    case 'note': {
      const div = el('div', `notice note ${item.level}`);
      div.setAttribute('role', item.level === 'error' ? 'alert' : 'note');
      div.append(icon(item.level === 'error' ? 'error' : 'info'), ' ', item.text);
      return div;
    }
  }
}

function renderSessions(m: PanelModel): void {
  const options: { value: string; label: string }[] = [];
  if (m.sessionId === null) {
    options.push({ value: '', label: 'New session' });
  } else if (!m.sessions.some((s) => s.sessionId === m.sessionId)) {
    options.push({ value: m.sessionId, label: m.sessionId });
  }
  for (const s of m.sessions) {
    const when = new Date(s.updatedAt).toLocaleString();
    options.push({ value: s.sessionId, label: `${s.title || '(untitled)'} · ${when}` });
  }
  const key = JSON.stringify(options);
  if (sessionSelect.dataset.key !== key) {
    sessionSelect.dataset.key = key;
    sessionSelect.replaceChildren(
      ...options.map((o) => {
        const opt = el('option', undefined, o.label);
        opt.value = o.value;
        return opt;
      }),
    );
  }
  sessionSelect.value = m.sessionId ?? '';
  sessionSelect.disabled = m.running;
  newSession.disabled = m.running;
}

function render(m: PanelModel): void {
  model = m;
  const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 40;
  const ids = new Set(m.items.map((i) => i.id));
  for (const [id, r] of rendered) {
    if (!ids.has(id)) {
      r.el.remove();
      rendered.delete(id);
    }
  }
  let previous: HTMLElement | null = null;
  for (const item of m.items) {
    let r = rendered.get(item.id);
    if (r === undefined || r.rev !== item.rev) {
      const node = renderItem(item, r?.el);
      node.dataset.id = item.id;
      if (r !== undefined) {
        r.el.replaceWith(node);
      }
      r = { rev: item.rev, el: node };
      rendered.set(item.id, r);
    }
    const expected: ChildNode | null = previous === null ? log.firstChild : previous.nextSibling;
    if (expected !== r.el) {
      log.insertBefore(r.el, expected);
    }
    previous = r.el;
  }
  log.classList.toggle('empty', m.items.length === 0);
  if (atBottom) {
    log.scrollTop = log.scrollHeight;
  }
  status.textContent = m.running ? `pen: ${m.status || 'running'}` : '';
  sessionUsage.textContent = m.sessionUsage === null ? '' : `Session: ${m.sessionUsage}`;
  instructions.textContent = m.instructions ?? '';
  renderPlan(m);
  focusChip.hidden = m.focus === null;
  focusLabel.textContent = m.focus ?? '';
  focusChip.title = m.focus === null ? '' : `Sent with the prompt: ${m.focus}`;
  prompt.disabled = m.running;
  send.disabled = m.running;
  stop.disabled = !m.running;
  renderSessions(m);
}

const PLAN_ICONS: Record<string, string> = {
  pending: 'circle-large-outline',
  in_progress: 'arrow-circle-right',
  done: 'pass-filled',
};

/** The plan's checklist, pinned above the composer: rebuilt from the model's list (at most 50
 * one-line steps), each step's text set as text, never as HTML. */
function renderPlan(m: PanelModel): void {
  plan.hidden = m.plan === null;
  planSteps.replaceChildren(
    ...(m.plan ?? []).map((step) => {
      const li = document.createElement('li');
      li.className = `plan-step ${step.status}`;
      li.dataset.status = step.status;
      const icon = document.createElement('i');
      icon.className = `codicon codicon-${PLAN_ICONS[step.status] ?? 'circle-large-outline'}`;
      icon.setAttribute('aria-hidden', 'true');
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = step.text;
      li.title = step.status.replace('_', ' ');
      li.append(icon, ' ', text);
      return li;
    }),
  );
}

function submit(): void {
  const text = prompt.value;
  if (text.trim() === '' || model?.running === true) {
    return;
  }
  vscode.postMessage({ type: 'send', text });
  prompt.value = '';
  vscode.setState({ draft: '' });
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  submit();
});
prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    submit();
  }
});
prompt.addEventListener('input', () => vscode.setState({ draft: prompt.value }));
stop.addEventListener('click', () => vscode.postMessage({ type: 'stop' }));
dropFocus.addEventListener('click', () => vscode.postMessage({ type: 'dropFocus' }));
newSession.addEventListener('click', () => vscode.postMessage({ type: 'newSession' }));
sessionSelect.addEventListener('change', () => {
  if (sessionSelect.value !== '') {
    vscode.postMessage({ type: 'switchSession', sessionId: sessionSelect.value });
  }
});

window.addEventListener('message', (e: MessageEvent<ToWebview>) => {
  const message = e.data;
  switch (message.type) {
    case 'model':
      render(message.model);
      break;
    case 'prefill':
      prompt.value = message.text;
      vscode.setState({ draft: prompt.value });
      prompt.focus();
      prompt.setSelectionRange(prompt.value.length, prompt.value.length);
      break;
    case 'focus':
      prompt.focus();
      break;
  }
});

const saved = vscode.getState() as { draft?: string } | undefined;
if (saved?.draft !== undefined) {
  prompt.value = saved.draft;
}
stop.disabled = true;
vscode.postMessage({ type: 'ready' });
