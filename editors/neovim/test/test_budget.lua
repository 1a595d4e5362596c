-- A long turn at a small context window: pen compacts the oldest tool calls of the turn so
-- every request fits, and the transcript shows the budget's notice, live and re-rendered. Six
-- reads of 200 lines (about 10 KB each, a page of about 7 KB at this window) are more than the
-- budget holds.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local replies = {}
for i = 1, 6 do
  replies[i] = { tool_calls = { { id = 'read_' .. i, name = 'pen_read', arguments = { path = ('part_%d.txt'):format(i) } } } }
end
table.insert(replies, { text = 'Read them all.' })
local ws = H.setup(replies, { context_window_tokens = 9000, max_output_tokens = 500, budget_margin_tokens = 0 })
for i = 1, 6 do
  local lines = {}
  for j = 1, 200 do
    lines[j] = ('part %d line %d: some text to make the file large'):format(i, j)
  end
  vim.fn.writefile(lines, ('%s/part_%d.txt'):format(ws, i))
end
vim.fn.writefile({ 'x' }, ws .. '/main.rs')
vim.cmd.edit('main.rs')

vim.cmd('Pen read every part file')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
local text = H.transcript_text()
-- Under policy 4 (the default) a compaction may also leave the oldest excerpts out.
local pattern = '> context trimmed %(budget%): %d+ older tool call%(s%) sent as excerpts[^;\n]*; about %d+ → %d+ tokens, budget 8500'
H.check(text:find(pattern), 'budget notice:\n' .. text)
H.check(text:find('Read them all.', 1, true), 'the answer')
vim.ui.select = function(items, _, cb) cb(items[1]) end
vim.cmd('PenSessions')
text = H.transcript_text()
H.check(text:find(pattern), 'budget notice re-rendered:\n' .. text)
H.done()
