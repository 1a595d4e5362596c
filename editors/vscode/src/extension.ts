//! The pen extension's entry point: wires the daemon, the panel and the commands together.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { Controller } from './controller';
import { Daemon } from './daemon';
import { DiffViews } from './diffs';
import { PanelView, VIEW_ID } from './panel';
import { METHODS, type McpStatusResponse } from './protocol.generated';
import { configChange, type PenSettings, toPenConfig } from './settings';

const SECRET_KEY = 'pen.apiKey';

function readSettings(): PenSettings {
  const c = vscode.workspace.getConfiguration('pen');
  return {
    provider: c.get<string>('provider') ?? '',
    model: c.get<string>('model') ?? '',
    baseUrl: c.get<string>('baseUrl') ?? '',
    maxToolResultBytes: c.get<number | null>('maxToolResultBytes') ?? null,
    contextWindowTokens: c.get<number | null>('contextWindowTokens') ?? null,
    maxOutputTokens: c.get<number | null>('maxOutputTokens') ?? null,
    autoApprove: c.get<string[]>('autoApprove') ?? [],
    mcpServers: c.get<Record<string, unknown>>('mcpServers') ?? {},
  };
}

/** pen's data directory, as the daemon computes it: $PEN_DATA_DIR, else the platform's. */
function dataDir(): string {
  const env = process.env.PEN_DATA_DIR;
  if (env !== undefined && env !== '') {
    return env;
  }
  if (process.platform === 'darwin') {
    return path.join(os.homedir(), 'Library', 'Application Support', 'pen');
  }
  if (process.platform === 'win32') {
    return path.join(process.env.APPDATA ?? os.homedir(), 'pen');
  }
  const xdg = process.env.XDG_DATA_HOME;
  return path.join(xdg !== undefined && xdg !== '' ? xdg : path.join(os.homedir(), '.local', 'share'), 'pen');
}

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel('pen');
  let hasKey = false;
  /** The config the daemon has: what initializationOptions or the last pen/setConfig sent. */
  let sent: Record<string, unknown> = {};

  // The controller and the daemon refer to each other through these hooks.
  let controller: Controller | null = null;
  const daemon = new Daemon(
    output,
    {
      wire: (client) => controller?.wire(client),
      stopped: (message) => controller?.stopped(message),
      ready: () => void controller?.ready(),
    },
    () => vscode.workspace.getConfiguration('pen').get<string>('path') || 'pen',
    () => {
      sent = toPenConfig(readSettings(), hasKey);
      return sent;
    },
    async () => {
      const key = await context.secrets.get(SECRET_KEY);
      hasKey = key !== undefined && key !== '';
      return key;
    },
  );
  const diffs = new DiffViews();
  const panel = new PanelView(context.extensionUri, (message) => controller?.handle(message));
  controller = new Controller(context, daemon, panel, diffs, output);
  const ctl = controller;

  context.subscriptions.push(
    output,
    daemon,
    diffs,
    ctl,
    vscode.window.registerWebviewViewProvider(VIEW_ID, panel, {
      // The conversation, its scroll position and the draft survive hiding the panel.
      webviewOptions: { retainContextWhenHidden: true },
    }),
    vscode.commands.registerCommand('pen.ask', async () => {
      await panel.reveal(false);
      panel.post({ type: 'focus' });
      void daemon.ensure();
    }),
    vscode.commands.registerCommand('pen.askAboutSelection', async () => {
      const editor = vscode.window.activeTextEditor;
      if (editor === undefined) {
        void vscode.window.showInformationMessage('pen: open a file and select some text first.');
        return;
      }
      const doc = editor.document;
      const sel = editor.selection;
      const range = sel.isEmpty ? doc.lineAt(sel.active.line).range : sel;
      const first = range.start.line + 1;
      const last = range.end.character === 0 && range.end.line > range.start.line ? range.end.line : range.end.line + 1;
      const rel = vscode.workspace.asRelativePath(doc.uri, false);
      // The prompt is plain text: the file's CRLF would become LF in the prompt box anyway.
      const text = doc
        .getText(new vscode.Range(first - 1, 0, last - 1, doc.lineAt(last - 1).text.length))
        .replace(/\r\n/g, '\n');
      await panel.reveal(false);
      ctl.prefill(`Selection from \`${rel}\` lines ${first}-${last}:\n\`\`\`${doc.languageId}\n${text}\n\`\`\`\n\n`);
      void daemon.ensure();
    }),
    vscode.commands.registerCommand('pen.stop', () => ctl.stop()),
    vscode.commands.registerCommand('pen.newSession', async () => {
      await panel.reveal(false);
      await ctl.newSession();
    }),
    vscode.commands.registerCommand('pen.showLog', async () => {
      output.show(true);
      const logs = path.join(dataDir(), 'logs');
      let files: string[] = [];
      try {
        files = fs.readdirSync(logs).filter((f) => f.startsWith('pen.log')).sort();
      } catch {
        // No log yet: the output channel has what the extension saw.
      }
      if (files.length > 0) {
        const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(path.join(logs, files[files.length - 1])));
        await vscode.window.showTextDocument(doc, { preview: true });
      }
    }),
    vscode.commands.registerCommand('pen.setApiKey', async () => {
      const key = await vscode.window.showInputBox({
        title: 'pen: API key',
        prompt: 'The API key of your model provider. It is kept in VS Code\'s secret storage and given to pen serve in its environment.',
        password: true,
        ignoreFocusOut: true,
      });
      if (key === undefined || key.trim() === '') {
        return;
      }
      await context.secrets.store(SECRET_KEY, key.trim());
    }),
    vscode.commands.registerCommand('pen.clearApiKey', () => context.secrets.delete(SECRET_KEY)),
    vscode.commands.registerCommand('pen.mcpStatus', async () => {
      const client = await daemon.ensure();
      if (client === null) {
        return;
      }
      const answer = await client.sendRequest<McpStatusResponse>(METHODS.MCP_STATUS, {});
      const lines = answer.servers.map(
        (s) =>
          `${s.name}: ${s.status}, ${s.toolCount} tools, ~${s.schemaTokens} schema tokens` +
          `${s.project ? ' (.mcp.json)' : ''}${s.reason ? ` — ${s.reason}` : ''}`,
      );
      output.appendLine('MCP servers:');
      for (const line of lines.length > 0 ? lines : ['none configured']) {
        output.appendLine(`  ${line}`);
      }
      output.show(true);
      const failed = answer.servers.filter((s) => s.status === 'failed').length;
      void vscode.window.showInformationMessage(
        `pen: ${answer.servers.length} MCP server(s)${failed > 0 ? `, ${failed} failed` : ''} (details in the output).`,
      );
    }),
    // pen reads the key from its environment at start: a new key needs a new daemon.
    context.secrets.onDidChange(async (e) => {
      if (e.key === SECRET_KEY && daemon.client !== null) {
        await daemon.restart();
        void vscode.window.showInformationMessage('pen: restarted with the new API key.');
      }
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration('pen')) {
        return;
      }
      output.appendLine(`pen settings changed (pen.path: ${e.affectsConfiguration('pen.path')})`);
      // A new path is tried at once, also after a start that found no binary (in a browser
      // the settings may arrive after the panel asked for pen).
      if (e.affectsConfiguration('pen.path')) {
        if (daemon.client !== null || daemon.wanted) {
          await daemon.restart();
        }
        return;
      }
      if (daemon.client === null) {
        return;
      }
      const next = toPenConfig(readSettings(), hasKey);
      const change = configChange(sent, next);
      output.appendLine(`settings changed: ${JSON.stringify(change)}`);
      if (change.kind === 'restart') {
        await daemon.restart();
      } else if (change.kind === 'set') {
        try {
          await daemon.client.sendRequest(METHODS.SET_CONFIG, change.params);
          sent = next;
          vscode.window.setStatusBarMessage('pen: settings applied', 10_000);
        } catch (err) {
          const message = `pen: the setting was not applied: ${err instanceof Error ? err.message : String(err)}`;
          output.appendLine(message);
          void vscode.window.showErrorMessage(message);
        }
      }
    }),
  );
}

export function deactivate(): void {
  // The subscriptions stop the daemon.
}
