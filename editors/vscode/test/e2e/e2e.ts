//! End to end: the packaged extension in a real VS Code (code-server in headless Chromium,
//! driven by playwright-core) against the real `pen serve` and the fake OpenAI provider.
//! Run by test/run.sh, which passes PEN_BIN, CODE_SERVER, VSIX, FAKE_OPENAI and OUT_DIR.
//! Every wait is on a selector or condition with a bounded timeout; each step saves a screenshot.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { chromium, type FrameLocator, type Locator, type Page } from 'playwright-core';

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') {
    throw new Error(`${name} is not set (test/run.sh sets it)`);
  }
  return value;
}

const PEN_BIN = path.resolve(required('PEN_BIN'));
const CODE_SERVER = required('CODE_SERVER');
const VSIX = path.resolve(required('VSIX'));
const FAKE_OPENAI = path.resolve(required('FAKE_OPENAI'));
const OUT_DIR = path.resolve(required('OUT_DIR'));
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** Bounded waits: the workbench takes ~10 s on 2 cores, a turn against the fake a few seconds. */
const STARTUP_MS = 90_000;
const TURN_MS = 30_000;
const UI_MS = 15_000;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pen-vscode-e2e-'));
const ws = path.join(tmp, 'ws');
const dataDir = path.join(tmp, 'data');
const cs = path.join(tmp, 'cs');
const children: ChildProcess[] = [];

// The provider's replies, one per request, in the order the scenarios below make them.
const CRLF_TEXT = 'line one\r\nline two\r\nline three\r\n';
const replies: unknown[] = [
  // 1. A streamed answer, with the usage of a request that read most of its prompt from the cache.
  {
    text: 'Hello from the **fake model**, streamed in pieces.\n\n```rust\nfn main() {}\n```\n\nRaw <img src=x onerror="document.title=1"> stays text.\n',
    usage: { prompt_tokens: 2006, completion_tokens: 300, total_tokens: 2306, prompt_tokens_details: { cached_tokens: 1920 } },
  },
  // 1b. A prompt sent with the editor's selection (the chip in the prompt box).
  { text: 'Saw your selection.' },
  // 2. An edit of the open, unsaved CRLF file, approved in the panel.
  { tool_calls: [{ id: 'call_read_a', name: 'pen_read', arguments: { path: 'a.txt' } }] },
  {
    text: 'I will change line two.',
    tool_calls: [
      {
        id: 'call_edit_a',
        name: 'pen_edit',
        arguments: { path: 'a.txt', edits: [{ old_text: 'line two UNSAVED\n', new_text: 'line two EDITED\n' }] },
      },
    ],
  },
  { text: 'Edited line two.' },
  // 3. Deny.
  { tool_calls: [{ id: 'call_read_b', name: 'pen_read', arguments: { path: 'b.txt' } }] },
  {
    tool_calls: [
      { id: 'call_edit_b', name: 'pen_edit', arguments: { path: 'b.txt', edits: [{ old_text: 'keep me\n', new_text: 'changed\n' }] } },
    ],
  },
  { text: 'Understood, not editing.' },
  // 4. Stop while an approval is pending: both calls of the message are not executed.
  {
    tool_calls: [
      { id: 'call_create', name: 'pen_create', arguments: { path: 'new.txt', content: 'x\n' } },
      { id: 'call_read_after', name: 'pen_read', arguments: { path: 'a.txt' } },
    ],
  },
  // 4b. Stop while the provider is still answering.
  { hang: true },
  // 5. Trimming after a context-window rejection (the first context_trimmed shape).
  { tool_calls: [{ id: 'call_big', name: 'pen_read', arguments: { path: 'big.txt' } }] },
  {
    error: {
      status: 400,
      body: {
        error: {
          message: "This model's maximum context length is 8192 tokens.",
          type: 'invalid_request_error',
          code: 'context_length_exceeded',
        },
      },
    },
  },
  { text: 'Read it, trimmed.' },
  // 6. Trimming by the prompt budget on a small context window (the second shape), in a new
  // session: five pages of a large file, more than an 8000-token window holds.
  ...[1, 41, 81, 121, 161].map((start, i) => ({
    tool_calls: [{ id: `call_page_${i + 1}`, name: 'pen_read', arguments: { path: 'big.txt', start_line: start, line_count: 40 } }],
  })),
  { text: 'Read five pages of big.txt.' },
  // 6b. A prompt too large for the small window fails the turn before any request (no reply).
  // (A page can no longer be too large: pages are fitted to what the budget holds.)
  // 7. After the daemon was killed and restarted.
  { text: 'Back after the crash.' },
  // 8. After "pen: Set API Key": the daemon runs with the stored key.
  { text: 'Authorized by the stored key.' },
  // 9. A plan set, then updated: one checklist, replaced in place.
  {
    tool_calls: [
      {
        id: 'call_plan_1',
        name: 'pen_plan',
        arguments: { steps: [{ text: 'read the parser', status: 'in_progress' }, { text: 'fix the off-by-one', status: 'pending' }] },
      },
    ],
  },
  {
    tool_calls: [
      {
        id: 'call_plan_2',
        name: 'pen_plan',
        arguments: {
          steps: [
            { text: 'read the parser', status: 'done' },
            { text: 'fix the off-by-one', status: 'in_progress' },
            { text: 'run the tests', status: 'pending' },
          ],
        },
      },
    ],
  },
  { text: 'Planned and started.' },
];

