//! The prompt box's focus chip and the panel's instruction-files line.

import * as assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { applyEvent, emptyModel, focusLabel, instructionsLine, switchSession } from '../../src/panelState';

describe('project context in the panel', () => {
  test('the chip names the file and the selected lines', () => {
    assert.equal(focusLabel('src/a.ts', { startLine: 3, endLine: 9 }), 'a.ts:3-9');
    assert.equal(focusLabel('src/a.ts', null), 'a.ts');
    assert.equal(focusLabel('C:\\proj\\b.rs', null), 'b.rs');
  });

  test('the instruction line gives name, size and cut', () => {
    assert.equal(instructionsLine([]), null);
    assert.equal(
      instructionsLine([
        { path: 'AGENTS.md', bytes: 2048, cut: false },
        { path: 'web/AGENTS.md', bytes: 40000, cut: true },
        { path: 'CLAUDE.md', bytes: 0, cut: false, refused: 'not UTF-8' },
      ]),
      'Instructions: AGENTS.md 2.0 KB, web/AGENTS.md 39.1 KB (cut), CLAUDE.md (not read)',
    );
  });

  test('switching sessions keeps the focus chip', () => {
    const model = { ...emptyModel(), focus: 'a.ts:1-2', instructions: 'Instructions: AGENTS.md 1 B' };
    const switched = switchSession(model, 's_1');
    assert.equal(switched.focus, 'a.ts:1-2');
    assert.equal(switched.instructions, null);
  });

  test('a changed instruction file is a note in the log', () => {
    const model = applyEvent(
      { ...emptyModel(), sessionId: 's_1', running: true },
      {
        sessionId: 's_1',
        turnId: 't_1',
        seq: 1,
        kind: 'instructions_changed',
        data: { files: [{ path: 'AGENTS.md', bytes: 10, cut: false }] },
      },
    );
    const last = model.items[model.items.length - 1];
    assert.equal(last.kind, 'note');
    assert.match((last as { text: string }).text, /instructions changed \(AGENTS\.md\)/);
  });
});
