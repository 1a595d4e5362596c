-- :Pen streams an answer into the pen://transcript buffer.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({ { text = 'Hello from the fake model, streamed in pieces.' }, { text = 'Again.' }, { text = 'It is main.' } })
vim.fn.writefile({ 'fn main() {}' }, ws .. '/main.rs')
vim.cmd.edit('main.rs')

vim.cmd('Pen say hello')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
local text = H.transcript_text()
H.check(text:find('Hello from the fake model, streamed in pieces.', 1, true), 'answer not in transcript:\n' .. text)
H.check(text:find('## You\nsay hello', 1, true), 'prompt not in transcript:\n' .. text)
local b = require('pen.transcript').bufs[require('pen').state.session]
H.check(vim.api.nvim_buf_get_name(b) == 'pen://transcript', 'name ' .. vim.api.nvim_buf_get_name(b))
H.check(vim.bo[b].filetype == 'markdown', 'filetype')
H.check(#vim.fn.win_findbuf(b) == 1, 'transcript shown in a split')
-- The client is attached to the file buffer (one client per root).
H.check(#vim.lsp.get_clients({ name = 'pen', bufnr = vim.fn.bufnr('main.rs') }) == 1, 'client attached')
-- A second prompt reuses the client and buffer.
vim.cmd('Pen again')
require('pen').state.last_result = {}
H.wait_turn()
H.check(#vim.lsp.get_clients({ name = 'pen' }) == 1, 'one client')
-- The range form adds the selection with its file and line numbers to the prompt.
require('pen').state.last_result = {}
vim.cmd('1,1Pen explain this')
H.wait_turn()
local sent = vim.fn.readfile(H.requests_file)
local last = sent[#sent]
H.check(last:find('Selection: lines 1-1', 1, true) and last:find('fn main() {}', 1, true),
  'selection in the prompt: ' .. last)
-- setup() again while the daemon runs hands settings over with pen/setConfig.
local pen = require('pen')
local settings = vim.tbl_extend('force', pen.config.settings, { max_tool_result_bytes = 4096 })
pen.setup({ cmd = pen.config.cmd, settings = settings })
local client = vim.lsp.get_clients({ name = 'pen' })[1]
H.wait(5000, function()
  local r = client:request_sync('pen/getConfig', nil, 1000)
  return r and r.result and r.result.max_tool_result_bytes == 4096
end, 'pen/setConfig to apply the new settings')
-- :PenLog opens the daemon's log from the data dir.
vim.cmd('PenLog')
H.check(vim.api.nvim_buf_get_name(0):find(H.data .. '/logs/pen.log.', 1, true), 'log ' .. vim.api.nvim_buf_get_name(0))
H.done()