function writeWorkspace(): void {
  fs.mkdirSync(path.join(ws, '.git'), { recursive: true });
  fs.mkdirSync(dataDir, { recursive: true });
  fs.writeFileSync(path.join(ws, 'a.txt'), CRLF_TEXT);
  fs.writeFileSync(path.join(ws, 'b.txt'), 'keep me\n');
  const lines: string[] = [];
  for (let i = 1; i <= 400; i++) {
    lines.push(`line ${i} of a big file, long enough to pass the two KiB head`);
  }
  fs.writeFileSync(path.join(ws, 'big.txt'), lines.join('\n') + '\n');
}

/**
 * pen.path for the test: a script that records the daemon's pid (so the crash scenario can kill
 * exactly this daemon) and runs the real binary.
 */
function writePenWrapper(): void {
  const wrapper = path.join(tmp, 'pen');
  fs.writeFileSync(wrapper, `#!/bin/sh\necho $$ >> '${path.join(tmp, 'pen.pids')}'\nexec '${PEN_BIN}' "$@"\n`, { mode: 0o755 });
}

function daemonPids(): number[] {
  const file = path.join(tmp, 'pen.pids');
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').trim().split('\n').map(Number) : [];
}

function writeUserSettings(): void {
  const user = path.join(cs, 'ud', 'User');
  fs.mkdirSync(user, { recursive: true });
  const settings = {
    'workbench.startupEditor': 'none',
    'workbench.secondarySideBar.defaultVisibility': 'hidden',
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'telemetry.telemetryLevel': 'off',
    'update.mode': 'none',
    'workbench.tips.enabled': false,
    'chat.commandCenter.enabled': false,
    'files.eol': 'auto',
    'files.autoSave': 'off',
    'files.hotExit': 'off',
  };
  fs.writeFileSync(path.join(user, 'settings.json'), JSON.stringify(settings, null, 2));
}

/**
 * pen's settings, in the workspace's .vscode/settings.json: code-server reads the workspace's
 * settings at every start, while its user settings were seen to be missing after a reload.
 */
function writePenSettings(baseUrl: string, extra: Record<string, unknown>): void {
  fs.mkdirSync(path.join(ws, '.vscode'), { recursive: true });
  const settings = {
    'pen.path': path.join(tmp, 'pen'),
    'pen.provider': 'openai',
    'pen.model': 'fake',
    'pen.baseUrl': baseUrl,
    ...extra,
  };
  fs.writeFileSync(path.join(ws, '.vscode', 'settings.json'), JSON.stringify(settings, null, 2));
}

/** Start the fake provider; resolves with its base URL once it printed its port. */
function startFake(): Promise<string> {
  const script = path.join(tmp, 'replies.json');
  fs.writeFileSync(script, JSON.stringify(replies));
  const fake = spawn('python3', [FAKE_OPENAI, script], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(fake);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the fake provider printed no port in 10 s')), 10_000);
    let buffered = '';
    fake.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const match = /^(\d+)\n/.exec(buffered);
      if (match !== null) {
        clearTimeout(timer);
        resolve(`http://127.0.0.1:${match[1]}/v1`);
      }
    });
    fake.on('exit', (code) => reject(new Error(`the fake provider exited with ${code}`)));
  });
}

function requestsMade(): string[] {
  const file = path.join(tmp, 'replies.json.requests');
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter((l) => l !== '') : [];
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address() as net.AddressInfo;
      server.close(() => resolve(address.port));
    });
  });
}

