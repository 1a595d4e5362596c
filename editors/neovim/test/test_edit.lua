-- An approved pen_edit of a modified, unsaved CRLF buffer lands in the buffer: the diff is
-- shown before the choice, fileformat stays dos, the unsaved text is kept, `u` restores it.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({
  { tool_calls = { { id = 'call_1', name = 'pen_read', arguments = { path = 'a.txt' } } } },
  { tool_calls = { { id = 'call_2', name = 'pen_edit', arguments = {
    path = 'a.txt', edits = { { old_text = 'line two UNSAVED\n', new_text = 'line two EDITED\n' } } } } } },
  { text = 'Edited line two.' },
})
local f = io.open(ws .. '/a.txt', 'wb')
f:write('line one\r\nline two\r\nline three\r\n')
f:close()
vim.cmd.edit('a.txt')
H.check(vim.bo.fileformat == 'dos', 'fileformat dos on load')
vim.api.nvim_buf_set_lines(0, 1, 2, false, { 'line two UNSAVED' })
local file_buf = vim.api.nvim_get_current_buf()

local asked = {}
vim.ui.select = function(items, opts, cb)
  table.insert(asked, { items = items, prompt = opts.prompt, transcript = H.transcript_text() })
  cb('Allow')
end

vim.cmd('Pen change line two')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
H.check(#asked == 1, 'asked once, got ' .. #asked)
H.check(vim.deep_equal(asked[1].items, { 'Allow', 'Allow for session', 'Deny', 'Deny and tell pen why' }), 'items ' .. vim.inspect(asked[1].items))
H.check(asked[1].transcript:find('```diff', 1, true) and asked[1].transcript:find('+line two EDITED', 1, true),
  'diff shown before asking:\n' .. asked[1].transcript)
local lines = vim.api.nvim_buf_get_lines(file_buf, 0, -1, false)
H.check(vim.deep_equal(lines, { 'line one', 'line two EDITED', 'line three' }), 'buffer ' .. vim.inspect(lines))
H.check(vim.bo[file_buf].fileformat == 'dos', 'fileformat stays dos')
H.check(vim.bo[file_buf].modified, 'buffer still modified (not written)')
local disk = io.open(ws .. '/a.txt', 'rb'):read('a')
H.check(disk == 'line one\r\nline two\r\nline three\r\n', 'disk untouched: ' .. vim.inspect(disk))
local text = H.transcript_text()
H.check(text:find('**pen_edit** — done', 1, true), 'pen_edit done in transcript:\n' .. text)
-- Each call shows what it works on as pen sends it (its `summary`), not a summary of its own.
H.check(text:find('**pen_read** `a.txt` — running', 1, true), 'pen_read with its summary:\n' .. text)
H.check(asked[1].transcript:find('**pen_edit** `a.txt` — waiting for approval', 1, true),
  'pen_edit asks with its summary:\n' .. asked[1].transcript)
H.check(text:find('Edited line two.', 1, true), 'final answer in transcript')
-- The edit is one undo step in the buffer.
vim.api.nvim_set_current_buf(file_buf)
vim.cmd('normal! u')
lines = vim.api.nvim_buf_get_lines(file_buf, 0, -1, false)
H.check(vim.deep_equal(lines, { 'line one', 'line two UNSAVED', 'line three' }), 'after u: ' .. vim.inspect(lines))
H.done()
