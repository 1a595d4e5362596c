--- `:checkhealth pen`: the binary, the provider config and the data dir.
local M = {}

function M.check()
  local h = vim.health
  local pen = require('pen')
  local cmd = pen.config.cmd
  h.start('pen binary')
  local exe = cmd[1]
  if vim.fn.executable(exe) == 1 then
    h.ok(('found `%s` (%s)'):format(exe, vim.fn.exepath(exe)))
    local out = vim.system({ exe, '--version' }, { text = true }):wait(5000)
    if out.code == 0 then
      h.ok(vim.trim(out.stdout))
    else
      h.error(('`%s --version` failed: %s'):format(exe, vim.trim(out.stderr or '')))
    end
  else
    h.error(('`%s` not found'):format(exe), {
      'Install it: in a clone of the pen repository run `cargo install --locked --path .`, which puts pen in ~/.cargo/bin (have that on PATH)',
      'Or set cmd = { "/full/path/to/pen", "serve" } in require("pen").setup{}',
    })
  end

  h.start('pen provider')
  local s = pen.config.settings or {}
  if s.provider then
    h.ok(('provider = %s, model = %s%s'):format(s.provider, tostring(s.model or '(default)'),
      s.base_url and (', base_url = ' .. s.base_url) or ''))
    local key_env = s.api_key_env
      or (require('pen.providers')[s.provider] or {}).key_variable
    local local_url = s.base_url and (s.base_url:match('//127%.') or s.base_url:match('//localhost'))
    if key_env and not local_url and (vim.env[key_env] or '') == '' then
      h.warn(('%s is not set in the environment'):format(key_env))
    end
  elseif (vim.env.OPENAI_API_KEY or '') ~= '' then
    h.ok('no provider configured: pen will use OpenAI (OPENAI_API_KEY is set)')
  else
    h.warn('no provider configured: pen will try Ollama on 127.0.0.1:11434',
      { 'Set settings = { provider = ..., model = ... } in require("pen").setup{}' })
  end

  h.start('pen data dir')
  local dir = pen.data_dir()
  if vim.fn.isdirectory(dir) == 1 then
    h.ok('data dir: ' .. dir .. (vim.fn.filewritable(dir) == 2 and '' or ' (not writable)'))
  else
    h.info('data dir ' .. dir .. ' does not exist yet (pen creates it on first use)')
  end
end

return M
