//! Runs `pen serve` as a language client: starts it with the owner's settings and API key,
//! explains a missing or crashing binary, and restarts it with backoff.

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  type CloseHandlerResult,
  type ErrorHandlerResult,
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { API_KEY_ENV } from './settings';

/** Waits before the n-th restart after a crash: 1 s, 2 s, 4 s, 8 s, 16 s. */
const RESTART_DELAYS_MS = [1000, 2000, 4000, 8000, 16000];
/** A daemon that ran this long without crashing starts the backoff over. */
const HEALTHY_RUN_MS = 3 * 60 * 1000;

export interface DaemonHooks {
  /** Register pen's handlers (pen/event, pen/requestApproval) on a new client. */
  wire(client: LanguageClient): void;
  /** The daemon stopped (crash or restart); `message` says why. */
  stopped(message: string): void;
  /** A new daemon is up. */
  ready(client: LanguageClient): void;
}

/** Find `name` on PATH the way a spawn would (absolute and relative paths are checked as is). */
export function resolveBinary(name: string, env: NodeJS.ProcessEnv = process.env): string | null {
  const isExecutable = (candidate: string): boolean => {
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return fs.statSync(candidate).isFile();
    } catch {
      return false;
    }
  };
  if (name.includes('/') || name.includes('\\')) {
    return isExecutable(name) ? name : null;
  }
  const exts = process.platform === 'win32' ? (env.PATHEXT ?? '.EXE;.CMD').split(';') : [''];
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      if (dir !== '' && isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return null;
}

export class Daemon implements vscode.Disposable {
  client: LanguageClient | null = null;
  /** True once something needed pen: a later change of `pen.path` starts it again. */
  wanted = false;
  private starting: Promise<LanguageClient | null> | null = null;
  private crashes = 0;
  private startedAt = 0;
  private disposed = false;

  constructor(
    private readonly output: vscode.OutputChannel,
    private readonly hooks: DaemonHooks,
    private readonly binary: () => string,
    private readonly initOptions: () => Record<string, unknown>,
    private readonly apiKey: () => Promise<string | undefined>,
  ) {}

  /** The running client, started on first use; null (with a notification) when pen cannot start. */
  async ensure(): Promise<LanguageClient | null> {
    this.wanted = true;
    if (this.starting !== null) {
      return this.starting;
    }
    if (this.client !== null && this.client.state === State.Running) {
      return this.client;
    }
    if (this.client !== null && this.client.state === State.Starting) {
      // Restarting after a crash: the language client starts it again by itself.
      await this.waitRunning(this.client);
      return (this.client.state as State) === State.Running ? this.client : null;
    }
    return this.start();
  }

  private waitRunning(client: LanguageClient): Promise<void> {
    return new Promise((resolve) => {
      const sub = client.onDidChangeState((e) => {
        if (e.newState !== State.Starting) {
          sub.dispose();
          resolve();
        }
      });
    });
  }

  /** Start once: callers that come while a start is under way share it. */
  private start(): Promise<LanguageClient | null> {
    if (this.starting === null) {
      this.starting = this.startNew().finally(() => {
        this.starting = null;
      });
    }
    return this.starting;
  }

  /** Stop the daemon (if any) and start a new one with the current settings and key. */
  async restart(): Promise<LanguageClient | null> {
    await this.starting;
    await this.stop('restarting pen');
    this.crashes = 0;
    return this.start();
  }

  private async stop(reason: string): Promise<void> {
    const old = this.client;
    this.client = null;
    if (old !== null) {
      this.hooks.stopped(reason);
      try {
        await old.dispose(5000);
      } catch (err) {
        this.output.appendLine(`stopping pen serve: ${String(err)}`);
      }
    }
  }

  private async startNew(): Promise<LanguageClient | null> {
    const configured = this.binary();
    const command = resolveBinary(configured);
    this.output.appendLine(`starting pen serve: pen.path "${configured}" is ${command ?? 'not found'}`);
    if (command === null) {
      void this.explainMissing(configured);
      return null;
    }
    const env: NodeJS.ProcessEnv = { ...process.env };
    const key = await this.apiKey();
    if (key !== undefined && key !== '') {
      env[API_KEY_ENV] = key;
    }
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const serverOptions: ServerOptions = {
      command,
      args: ['serve'],
      options: { env, cwd: folder },
    };
    const clientOptions: LanguageClientOptions = {
      // Every file: pen reads the editor's unsaved text of whatever the model asks about.
      documentSelector: [{ scheme: 'file' }],
      initializationOptions: () => this.initOptions(),
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      errorHandler: {
        error: (): ErrorHandlerResult => ({ action: ErrorAction.Continue }),
        closed: () => this.onClosed(),
      },
      initializationFailedHandler: (error) => {
        this.output.appendLine(`pen serve failed to initialize: ${String(error)}`);
        return false;
      },
    };
    const client = new LanguageClient('pen', 'pen', serverOptions, clientOptions);
    this.hooks.wire(client);
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      if (this.client === client) {
        this.client = null;
      }
      void this.explainCrash(`pen serve could not start: ${err instanceof Error ? err.message : String(err)}`);
      return null;
    }
    this.startedAt = Date.now();
    this.hooks.ready(client);
    return client;
  }

  private async onClosed(): Promise<CloseHandlerResult> {
    if (this.disposed) {
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    if (Date.now() - this.startedAt > HEALTHY_RUN_MS) {
      this.crashes = 0;
    }
    const attempt = this.crashes;
    this.crashes += 1;
    if (attempt >= RESTART_DELAYS_MS.length) {
      // The next ensure() (a prompt, "Restart") starts a new client.
      this.client = null;
      this.hooks.stopped('pen serve stopped');
      void this.explainCrash(
        `pen serve crashed ${this.crashes} times in a row and is not restarted any more.`,
      );
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    const delay = RESTART_DELAYS_MS[attempt];
    this.hooks.stopped(`pen serve stopped unexpectedly; restarting in ${delay / 1000} s`);
    void vscode.window.showWarningMessage(
      `pen serve stopped unexpectedly; restarting it in ${delay / 1000} s. "pen: Show Log" has the details.`,
    );
    await new Promise((resolve) => setTimeout(resolve, delay));
    this.startedAt = Date.now();
    const client = this.client;
    if (client !== null) {
      const sub = client.onDidChangeState((e) => {
        if (e.newState === State.Running) {
          sub.dispose();
          this.hooks.ready(client);
        }
      });
    }
    return { action: CloseAction.Restart, handled: true };
  }

  private async explainMissing(configured: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(
      `pen: the pen binary "${configured}" was not found` +
        (configured.includes('/') ? '.' : ' on PATH.') +
        ' Install it: in a clone of the pen repository run `cargo install --locked --path .`, which puts pen' +
        ' in ~/.cargo/bin (have that on PATH, then reload the window); or set "pen.path" to the full path of the binary.',
      'Open Settings',
    );
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'pen.path');
    }
  }

  private async explainCrash(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(
      `pen: ${message} Check "pen.path" and the log; then restart.`,
      'Show Log',
      'Restart',
      'Open Settings',
    );
    if (choice === 'Show Log') {
      await vscode.commands.executeCommand('pen.showLog');
    } else if (choice === 'Restart') {
      await this.restart();
    } else if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'pen.path');
    }
  }

  dispose(): void {
    this.disposed = true;
    void this.client?.dispose(2000);
    this.client = null;
  }
}
