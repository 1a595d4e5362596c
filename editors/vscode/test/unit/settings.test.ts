//! The settings → pen config mapping, and how a change reaches a running daemon.

import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { API_KEY_ENV, configChange, type PenSettings, toPenConfig } from '../../src/settings';

const unset: PenSettings = {
  provider: '',
  model: '',
  baseUrl: '',
  maxToolResultBytes: null,
  contextWindowTokens: null,
  maxOutputTokens: null,
  autoApprove: [],
  mcpServers: {},
};

test('only what the owner set is sent, with snake_case keys', () => {
  assert.deepEqual(toPenConfig(unset, false), {});
  assert.deepEqual(
    toPenConfig(
      {
        provider: 'openai',
        model: ' fake ',
        baseUrl: 'http://127.0.0.1:8080/v1',
        maxToolResultBytes: 4096,
        contextWindowTokens: 8000,
        maxOutputTokens: 256,
        autoApprove: ['pen_edit', 'mcp__docs__*'],
        mcpServers: { docs: { url: 'http://127.0.0.1:1/mcp', bearer_token_env: 'DOCS_TOKEN' } },
      },
      false,
    ),
    {
      provider: 'openai',
      model: 'fake',
      base_url: 'http://127.0.0.1:8080/v1',
      max_tool_result_bytes: 4096,
      context_window_tokens: 8000,
      max_output_tokens: 256,
      auto_approve: ['pen_edit', 'mcp__docs__*'],
      mcp_servers: { docs: { url: 'http://127.0.0.1:1/mcp', bearer_token_env: 'DOCS_TOKEN' } },
    },
  );
});

test('a stored API key is named by api_key_env, never passed as a value', () => {
  const config = toPenConfig(unset, true);
  assert.deepEqual(config, { api_key_env: API_KEY_ENV });
});

test('changes: set what changed, unset text with null, restart to unset a number', () => {
  assert.deepEqual(configChange({ model: 'a' }, { model: 'a' }), { kind: 'none' });
  assert.deepEqual(configChange({}, { context_window_tokens: 8000 }), {
    kind: 'set',
    params: { context_window_tokens: 8000 },
  });
  assert.deepEqual(configChange({ model: 'a', auto_approve: ['pen_edit'] }, {}), {
    kind: 'set',
    params: { model: null, auto_approve: [] },
  });
  assert.deepEqual(configChange({ max_output_tokens: 256 }, {}), { kind: 'restart' });
  // Removing the MCP servers unsets them (null: none) without a restart.
  assert.deepEqual(configChange({ mcp_servers: { a: { command: 'x' } } }, {}), {
    kind: 'set',
    params: { mcp_servers: null },
  });
});
