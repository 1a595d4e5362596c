-- A context-window rejection after a large tool result: pen trims it and retries; the
-- transcript shows the trimming notice, live and when the session is re-rendered.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({
  { tool_calls = { { id = 'call_1', name = 'pen_read', arguments = { path = 'big.txt' } } } },
  { error = { status = 400, body = { error = { code = 'context_length_exceeded', type = 'invalid_request_error',
    message = "This model's maximum context length is 8192 tokens." } } } },
  { text = 'Read it, trimmed.' },
})
local lines = {}
for i = 1, 150 do
  lines[i] = ('line %d of a big file, long enough to pass the two KiB head'):format(i)
end
vim.fn.writefile(lines, ws .. '/big.txt')
vim.fn.writefile({ 'x' }, ws .. '/main.rs')
vim.cmd.edit('main.rs')

vim.cmd('Pen read big.txt')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
local text = H.transcript_text()
H.check(text:find('context trimmed (context_window_exceeded): 1 tool result(s) cut to 2048 bytes', 1, true),
  'trim notice:\n' .. text)
H.check(text:find('Read it, trimmed.', 1, true), 'answer after the retry')
local pen = require('pen')
vim.ui.select = function(items, _, cb) cb(items[1]) end
vim.cmd('PenSessions')
text = H.transcript_text()
H.check(text:find('context trimmed (context_window_exceeded)', 1, true), 'trim notice re-rendered:\n' .. text)
H.done()