async function waitUntil(what: string, timeoutMs: number, condition: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function startCodeServer(port: number): ChildProcess {
  const config = path.join(cs, 'config.yaml');
  fs.writeFileSync(config, `bind-addr: 127.0.0.1:${port}\nauth: none\ncert: false\n`);
  const common = ['--config', config, '--user-data-dir', path.join(cs, 'ud'), '--extensions-dir', path.join(cs, 'exts')];
  const install = spawnSync(CODE_SERVER, [...common, '--install-extension', VSIX, '--force'], { encoding: 'utf8' });
  if (install.status !== 0 || !/successfully installed/i.test(install.stdout + install.stderr)) {
    throw new Error(`installing ${VSIX} failed:\n${install.stdout}\n${install.stderr}`);
  }
  const log = fs.openSync(path.join(OUT_DIR, 'code-server.log'), 'w');
  // Its own process group, so cleanup stops the extension host and pen serve with it.
  const server = spawn(
    CODE_SERVER,
    [
      ...common,
      '--auth',
      'none',
      '--bind-addr',
      `127.0.0.1:${port}`,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      ws,
    ],
    {
      detached: true,
      stdio: ['ignore', log, log],
      env: { ...process.env, PEN_DATA_DIR: dataDir, OPENAI_API_KEY: 'sk-fake', PEN_LOG: 'debug' },
    },
  );
  children.push(server);
  // run.sh's trap stops this group too should this process die before its own cleanup.
  fs.writeFileSync(path.join(OUT_DIR, 'code-server.pgid'), String(server.pid));
  return server;
}

function cleanup(): void {
  for (const child of children.reverse()) {
    if (child.pid !== undefined && child.exitCode === null) {
      try {
        process.kill(child.spawnargs[0] === CODE_SERVER ? -child.pid : child.pid, 'SIGTERM');
      } catch {
        // Already gone.
      }
    }
  }
  children.length = 0;
  fs.rmSync(path.join(OUT_DIR, 'code-server.pgid'), { force: true });
}
process.on('exit', cleanup);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    cleanup();
    process.exit(130);
  });
}

