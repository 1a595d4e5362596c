//! The extension's settings and how they map onto pen's snake_case config keys
//! (initializationOptions at start, `pen/setConfig` on change). Pure: unit-tested.

/** The `pen.*` settings that are pen config keys, as VS Code hands them over. */
export interface PenSettings {
  provider: string;
  model: string;
  baseUrl: string;
  maxToolResultBytes: number | null;
  contextWindowTokens: number | null;
  maxOutputTokens: number | null;
  autoApprove: string[];
  /** pen's `mcp_servers`: server name → `{command, args, env, cwd}` or `{url, bearer_token_env, headers}`. */
  mcpServers: Record<string, unknown>;
}

/** The setting name (after `pen.`) of each config key it sets. */
export const SETTING_KEYS: ReadonlyArray<[keyof PenSettings, string]> = [
  ['provider', 'provider'],
  ['model', 'model'],
  ['baseUrl', 'base_url'],
  ['maxToolResultBytes', 'max_tool_result_bytes'],
  ['contextWindowTokens', 'context_window_tokens'],
  ['maxOutputTokens', 'max_output_tokens'],
  ['autoApprove', 'auto_approve'],
  ['mcpServers', 'mcp_servers'],
];

/** The environment variable the extension puts the SecretStorage API key in for the daemon. */
export const API_KEY_ENV = 'PEN_VSCODE_API_KEY';

/**
 * The config object for pen: only what the owner set, so pen's own config file and defaults
 * apply to the rest. An empty text or a null number is "not set". With a stored API key,
 * `api_key_env` names the variable the extension passes it in.
 */
export function toPenConfig(settings: PenSettings, hasApiKey: boolean): Record<string, unknown> {
  const config: Record<string, unknown> = {};
  for (const [setting, key] of SETTING_KEYS) {
    const value = settings[setting];
    if (typeof value === 'string') {
      if (value.trim() !== '') {
        config[key] = value.trim();
      }
    } else if (typeof value === 'number') {
      config[key] = value;
    } else if (Array.isArray(value)) {
      if (value.length > 0) {
        config[key] = value;
      }
    } else if (value !== null && typeof value === 'object' && Object.keys(value).length > 0) {
      config[key] = value;
    }
  }
  if (hasApiKey) {
    config.api_key_env = API_KEY_ENV;
  }
  return config;
}

/**
 * How to move a running daemon from `before` to `after`: the `pen/setConfig` params, or
 * `restart` when a key was unset that pen cannot unset at run time (a number returns to pen's
 * default only in a new daemon). Text keys and lists are unset with null and [], the MCP
 * servers with null (none).
 */
export function configChange(
  before: Record<string, unknown>,
  after: Record<string, unknown>,
): { kind: 'none' } | { kind: 'set'; params: Record<string, unknown> } | { kind: 'restart' } {
  const params: Record<string, unknown> = {};
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const old = before[key];
    const now = after[key];
    if (JSON.stringify(old) === JSON.stringify(now)) {
      continue;
    }
    if (now === undefined) {
      if (typeof old === 'number') {
        return { kind: 'restart' };
      }
      params[key] = Array.isArray(old) ? [] : null;
    } else {
      params[key] = now;
    }
  }
  return Object.keys(params).length === 0 ? { kind: 'none' } : { kind: 'set', params };
}
