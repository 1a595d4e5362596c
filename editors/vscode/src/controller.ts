//! The controller: owns the panel's model, turns the owner's actions into pen requests and pen's
//! events, approval requests and answers into model updates (through panelState's reducers).

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { Daemon } from './daemon';
import type { DiffViews } from './diffs';
import type { PanelView } from './panel';
import * as state from './panelState';
import { METHODS } from './protocol.generated';
import type {
  ApprovalParams,
  ApprovalResponse,
  Decision,
  EventParams,
  GetTranscriptParams,
  ListSessionsParams,
  ListSessionsResponse,
  GetSessionContextParams,
  Mode,
  NewSessionParams,
  PromptContext,
  PromptParams,
  PromptResponse,
  ForkSessionParams,
  ForkSessionResult,
  RevertTurnParams,
  RevertTurnResult,
  SessionContextResponse,
  SessionSummary,
  SetModeParams,
  StopParams,
  TranscriptResponse,
} from './protocol.generated';

const SESSION_KEY = 'pen.sessionId';
const MODE_KEY = 'pen.mode';
/** Characters of the first prompt that become a new session's title. */
const TITLE_CHARS = 60;

export class Controller implements vscode.Disposable {
  private model: state.PanelModel = state.emptyModel();
  /** Answers for the pending `pen/requestApproval` requests, by callId. */
  private readonly approvals = new Map<string, (answer: ApprovalResponse) => void>();
  private readonly statusItem: vscode.StatusBarItem;
  private restored = false;
  /** The owner removed the focus chip; it comes back when the editor or selection changes. */
  private focusDropped = false;
  private readonly focusWatch: vscode.Disposable[] = [];
  /** The mode each session was last sent (`pen/setMode`) by this window's daemon. */
  private readonly modeSent = new Map<string, Mode>();

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly daemon: Daemon,
    private readonly panel: PanelView,
    private readonly diffs: DiffViews,
    private readonly output: vscode.OutputChannel,
  ) {
    this.statusItem = vscode.window.createStatusBarItem('pen.status', vscode.StatusBarAlignment.Left, 100);
    this.statusItem.name = 'pen';
    this.statusItem.command = 'pen.ask';
    const refocus = (): void => {
      this.focusDropped = false;
      this.showFocus();
    };
    this.focusWatch.push(
      vscode.window.onDidChangeActiveTextEditor(refocus),
      vscode.window.onDidChangeTextEditorSelection(refocus),
    );
  }

  /** What the owner has in view, for `pen/prompt`: the active file editor, its selection
   * (its text as the buffer has it, unsaved changes included) and visible ranges. */
  private focusContext(): PromptContext | null {
    const editor = vscode.window.activeTextEditor;
    if (this.focusDropped || editor === undefined || editor.document.uri.scheme !== 'file') {
      return null;
    }
    const lines = (r: vscode.Range) => ({
      startLine: r.start.line + 1,
      // A selection that ends at the start of a line does not take that line.
      endLine: Math.max(r.start.line + 1, r.end.character === 0 && r.end.line > r.start.line ? r.end.line : r.end.line + 1),
    });
    const context: PromptContext = {
      activeFile: editor.document.uri.fsPath,
      visibleRanges: editor.visibleRanges.map(lines),
    };
    if (!editor.selection.isEmpty) {
      context.selection = { ...lines(editor.selection), text: editor.document.getText(editor.selection) };
    }
    return context;
  }

  /** Updates the chip in the prompt box. */
  private showFocus(): void {
    const context = this.focusContext();
    const focus =
      context === null || context.activeFile === undefined
        ? null
        : state.focusLabel(vscode.workspace.asRelativePath(context.activeFile), context.selection ?? null);
    if (focus !== this.model.focus) {
      this.set({ ...this.model, focus });
    }
  }

  /** Shows the session's instruction files (name, size, cut) from `pen/getSessionContext`. */
  private async refreshInstructions(client: LanguageClient, sessionId: string): Promise<void> {
    try {
      const params: GetSessionContextParams = { sessionId };
      const context = await client.sendRequest<SessionContextResponse>(METHODS.GET_SESSION_CONTEXT, params);
      const instructions = state.instructionsLine(context.changed ?? context.instructions);
      if (this.model.sessionId === sessionId) {
        this.set({ ...this.model, instructions });
      }
    } catch {
      // An older pen without the method: the panel shows no instruction line.
    }
  }

  private set(model: state.PanelModel): void {
    this.model = model;
    this.panel.postModel(model);
    if (model.running) {
      this.statusItem.text = `$(loading~spin) ${state.statusLine(model)}`;
      this.statusItem.tooltip = 'pen is working on your prompt; "pen: Stop" stops it';
      this.statusItem.show();
    } else {
      this.statusItem.hide();
    }
  }

  /** Register pen's notifications and requests on a (new) client. */
  wire(client: LanguageClient): void {
    client.onNotification(METHODS.EVENT, (event: EventParams) => {
      this.set(state.applyEvent(this.model, event));
      if (event.kind === 'approval_withdrawn') {
        this.settle(String(event.data.callId), { decision: 'deny', reason: 'withdrawn' });
      }
    });
    client.onRequest(METHODS.REQUEST_APPROVAL, (params: ApprovalParams, token: vscode.CancellationToken) =>
      this.askApproval(params, token),
    );
  }

  /** The daemon is up: show the sessions and, once per window, resume the last session. */
  async ready(): Promise<void> {
    await this.refreshSessions();
    await this.restoreMode();
    if (!this.restored) {
      this.restored = true;
      const last = this.context.workspaceState.get<string>(SESSION_KEY);
      if (last !== undefined && this.model.sessionId === null) {
        await this.switchSession(last);
      }
    }
  }

  /** The daemon stopped: answer nothing more, end the turn in the panel. */
  stopped(message: string): void {
    // A new daemon knows no session's mode: the next prompt sends it again.
    this.modeSent.clear();
    for (const callId of [...this.approvals.keys()]) {
      this.settle(callId, { decision: 'deny', reason: 'the daemon stopped' });
    }
    this.set(state.daemonStopped(this.model, message));
  }

  /** A message from the webview. */
  handle(message: state.FromWebview): void {
    switch (message.type) {
      case 'ready':
        this.panel.postModel(this.model);
        void this.daemon.ensure();
        break;
      case 'send':
        void this.send(message.text);
        break;
      case 'stop':
        void this.stop();
        break;
      case 'approve':
        this.answer(message.callId, message.decision, message.reason);
        break;
      case 'setMode':
        void this.setMode(message.mode);
        break;
      case 'newSession':
        void this.newSession();
        break;
      case 'switchSession':
        void this.switchSession(message.sessionId);
        break;
      case 'openDiff':
        void this.openDiff(message.callId);
        break;
      case 'revertTurn':
        void this.revertTurn(message.turnId, message.force);
        break;
      case 'forkSession':
        void this.forkSession(message.turnId);
        break;
      case 'action':
        void this.runAction(message.action);
        break;
      case 'dropFocus':
        this.focusDropped = true;
        this.set({ ...this.model, focus: null });
        break;
    }
  }

  async send(text: string): Promise<void> {
    if (text.trim() === '' || this.model.running) {
      return;
    }
    const client = await this.daemon.ensure();
    if (client === null) {
      this.set(state.note(this.model, 'error', 'pen is not running: check "pen.path" and "pen: Show Log".'));
      return;
    }
    let sessionId = this.model.sessionId;
    if (sessionId === null) {
      try {
        const params: NewSessionParams = { title: text.trim().split('\n')[0].slice(0, TITLE_CHARS) };
        const session = await client.sendRequest<SessionSummary>(METHODS.NEW_SESSION, params);
        sessionId = session.sessionId;
        this.set({ ...this.model, sessionId, sessions: [session, ...this.model.sessions] });
        await this.context.workspaceState.update(SESSION_KEY, sessionId);
      } catch (err) {
        this.set(state.note(this.model, 'error', `Could not start a new session: ${errorText(err)}`));
        return;
      }
    }
    if (!(await this.sendMode(client, sessionId))) {
      return;
    }
    this.set(state.promptSent(this.model, text));
    try {
      const params: PromptParams = { sessionId, text };
      const focus = this.focusContext();
      if (focus !== null) {
        params.context = focus;
      }
      const result = await client.sendRequest<PromptResponse>(METHODS.PROMPT, params);
      this.set(state.promptAnswered(this.model, result));
      void this.refreshInstructions(client, sessionId);
      if (result.stopReason === 'error' && result.lastError) {
        this.output.appendLine(`turn ${result.turnId} failed: ${result.lastError}`);
      }
    } catch (err) {
      this.set(state.promptFailed(this.model, `The turn failed: ${errorText(err)}`, errorKind(err)));
    }
    void this.refreshSessions();
  }

  async stop(): Promise<void> {
    const client = this.daemon.client;
    if (!this.model.running || this.model.sessionId === null || client === null) {
      return;
    }
    try {
      const params: StopParams = { sessionId: this.model.sessionId };
      await client.sendRequest(METHODS.STOP, params);
    } catch (err) {
      this.set(state.note(this.model, 'error', `Stop failed: ${errorText(err)}`));
    }
  }

  /** Start over in a new session; it is created with the first prompt, titled after it. */
  async newSession(): Promise<void> {
    if (this.model.running) {
      void vscode.window.showInformationMessage('pen: a turn is running; stop it before starting a new session.');
      return;
    }
    this.set(state.switchSession(this.model, null));
    await this.context.workspaceState.update(SESSION_KEY, undefined);
    this.panel.post({ type: 'focus' });
  }

  async switchSession(sessionId: string): Promise<void> {
    if (this.model.running) {
      return;
    }
    const client = await this.daemon.ensure();
    if (client === null) {
      return;
    }
    let model = state.switchSession(this.model, sessionId);
    let afterSeq: number | undefined;
    try {
      for (;;) {
        const params: GetTranscriptParams = { sessionId, afterSeq };
        const page = await client.sendRequest<TranscriptResponse>(METHODS.GET_TRANSCRIPT, params);
        model = state.appendEntries(model, page.entries);
        if (page.nextAfterSeq === undefined || page.nextAfterSeq === null || page.entries.length === 0) {
          break;
        }
        afterSeq = page.nextAfterSeq;
      }
    } catch (err) {
      this.output.appendLine(`pen/getTranscript ${sessionId}: ${errorText(err)}`);
      await this.context.workspaceState.update(SESSION_KEY, undefined);
      this.set(state.note(state.switchSession(this.model, null), 'error', `Could not open the session: ${errorText(err)}`));
      return;
    }
    this.set(model);
    void this.refreshInstructions(client, sessionId);
    await this.context.workspaceState.update(SESSION_KEY, sessionId);
  }

  /** "Undo this turn's changes": `pen/revertTurn` of the turn (and every later one). Open files
   * change through the editor, so VS Code's undo takes the revert back. Conflicts come back as
   * diffs on the revert's card; "Overwrite" sends it again with `force`. */
  async revertTurn(turnId: string, force: boolean): Promise<RevertTurnResult | null> {
    const client = this.daemon.client;
    if (this.model.running || this.model.sessionId === null || client === null) {
      return null;
    }
    try {
      const params: RevertTurnParams = { sessionId: this.model.sessionId, turnId, force };
      const result = await client.sendRequest<RevertTurnResult>(METHODS.REVERT_TURN, params);
      this.set(state.reverted(this.model, turnId, result, force));
      return result;
    } catch (err) {
      this.set(state.note(this.model, 'error', `Undo failed: ${errorText(err)}`));
      return null;
    }
  }

  /** "Fork from here": a new session with the history before the turn, opened in the panel. */
  async forkSession(turnId: string): Promise<string | null> {
    const client = this.daemon.client;
    if (this.model.running || this.model.sessionId === null || client === null) {
      return null;
    }
    try {
      const params: ForkSessionParams = { sessionId: this.model.sessionId, beforeTurnId: turnId };
      const result = await client.sendRequest<ForkSessionResult>(METHODS.FORK_SESSION, params);
      await this.refreshSessions();
      await this.switchSession(result.sessionId);
      return result.sessionId;
    } catch (err) {
      this.set(state.note(this.model, 'error', `Fork failed: ${errorText(err)}`));
      return null;
    }
  }

  async refreshSessions(): Promise<void> {
    const client = this.daemon.client;
    if (client === null) {
      return;
    }
    try {
      const params: ListSessionsParams = { limit: 100 };
      const result = await client.sendRequest<ListSessionsResponse>(METHODS.LIST_SESSIONS, params);
      this.set(state.withSessions(this.model, result.sessions));
    } catch (err) {
      this.output.appendLine(`pen/listSessions: ${errorText(err)}`);
    }
  }

  /** `pen/requestApproval`: show the card with its buttons and wait for the owner. */
  private askApproval(params: ApprovalParams, token: vscode.CancellationToken): Promise<ApprovalResponse> {
    this.set(state.approvalRequested(this.model, params));
    // pen sends a diff only for a tool whose approval shows one (an edit), never by name here.
    if (params.kind !== 'start_mcp_server' && typeof params.diff === 'string') {
      void this.diffs.remember(params.callId, (params.arguments as { path?: unknown } | null)?.path, params.diff);
    }
    void this.panel.reveal(true);
    return new Promise<ApprovalResponse>((resolve) => {
      this.approvals.set(params.callId, resolve);
      token.onCancellationRequested(() => {
        this.set(state.approvalAnswered(this.model, params.callId, 'withdrawn'));
        this.settle(params.callId, { decision: 'deny', reason: 'withdrawn' });
      });
    });
  }

  private settle(callId: string, answer: ApprovalResponse): void {
    const resolve = this.approvals.get(callId);
    if (resolve !== undefined) {
      this.approvals.delete(callId);
      resolve(answer);
    }
  }

  /** The owner's answer; a denial may carry the reason, which the model reads. */
  answer(callId: string, decision: Decision, reason?: string): void {
    this.set(state.approvalAnswered(this.model, callId, decision));
    const why = reason?.trim() ?? '';
    this.settle(callId, why === '' ? { decision } : { decision, reason: why });
  }

  /** The mode the picker starts with: the one chosen in this workspace before, else the
   * daemon's `mode` setting. */
  private async restoreMode(): Promise<void> {
    if (this.model.mode !== null) {
      return;
    }
    let mode = this.context.workspaceState.get<Mode>(MODE_KEY);
    const client = this.daemon.client;
    if (mode === undefined && client !== null) {
      try {
        const config = await client.sendRequest<{ mode?: Mode }>(METHODS.GET_CONFIG, {});
        mode = config.mode;
      } catch (err) {
        this.output.appendLine(`pen/getConfig: ${errorText(err)}`);
      }
    }
    this.set(state.modeChosen(this.model, mode ?? 'ask'));
  }

  /** The owner picked a mode: kept for this workspace, and sent for the current session at once
   * (a running turn decides its next call under it). */
  async setMode(mode: Mode): Promise<void> {
    this.set(state.modeChosen(this.model, mode));
    await this.context.workspaceState.update(MODE_KEY, mode);
    const client = this.daemon.client;
    if (this.model.sessionId !== null && client !== null) {
      await this.sendMode(client, this.model.sessionId);
    }
  }

  /** Sends the picker's mode for `sessionId` unless it was sent; false (and a note) when pen
   * refused it. */
  private async sendMode(client: LanguageClient, sessionId: string): Promise<boolean> {
    const mode = this.model.mode;
    if (mode === null || this.modeSent.get(sessionId) === mode) {
      return true;
    }
    try {
      const params: SetModeParams = { sessionId, mode };
      await client.sendRequest(METHODS.SET_MODE, params);
      this.modeSent.set(sessionId, mode);
      return true;
    } catch (err) {
      this.set(state.note(this.model, 'error', `Could not set the mode: ${errorText(err)}`));
      return false;
    }
  }

  async openDiff(callId: string): Promise<void> {
    const item = this.model.items.find((i): i is state.ToolItem => i.kind === 'tool' && i.callId === callId);
    await this.diffs.open(callId, item?.diff ?? null, item?.summary ?? callId);
  }

  private async runAction(action: state.TurnAction): Promise<void> {
    switch (action) {
      case 'setApiKey':
        await vscode.commands.executeCommand('pen.setApiKey');
        break;
      case 'openSettings':
        await vscode.commands.executeCommand('workbench.action.openSettings', '@ext:pen-dev.pen');
        break;
      case 'newSession':
        await this.newSession();
        break;
      case 'retry':
        await this.retry();
        break;
      case 'showLog':
        await vscode.commands.executeCommand('pen.showLog');
        break;
    }
  }

  /** Send the last prompt of the session again (after a rate limit or a network failure). */
  private async retry(): Promise<void> {
    const last = [...this.model.items].reverse().find((i): i is state.UserItem => i.kind === 'user');
    if (last !== undefined) {
      await this.send(last.text);
    }
  }

  prefill(text: string): void {
    this.panel.post({ type: 'prefill', text });
  }

  dispose(): void {
    this.statusItem.dispose();
    for (const watch of this.focusWatch) {
      watch.dispose();
    }
  }
}

/** The `data.kind` of a JSON-RPC error pen answered (`session_busy`), if any. */
function errorKind(err: unknown): string | null {
  const data = (err as { data?: unknown } | null)?.data;
  const kind = (data as { kind?: unknown } | null | undefined)?.kind;
  return typeof kind === 'string' ? kind : null;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
