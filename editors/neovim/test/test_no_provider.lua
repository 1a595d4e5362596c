-- :Pen with no model configured: pen's multi-line "no provider" help renders in the transcript,
-- every line of it, and the plugin raises no Lua error (nvim_buf_set_lines refuses an item with
-- a newline in it, which once ended the transcript at an empty "## pen").
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))

-- A new user: no provider, model, base URL or key anywhere pen looks, and no config file.
for _, name in ipairs({ 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'PEN_PROVIDER', 'PEN_MODEL', 'PEN_BASE_URL',
  'PEN_API_KEY_ENV' }) do
  vim.env[name] = nil
end
H.tmp = vim.fn.tempname()
H.ws = vim.fs.joinpath(H.tmp, 'ws')
vim.fn.mkdir(vim.fs.joinpath(H.ws, '.git'), 'p')
vim.env.PEN_DATA_DIR = vim.fs.joinpath(H.tmp, 'data')
vim.env.PEN_CONFIG = vim.fs.joinpath(H.tmp, 'no-such-config.toml')
vim.cmd.cd(H.ws)
require('pen').setup({ cmd = { H.pen_bin, 'serve' }, settings = {} })

-- Lua errors in the callback would otherwise only reach :messages; catch them as failures.
local errors = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  if level == vim.log.levels.ERROR then
    table.insert(errors, msg)
  end
  return notify(msg, level, opts)
end

vim.cmd('Pen hello')
local res = H.wait_turn()
H.check(res.stopReason == 'error', 'stopReason ' .. vim.inspect(res))
local last_error = tostring(res.lastError)
-- This test only holds on a machine where no Ollama answers on 127.0.0.1:11434.
H.check(last_error:find('no model provider is configured', 1, true), 'lastError ' .. last_error)
H.check(last_error:find('\n', 1, true), 'the help is several lines: ' .. last_error)

local text = H.transcript_text()
H.check(not text:match('## pen%s*$'), 'the transcript ends at an empty "## pen":\n' .. text)
for _, line in ipairs(vim.split(last_error, '\n', { plain = true })) do
  H.check(text:find('> ' .. line, 1, true), 'help line missing from the transcript: ' .. line .. '\n' .. text)
end
H.check(text:find('*— turn ended: error*', 1, true), 'turn end shown:\n' .. text)
-- The kind, not the wording, chooses what the plugin says next: the provider settings.
local P = require('pen.protocol')
H.check(res.errorKind == P.error_kind.NO_PROVIDER, 'errorKind ' .. vim.inspect(res))
H.check(text:find('> ' .. require('pen.transcript').ERROR_HINTS[P.error_kind.NO_PROVIDER], 1, true)
  and text:find(':checkhealth pen', 1, true), 'the transcript points at :checkhealth pen:\n' .. text)
-- The one ERROR notification is the help itself, not a Lua error from rendering it.
for _, e in ipairs(errors) do
  H.check(not e:find('transcript.lua', 1, true) and not e:find('contains newlines', 1, true), 'Lua error: ' .. e)
end
H.done()