let shot = 0;
async function screenshot(page: Page, name: string): Promise<string> {
  shot += 1;
  const file = path.join(OUT_DIR, `${String(shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

async function step(page: Page, name: string, body: () => Promise<void>): Promise<void> {
  const start = Date.now();
  await body();
  await screenshot(page, name);
  console.log(`ok   ${name} ${Date.now() - start} ms`);
}

/** The panel's document: the webview is an iframe inside an iframe. */
function panel(page: Page): FrameLocator {
  return page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
}

function card(p: FrameLocator, callId: string): Locator {
  return p.locator(`section.card[data-call-id="${callId}"]`);
}

async function turnDone(p: FrameLocator, endsBefore: number): Promise<void> {
  await p.locator('.turn-end').nth(endsBefore).waitFor({ timeout: TURN_MS });
  await waitUntil('the prompt box to be enabled again', UI_MS, () => p.getByRole('textbox', { name: 'Ask pen' }).isEnabled());
}

async function ask(p: FrameLocator, text: string): Promise<number> {
  const endsBefore = await p.locator('.turn-end').count();
  const box = p.getByRole('textbox', { name: 'Ask pen' });
  await box.click();
  await box.fill(text);
  await box.press('Enter');
  return endsBefore;
}

/** Run a command from the F1 palette by its exact title. */
async function runCommand(page: Page, title: string): Promise<void> {
  await page.locator('.monaco-workbench').waitFor({ timeout: STARTUP_MS });
  const input = page.locator('.quick-input-widget input');
  const row = page
    .locator('.quick-input-list .monaco-list-row')
    .filter({ has: page.locator('.label-name', { hasText: new RegExp(`^${title}$`) }) })
    .first();
  // A workbench that is still starting may miss the key, and a palette opened before the
  // extensions' commands are known lists none of them and never refreshes ("No matching
  // commands" after a reload): open it again, and type again, until the command is listed.
  let polls = 0;
  await waitUntil(`"${title}" in the command palette`, STARTUP_MS, async () => {
    if (polls++ % 20 === 0) {
      if (await input.isVisible()) {
        await page.keyboard.press('Escape');
      }
      await page.keyboard.press('F1');
      if (await input.isVisible()) {
        await input.fill(`>${title}`);
      }
    }
    return row.isVisible();
  });
  await row.click({ timeout: UI_MS });
}

/** The text of the active editor, as the editor renders it (non-breaking spaces as spaces). */
async function editorText(page: Page): Promise<string> {
  const text = await page.locator('.editor-instance .monaco-editor .view-lines').first().innerText();
  return text.replace(/\u00a0/g, ' ');
}

async function main(): Promise<void> {
  fs.mkdirSync(OUT_DIR, { recursive: true });
  for (const old of fs.readdirSync(OUT_DIR)) {
    if (old.endsWith('.png')) {
      fs.rmSync(path.join(OUT_DIR, old));
    }
  }
  writeWorkspace();
  const baseUrl = await startFake();
  writeUserSettings();
  writePenWrapper();
  writePenSettings(baseUrl, {});
  const port = await freePort();
  startCodeServer(port);
  const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`;
  await waitUntil('code-server to answer', STARTUP_MS, async () => {
    try {
      return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok;
    } catch {
      return false;
    }
  });

  const context = await chromium.launchPersistentContext(path.join(tmp, 'chromium'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(UI_MS);
  // The browser's console, kept for failures; a Content-Security-Policy violation fails the test.
  const consoleLog = fs.createWriteStream(path.join(OUT_DIR, 'console.log'));
  const violations: string[] = [];
  page.on('console', (message) => {
    const line = `[${message.type()}] ${message.location().url}: ${message.text()}`;
    consoleLog.write(line + '\n');
    if (/Content Security Policy|Refused to (load|execute|apply|connect)/i.test(message.text())) {
      violations.push(line);
    }
  });
  const p = panel(page);
  try {
    await step(page, 'panel-open', async () => {
      await page.goto(url);
      await page.locator('.monaco-workbench').waitFor({ timeout: STARTUP_MS });
      await page.getByRole('tab', { name: 'pen', exact: true }).click({ timeout: STARTUP_MS });
      await p.getByRole('textbox', { name: 'Ask pen' }).waitFor({ timeout: STARTUP_MS });
      for (const name of ['Send', 'Stop', 'New session']) {
        await p.getByRole('button', { name, exact: true }).waitFor();
      }
      // A wider side bar, as a chat panel is usually given: drag its edge.
      const bar = await page.locator('.part.sidebar').boundingBox();
      if (bar === null) {
        throw new Error('no side bar');
      }
      await page.mouse.move(bar.x + bar.width + 1, bar.y + 300);
      await page.mouse.down();
      await page.mouse.move(bar.x + bar.width + 160, bar.y + 300, { steps: 5 });
      await page.mouse.up();
      await waitUntil('the side bar to widen', UI_MS, async () =>
        ((await page.locator('.part.sidebar').boundingBox())?.width ?? 0) > bar.width + 100,
      );
    });

    await step(page, 'streamed-answer', async () => {
      const ends = await ask(p, 'say hello');
      await p.getByText('Hello from the fake model, streamed in pieces.').waitFor({ timeout: TURN_MS });
      await turnDone(p, ends);
      await p.locator('.msg.answer pre code', { hasText: 'fn main() {}' }).waitFor();
      await p.locator('.msg.answer strong', { hasText: 'fake model' }).waitFor();
      // The model's raw HTML is shown as text, never as markup.
      await p.getByText('Raw <img src=x onerror="document.title=1"> stays text.').waitFor();
      if ((await p.locator('.msg.answer img').count()) !== 0) {
        throw new Error('raw HTML from the model became an element');
      }
      // The turn's usage at its end, and the session's under the log.
      await p
        .locator('.turn-end .usage', { hasText: 'This turn: 2,006 input tokens (95% cached), 300 output tokens' })
        .waitFor({ timeout: UI_MS });
      await p
        .locator('#session-usage', { hasText: 'Session: 2,006 input tokens (95% cached), 300 output tokens' })
        .waitFor({ timeout: UI_MS });
    });

    await step(page, 'crlf-file-unsaved', async () => {
      await page.keyboard.press('Control+P');
      await page.locator('.quick-input-widget input').fill('a.txt');
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'a.txt' }).first().waitFor();
      await page.keyboard.press('Enter');
      await page.locator('.tab.active', { hasText: 'a.txt' }).waitFor();
      await page.locator('.statusbar-item', { hasText: 'CRLF' }).waitFor();
      await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
      await page.keyboard.press('Control+Home');
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('End');
      await page.keyboard.type(' UNSAVED');
      // Unsaved work outside the edit's span, which the edit must keep.
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('End');
      await page.keyboard.type(' KEPT');
      await page.locator('.tab.active.dirty', { hasText: 'a.txt' }).waitFor();
    });

    await step(page, 'selection-chip', async () => {
      // Select the first line: the chip shows it, and the prompt carries it to the model.
      await page.keyboard.press('Control+Home');
      await page.keyboard.press('Shift+End');
      const chip = p.locator('#focus-chip');
      await chip.locator('#focus-label', { hasText: 'a.txt:1-1' }).waitFor({ timeout: UI_MS });
      const before = requestsMade().length;
      const ends = await ask(p, 'what did I select');
      await turnDone(p, ends);
      await p.getByText('Saw your selection.').waitFor();
      const sent = requestsMade().slice(before);
      const carried = sent.some(
        (body) => body.includes('What the owner has in view') && body.includes('Selection: lines 1-1') && body.includes('line one'),
      );
      if (!carried) {
        throw new Error(`the selection did not reach the request: ${sent.join('\n').slice(0, 2000)}`);
      }
      // The chip can be removed; a new selection brings it back.
      await chip.getByRole('button', { name: 'Do not send the active file with this prompt' }).click();
      await chip.waitFor({ state: 'hidden', timeout: UI_MS });
      await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
      await page.keyboard.press('Control+Home');
      await chip.waitFor({ state: 'visible', timeout: UI_MS });
    });

    let ends = 0;
    await step(page, 'edit-approval', async () => {
      ends = await ask(p, 'change line two');
      const edit = card(p, 'call_edit_a');
      await edit.getByRole('button', { name: 'Allow', exact: true }).waitFor({ timeout: TURN_MS });
      await edit.getByRole('button', { name: 'Allow for session', exact: true }).waitFor();
      await edit.getByRole('button', { name: 'Deny', exact: true }).waitFor();
      await edit.locator('pre.diff .add', { hasText: '+line two EDITED' }).waitFor();
      await card(p, 'call_read_a').locator('.state', { hasText: 'done' }).waitFor();
      await p.getByText('I will change line two.').waitFor();
      // $/progress (VS Code's window progress) and the extension's status item show the turn.
      await page.locator('[id="status.progress"]', { hasText: 'pen: waiting for approval' }).waitFor();
      await page.locator('[id="pen-dev.pen.pen.status"]', { hasText: 'pen: waiting for approval' }).waitFor();
    });
    // The README's picture (docs/vscode-panel.png): the panel mid-turn beside the edited file.
    await page.screenshot({ path: path.join(OUT_DIR, 'panel.png'), clip: { x: 0, y: 0, width: 900, height: 900 } });

    await step(page, 'edit-diff-editor', async () => {
      await card(p, 'call_edit_a').getByRole('button', { name: /Open diff/ }).click();
      await page.locator('.monaco-diff-editor').first().waitFor();
      await page.locator('.tab.active', { hasText: "pen's edit call_edit_a" }).waitFor();
    });

    await step(page, 'edit-applied', async () => {
      await card(p, 'call_edit_a').getByRole('button', { name: 'Allow', exact: true }).click();
      await turnDone(p, ends);
      await card(p, 'call_edit_a').locator('.state', { hasText: 'done' }).waitFor();
      await p.getByText('Edited line two.').waitFor();
      // The edit landed in the editor: CRLF kept, the file unsaved and the disk untouched.
      await page.locator('.tab', { hasText: /^a\.txt/ }).first().click();
      await waitUntil('the edit in the editor', UI_MS, async () => (await editorText(page)).includes('line two EDITED'));
      const text = await editorText(page);
      if (!text.includes('line one') || !text.includes('line three KEPT') || text.includes('UNSAVED')) {
        throw new Error(`editor text after the edit: ${JSON.stringify(text)}`);
      }
      await page.locator('.tab.active.dirty', { hasText: 'a.txt' }).waitFor();
      await page.locator('.statusbar-item', { hasText: 'CRLF' }).waitFor();
      const disk = fs.readFileSync(path.join(ws, 'a.txt'), 'utf8');
      if (disk !== CRLF_TEXT) {
        throw new Error(`a.txt on disk changed: ${JSON.stringify(disk)}`);
      }
      // The edit is one undo step in the editor.
      await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
      await page.keyboard.press('Control+Z');
      await waitUntil('undo to restore the unsaved text', UI_MS, async () => {
        const undone = await editorText(page);
        return undone.includes('line two UNSAVED') && undone.includes('line three KEPT');
      });
      // Redo and save: the file on disk has the edit, the kept text and CRLF throughout.
      await page.keyboard.press('Control+Shift+Z');
      await waitUntil('redo to bring the edit back', UI_MS, async () => (await editorText(page)).includes('line two EDITED'));
      await page.keyboard.press('Control+S');
      const saved = 'line one\r\nline two EDITED\r\nline three KEPT\r\n';
      await waitUntil('a.txt saved with CRLF', UI_MS, () => fs.readFileSync(path.join(ws, 'a.txt'), 'utf8') === saved);
    });

    await step(page, 'undo-turn-through-the-editor', async () => {
      // "Undo this turn's changes" on the edit's turn: the open buffer goes back to the text pen
      // edited (the unsaved line), through the editor, so VS Code's undo takes the revert back.
      await p.locator('.turn-end').nth(ends).getByRole('button', { name: "Undo this turn's changes" }).click();
      const undo = p.locator('section.card.revert').last();
      await undo.locator('li.file.status-reverted', { hasText: 'a.txt' }).waitFor({ timeout: TURN_MS });
      await page.locator('.tab', { hasText: /^a\.txt/ }).first().click();
      await waitUntil('the revert in the editor', UI_MS, async () => {
        const text = await editorText(page);
        return text.includes('line two UNSAVED') && text.includes('line three KEPT') && !text.includes('EDITED');
      });
      await page.locator('.statusbar-item', { hasText: 'CRLF' }).waitFor();
      await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
      await page.keyboard.press('Control+Z');
      await waitUntil('undo to take the revert back', UI_MS, async () => (await editorText(page)).includes('line two EDITED'));
      const saved = 'line one\r\nline two EDITED\r\nline three KEPT\r\n';
      if (fs.readFileSync(path.join(ws, 'a.txt'), 'utf8') !== saved) {
        throw new Error('the revert of an open buffer wrote the disk');
      }
    });

    await step(page, 'ask-about-selection', async () => {
      await page.keyboard.press('Control+Home');
      await page.keyboard.press('Shift+ArrowDown');
      await page.keyboard.press('Shift+ArrowDown');
      await runCommand(page, 'pen: Ask About Selection');
      const box = p.getByRole('textbox', { name: 'Ask pen' });
      await waitUntil('the prompt box prefilled with the selection', UI_MS, async () => {
        const value = await box.inputValue();
        return value.includes('Selection from `a.txt` lines 1-2:') && value.includes('```plaintext\nline one\nline two EDITED\n```');
      });
      await box.fill('');
    });

    await step(page, 'deny', async () => {
      ends = await ask(p, 'edit b');
      const edit = card(p, 'call_edit_b');
      await edit.getByRole('button', { name: 'Deny', exact: true }).click({ timeout: TURN_MS });
      await turnDone(p, ends);
      await edit.locator('.state', { hasText: 'denied by the owner' }).waitFor();
      await p.getByText('Understood, not editing.').waitFor();
      if (fs.readFileSync(path.join(ws, 'b.txt'), 'utf8') !== 'keep me\n') {
        throw new Error('b.txt changed after Deny');
      }
    });

    await step(page, 'stop-not-executed', async () => {
      ends = await ask(p, 'create a file and read a.txt');
      await card(p, 'call_create').getByRole('button', { name: 'Allow', exact: true }).waitFor({ timeout: TURN_MS });
      await waitUntil('the prompt box to be disabled while the turn runs', UI_MS, async () =>
        !(await p.getByRole('textbox', { name: 'Ask pen' }).isEnabled()),
      );
      await p.getByRole('button', { name: 'Stop', exact: true }).click();
      await turnDone(p, ends);
      await card(p, 'call_create').locator('.state', { hasText: 'not executed' }).waitFor();
      await card(p, 'call_read_after').locator('.state', { hasText: 'not executed' }).waitFor();
      await p.locator('.turn-end.reason-cancelled').last().waitFor();
      if (fs.existsSync(path.join(ws, 'new.txt'))) {
        throw new Error('new.txt was created after Stop');
      }
    });

    await step(page, 'stop-while-streaming', async () => {
      const before = requestsMade().length;
      ends = await ask(p, 'wait forever');
      await waitUntil('the hanging provider request', TURN_MS, () => requestsMade().length > before);
      await p.getByRole('button', { name: 'Stop', exact: true }).click();
      await turnDone(p, ends);
      await p.locator('.turn-end.reason-cancelled').nth(1).waitFor();
    });

    await step(page, 'trimmed-after-rejection', async () => {
      ends = await ask(p, 'read big.txt');
      await turnDone(p, ends);
      await p.locator('.notice.trim', { hasText: '1 tool result cut to a 2048-byte head' }).waitFor();
      await p.getByText('Read it, trimmed.').waitFor();
    });

    await step(page, 'trimmed-by-budget', async () => {
      // A small context window, through the workspace's settings (pen/setConfig on change), in a
      // new session.
      writePenSettings(baseUrl, { 'pen.contextWindowTokens': 8000, 'pen.maxOutputTokens': 256 });
      await page.locator('.statusbar-item', { hasText: 'pen: settings applied' }).waitFor();
      await p.getByRole('button', { name: 'New session', exact: true }).click();
      await waitUntil('an empty panel', UI_MS, async () => (await p.locator('#log > *').count()) === 0);
      const before = requestsMade().length;
      ends = await ask(p, 'read big.txt page by page');
      await turnDone(p, ends);
      await p.getByText('Read five pages of big.txt.').waitFor();
      const notice = p.locator('.notice.trim', { hasText: 'excerpted' }).first();
      await notice.waitFor();
      const text = await notice.innerText();
      if (!/\d[\d,]* → \d[\d,]* tokens \(budget 5,184\)/.test(text)) {
        throw new Error(`the budget notice lacks tokens before/after: ${text}`);
      }
      const sent = requestsMade().slice(before);
      if (!sent.some((body) => /"max_(completion_)?tokens": ?256/.test(body))) {
        throw new Error('the requests do not carry max_output_tokens = 256 from the settings');
      }
    });

    await step(page, 'failed-turn-says-what-to-do', async () => {
      // About 10,000 tokens of prompt against a 5,184-token budget.
      ends = await ask(p, `read all of this at once: ${'lorem ipsum '.repeat(3_400)}`);
      await turnDone(p, ends);
      const failed = p.locator('.turn-end.reason-error').last();
      await failed.locator('.last-error', { hasText: 'does not fit the prompt budget' }).waitFor();
      await failed.getByRole('button', { name: 'Start a new session', exact: true }).waitFor();
    });

    await step(page, 'resumed-after-reload', async () => {
      await page.reload();
      await page.locator('.monaco-workbench').waitFor({ timeout: STARTUP_MS });
      // "pen: Ask" from the command palette shows the panel whether or not the workbench has
      // restored it yet (clicking the activity bar tab would close a restored one).
      await runCommand(page, 'pen: Ask');
      await p.getByRole('textbox', { name: 'Ask pen' }).waitFor({ timeout: STARTUP_MS });
      // The session is re-rendered from pen/getTranscript.
      await p.locator('.notice.trim', { hasText: 'excerpted' }).first().waitFor({ timeout: TURN_MS });
      await p.getByText('Read five pages of big.txt.').waitFor();
    });

    await step(page, 'switched-session', async () => {
      const select = p.getByRole('combobox', { name: 'Session' });
      const value = await select.locator('option', { hasText: 'say hello' }).getAttribute('value');
      if (value === null) {
        throw new Error('the first session is not in the session list');
      }
      await select.selectOption(value);
      await card(p, 'call_edit_b').locator('.state', { hasText: 'denied by the owner' }).waitFor({ timeout: TURN_MS });
      await card(p, 'call_create').locator('.state', { hasText: 'not executed' }).waitFor();
      await p.locator('.notice.trim', { hasText: '1 tool result cut to a 2048-byte head' }).waitFor();
      await p.getByText('Edited line two.').waitFor();
    });

    await step(page, 'hidden-and-shown', async () => {
      // Hiding the side bar and showing it again keeps the conversation and the draft.
      const box = p.getByRole('textbox', { name: 'Ask pen' });
      await box.fill('a draft');
      const tab = page.getByRole('tab', { name: 'pen', exact: true });
      await tab.click();
      await page.locator('.part.sidebar').waitFor({ state: 'hidden' });
      await runCommand(page, 'pen: Ask');
      await page.locator('.part.sidebar').waitFor();
      await p.getByText('Edited line two.').waitFor();
      if ((await box.inputValue()) !== 'a draft') {
        throw new Error(`the draft after hiding the panel: ${await box.inputValue()}`);
      }
      await box.fill('');
    });

    await step(page, 'daemon-crash-restarted', async () => {
      const pids = daemonPids();
      process.kill(pids[pids.length - 1], 'SIGKILL');
      await page.locator('.notification-toast', { hasText: 'pen serve stopped unexpectedly; restarting it in 1 s' }).waitFor();
      await waitUntil('a new pen serve', TURN_MS, () => daemonPids().length > pids.length);
      const ends = await ask(p, 'are you back');
      await turnDone(p, ends);
      await p.getByText('Back after the crash.').waitFor();
    });

    await step(page, 'api-key-from-secret-storage', async () => {
      await runCommand(page, 'pen: Set API Key');
      const input = page.locator('.quick-input-widget input[type="password"]');
      await input.waitFor();
      await input.fill('sk-from-secret-storage');
      await page.keyboard.press('Enter');
      await page.locator('.notification-toast', { hasText: 'pen: restarted with the new API key.' }).waitFor({ timeout: TURN_MS });
      const ends = await ask(p, 'who am I');
      await turnDone(p, ends);
      await p.getByText('Authorized by the stored key.').waitFor();
      const authorization = fs.readFileSync(path.join(tmp, 'replies.json.authorization'), 'utf8').trim().split('\n');
      if (authorization[authorization.length - 1] !== 'Bearer sk-from-secret-storage') {
        throw new Error(`the last request's Authorization: ${authorization[authorization.length - 1]}`);
      }
      if (fs.readFileSync(path.join(cs, 'ud', 'User', 'settings.json'), 'utf8').includes('sk-from-secret-storage')) {
        throw new Error('the API key landed in settings.json');
      }
    });

    await step(page, 'plan-checklist', async () => {
      const ends = await ask(p, 'plan the parser fix');
      await turnDone(p, ends);
      await p.getByText('Planned and started.').waitFor();
      await card(p, 'call_plan_2').locator('.state', { hasText: 'done' }).waitFor();
      // One checklist, pinned above the prompt box, showing the latest plan in order.
      const plan = p.getByRole('region', { name: "pen's plan" });
      await plan.waitFor({ timeout: UI_MS });
      const shown = async (): Promise<string[]> =>
        plan.locator('li.plan-step').evaluateAll((items) => items.map((li) => `${(li as HTMLElement).dataset.status}: ${li.textContent?.trim()}`));
      const expected = ['done: read the parser', 'in_progress: fix the off-by-one', 'pending: run the tests'];
      await waitUntil('the updated checklist', UI_MS, async () => JSON.stringify(await shown()) === JSON.stringify(expected));
      if ((await p.locator('#plan').count()) !== 1) {
        throw new Error('more than one plan checklist');
      }
      await screenshot(page, 'plan');
    });

    await step(page, 'missing-binary', async () => {
      writePenSettings(baseUrl, {
        'pen.contextWindowTokens': 8000,
        'pen.maxOutputTokens': 256,
        'pen.path': '/nonexistent/pen',
      });
      const toast = page
        .locator('.notification-toast', { hasText: 'the pen binary "/nonexistent/pen" was not found' })
        .first();
      await toast.waitFor({ timeout: TURN_MS });
      await toast.getByRole('button', { name: 'Open Settings' }).waitFor();
    });
    if (violations.length > 0) {
      throw new Error(`Content-Security-Policy violations:\n${violations.join('\n')}`);
    }
  } catch (err) {
    await screenshot(page, 'failure').catch(() => undefined);
    throw err;
  } finally {
    await context.close().catch(() => undefined);
  }
}

const started = Date.now();
main().then(
  () => {
    console.log(`e2e: all scenarios passed in ${Date.now() - started} ms; screenshots in ${OUT_DIR}`);
    cleanup();
    fs.rmSync(tmp, { recursive: true, force: true });
    process.exit(0);
  },
  (err: unknown) => {
    console.error(`FAIL e2e: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
    console.error(`  screenshots and code-server.log in ${OUT_DIR}; pen's log in ${path.join(dataDir, 'logs')}`);
    const logs = spawnSync('find', [path.join(cs, 'ud', 'logs'), '-name', '*-pen.log'], { encoding: 'utf8' }).stdout;
    for (const file of logs.split('\n').filter((f) => f !== '')) {
      console.error(`  --- ${file} (the extension's output channel), last lines:`);
      console.error(fs.readFileSync(file, 'utf8').split('\n').slice(-30).join('\n'));
    }
    cleanup();
    process.exit(1);
  },
);
