-- Shared set-up for the plugin's tests: runtimepath, a fake provider, a workspace, pen.setup.
local H = {}

local here = vim.fs.dirname(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p'))
H.plugin_dir = vim.fs.dirname(here)
H.repo = vim.fs.dirname(vim.fs.dirname(H.plugin_dir))
vim.opt.runtimepath:prepend(H.plugin_dir)
vim.cmd('runtime plugin/pen.lua')

H.pen_bin = vim.env.PEN_BIN or vim.fs.joinpath(H.repo, 'target', 'debug', 'pen')

function H.fail(msg)
  io.stderr:write('FAIL: ' .. msg .. '\n')
  H.cleanup()
  os.exit(1)
end

function H.check(cond, msg)
  if not cond then
    H.fail(msg)
  end
end

function H.wait(ms, cond, what)
  if not vim.wait(ms, cond, 20) then
    H.fail('timed out waiting for ' .. what)
  end
end

--- Start the fake provider with a list of replies; returns its base_url.
function H.fake(replies)
  H.tmp = vim.fn.tempname()
  vim.fn.mkdir(H.tmp, 'p')
  local script = vim.fs.joinpath(H.tmp, 'replies.json')
  vim.fn.writefile({ vim.json.encode(replies) }, script)
  H.requests_file = script .. '.requests'
  local port
  H.fake_job = vim.fn.jobstart({ 'python3', vim.fs.joinpath(here, 'fake_openai.py'), script }, {
    on_stdout = function(_, data)
      for _, l in ipairs(data) do
        if not port and l:match('^%d+$') then
          port = l
        end
      end
    end,
  })
  H.wait(10000, function() return port ~= nil end, 'the fake provider port')
  return 'http://127.0.0.1:' .. port .. '/v1'
end

--- A workspace (with .git so it is the root), pen configured against the fake provider.
function H.setup(replies, extra)
  local base_url = H.fake(replies)
  H.ws = vim.fs.joinpath(H.tmp, 'ws')
  vim.fn.mkdir(vim.fs.joinpath(H.ws, '.git'), 'p')
  H.data = vim.fs.joinpath(H.tmp, 'data')
  vim.fn.mkdir(H.data, 'p')
  vim.env.PEN_DATA_DIR = H.data
  vim.cmd.cd(H.ws)
  local settings = vim.tbl_extend('force', { provider = 'openai', base_url = base_url, model = 'fake' }, extra or {})
  require('pen').setup({ cmd = { H.pen_bin, 'serve' }, settings = settings })
  return H.ws
end

function H.transcript_text()
  local pen = require('pen')
  local b = require('pen.transcript').bufs[pen.state.session]
  if not b then
    return ''
  end
  return table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\n')
end

function H.wait_turn(ms)
  local pen = require('pen')
  H.wait(ms or 20000, function()
    return pen.state.session and pen.state.running[pen.state.session] == nil
      and pen.state.last_result[pen.state.session] ~= nil
  end, 'the turn to end')
  return pen.state.last_result[pen.state.session]
end

function H.cleanup()
  for _, c in ipairs(vim.lsp.get_clients({ name = 'pen' })) do
    c:stop(true)
  end
  if H.fake_job then
    vim.fn.jobstop(H.fake_job)
  end
end

function H.done()
  H.cleanup()
  print('ok')
  os.exit(0)
end

return H
