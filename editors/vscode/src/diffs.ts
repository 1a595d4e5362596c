//! Opens pen_edit's diff in VS Code's diff editor: the text pen was asked to change (the editor's
//! buffer when the file is open, else the disk) against that text with the edit's diff applied.

import { applyPatch } from 'diff';
import * as vscode from 'vscode';

export const DIFF_SCHEME = 'pen-diff';

interface Snapshot {
  path: string;
  before: string;
  after: string;
}

export class DiffViews implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly snapshots = new Map<string, Snapshot>();
  private readonly texts = new Map<string, string>();
  private readonly registration: vscode.Disposable;

  constructor() {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, this);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }

  /** Keep the before/after of an edit as pen proposed it, so the diff view shows that proposal. */
  async remember(callId: string, path: unknown, diff: string): Promise<void> {
    if (typeof path !== 'string') {
      return;
    }
    const uri = resolve(path);
    if (uri === null) {
      return;
    }
    let before: string;
    const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    if (open !== undefined) {
      before = open.getText();
    } else {
      try {
        before = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
      } catch {
        return;
      }
    }
    const after = applyPatch(before, diff);
    if (after !== false) {
      this.snapshots.set(callId, { path, before, after });
    }
  }

  /** Show the diff editor for a call; without a snapshot, the unified diff as a document. */
  async open(callId: string, diff: string | null, label: string): Promise<void> {
    const snapshot = this.snapshots.get(callId);
    if (snapshot !== undefined) {
      const name = snapshot.path.split('/').pop() ?? snapshot.path;
      const left = vscode.Uri.from({ scheme: DIFF_SCHEME, path: `/${callId}/before/${snapshot.path}` });
      const right = vscode.Uri.from({ scheme: DIFF_SCHEME, path: `/${callId}/after/${snapshot.path}` });
      this.texts.set(left.toString(), snapshot.before);
      this.texts.set(right.toString(), snapshot.after);
      await vscode.commands.executeCommand('vscode.diff', left, right, `${name} (pen's edit ${callId})`, {
        preview: true,
      });
      return;
    }
    if (diff !== null) {
      const doc = await vscode.workspace.openTextDocument({ content: diff, language: 'diff' });
      await vscode.window.showTextDocument(doc, { preview: true });
      return;
    }
    void vscode.window.showInformationMessage(`pen: no diff is known for ${label}.`);
  }

  dispose(): void {
    this.registration.dispose();
  }
}

/** A workspace-relative path (as pen's tools take them) to a file URI. */
function resolve(path: string): vscode.Uri | null {
  const folders = vscode.workspace.workspaceFolders ?? [];
  if (folders.length === 0) {
    return null;
  }
  // With several roots a path may start with a root's folder name (docs/protocol.md).
  const [first, ...rest] = path.split('/');
  const named = folders.find((f) => f.name === first);
  if (named !== undefined && folders.length > 1) {
    return vscode.Uri.joinPath(named.uri, ...rest);
  }
  return vscode.Uri.joinPath(folders[0].uri, path);
}
