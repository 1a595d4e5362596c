//! The side panel's webview: its HTML (strict Content-Security-Policy with a nonce, codicons
//! and scripts from the extension's own files) and the message channel to the controller.

import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import type { FromWebview, PanelModel, ToWebview } from './panelState';

export const VIEW_ID = 'pen.panel';

/** Posts of the model are coalesced: a burst of streamed deltas becomes one post per frame. */
const POST_INTERVAL_MS = 30;

export class PanelView implements vscode.WebviewViewProvider {
  private view: vscode.WebviewView | null = null;
  private pending: PanelModel | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private queued: ToWebview[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly onMessage: (message: FromWebview) => void,
  ) {}

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    view.webview.html = this.html(view.webview, dist);
    view.webview.onDidReceiveMessage((message: FromWebview) => {
      if (message.type === 'ready') {
        // A new webview (first show, or re-created): it needs the whole model and any prefill.
        for (const queued of this.queued) {
          void view.webview.postMessage(queued);
        }
        this.queued = [];
      }
      this.onMessage(message);
    });
    view.onDidDispose(() => {
      if (this.view === view) {
        this.view = null;
      }
    });
  }

  /** Show the panel; `preserveFocus` keeps the cursor where the owner was typing. */
  async reveal(preserveFocus: boolean): Promise<void> {
    if (this.view !== null) {
      this.view.show(preserveFocus);
      return;
    }
    await vscode.commands.executeCommand(`${VIEW_ID}.focus`);
  }

  /** Post the model to the webview soon (the last one wins). */
  postModel(model: PanelModel): void {
    this.pending = model;
    if (this.timer !== null) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      const m = this.pending;
      this.pending = null;
      if (m !== null && this.view !== null) {
        void this.view.webview.postMessage({ type: 'model', model: m } satisfies ToWebview);
      }
    }, POST_INTERVAL_MS);
  }

  /** Post a one-off message; kept until the webview is ready when there is none yet. */
  post(message: ToWebview): void {
    if (this.view === null) {
      this.queued.push(message);
      return;
    }
    void this.view.webview.postMessage(message);
  }

  private html(webview: vscode.Webview, dist: vscode.Uri): string {
    const nonce = crypto.randomBytes(16).toString('base64');
    const src = (...parts: string[]): string => webview.asWebviewUri(vscode.Uri.joinPath(dist, ...parts)).toString();
    const csp = [
      "default-src 'none'",
      `style-src ${webview.cspSource}`,
      `font-src ${webview.cspSource}`,
      `img-src ${webview.cspSource} data:`,
      `script-src 'nonce-${nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${src('codicons', 'codicon.css')}">
<link rel="stylesheet" href="${src('webview.css')}">
<title>pen</title>
</head>
<body>
<header class="sessions">
  <select id="session" aria-label="Session"></select>
  <button id="new-session" class="icon" aria-label="New session" title="New session"><i class="codicon codicon-add" aria-hidden="true"></i></button>
</header>
<main id="log" role="log" aria-label="pen conversation" aria-live="polite"></main>
<section id="plan" aria-label="pen's plan" hidden><h2>Plan</h2><ol id="plan-steps"></ol></section>
<div id="status" role="status" aria-live="polite"></div>
<div id="session-usage" aria-label="Session usage"></div>
<div id="instructions" aria-label="Instruction files"></div>
<form id="composer">
  <div id="focus-chip" class="chip" hidden><i class="codicon codicon-file" aria-hidden="true"></i> <span id="focus-label"></span><button id="drop-focus" type="button" class="icon" aria-label="Do not send the active file with this prompt" title="Do not send it"><i class="codicon codicon-close" aria-hidden="true"></i></button></div>
  <textarea id="prompt" rows="3" aria-label="Ask pen" placeholder="Ask pen (Enter to send, Shift+Enter for a new line)"></textarea>
  <div class="actions">
    <button id="stop" type="button" class="secondary" aria-label="Stop" title="Stop the running turn"><i class="codicon codicon-debug-stop" aria-hidden="true"></i> Stop</button>
    <button id="send" type="submit" aria-label="Send" title="Send (Enter)"><i class="codicon codicon-send" aria-hidden="true"></i> Send</button>
  </div>
</form>
<script nonce="${nonce}" src="${src('webview.js')}"></script>
</body>
</html>`;
  }
}
