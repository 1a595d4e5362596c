-- Deny is rendered "denied by the owner" and leaves the buffer alone; :PenStop during a
-- hanging provider reply ends the turn `cancelled`, and the next prompt in the session works.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({
  { tool_calls = { { id = 'call_1', name = 'pen_read', arguments = { path = 'b.txt' } } } },
  { tool_calls = { { id = 'call_2', name = 'pen_edit', arguments = {
    path = 'b.txt', edits = { { old_text = 'keep me\n', new_text = 'changed\n' } } } } } },
  { text = 'Understood, not editing.' },
  { hang = true },
  { tool_calls = { { id = 'call_3', name = 'pen_create', arguments = { path = 'new.txt', content = 'x\n' } } } },
  { text = 'after the stop' },
})
vim.fn.writefile({ 'keep me' }, ws .. '/b.txt')
vim.cmd.edit('b.txt')
local file_buf = vim.api.nvim_get_current_buf()
vim.ui.select = function(items, _, cb) cb('Deny') end

vim.cmd('Pen edit b')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'deny turn ' .. vim.inspect(res))
local text = H.transcript_text()
H.check(text:find('**pen_edit** — denied by the owner', 1, true), 'denied state:\n' .. text)
H.check(vim.deep_equal(vim.api.nvim_buf_get_lines(file_buf, 0, -1, false), { 'keep me' }), 'buffer unchanged')
H.check(not vim.bo[file_buf].modified, 'buffer not modified')

-- Stop: the provider hangs until pen drops the connection.
local pen = require('pen')
pen.state.last_result = {}
local before = #vim.fn.readfile(H.requests_file)
vim.cmd('Pen wait forever')
H.wait(10000, function() return #vim.fn.readfile(H.requests_file) > before end, 'the hanging request')
H.check(pen.status() ~= '', 'statusline shows a running turn: ' .. vim.inspect(pen.state) .. H.transcript_text())
-- $/progress reaches Neovim's progress UI (vim.lsp.status() drains messages: accumulate).
local progress = ''
H.wait(10000, function()
  progress = progress .. vim.lsp.status()
  return progress:find('thinking', 1, true) ~= nil
end, '$/progress "thinking" in vim.lsp.status()')
vim.cmd('PenStop')
res = H.wait_turn()
H.check(res.stopReason == 'cancelled', 'stop turn ' .. vim.inspect(res))
text = H.transcript_text()
H.check(text:find('turn ended: cancelled', 1, true), 'cancelled in transcript:\n' .. text)
H.check(pen.status() == '', 'statusline idle again')

-- Stop while an approval is pending: it is withdrawn and the call is not executed.
local pending = false
vim.ui.select = function() pending = true end -- never answers
pen.state.last_result = {}
vim.cmd('Pen create a file')
H.wait(10000, function() return pending end, 'the approval question')
vim.cmd('PenStop')
res = H.wait_turn()
H.check(res.stopReason == 'cancelled', 'stop during approval ' .. vim.inspect(res))
text = H.transcript_text()
H.check(text:find('withdrawn', 1, true), 'withdrawn in transcript:\n' .. text)
H.check(vim.fn.filereadable(ws .. '/new.txt') == 0, 'nothing created')

-- The session still works.
vim.ui.select = function(_, _, cb) cb('Allow') end
pen.state.last_result = {}
vim.cmd('Pen go on')
res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'after stop ' .. vim.inspect(res))
local live = H.transcript_text()
-- The stored transcript, re-rendered by :PenSessions, shows the same states.
vim.ui.select = function(items, _, cb)
  for _, it in ipairs(items) do
    if it.sessionId == pen.state.session then
      return cb(it)
    end
  end
end
vim.cmd('PenSessions')
text = H.transcript_text()
if vim.env.PEN_SHOW then print(live, '\n=====\n', text) end
for _, want in ipairs({ '**pen_edit** — denied by the owner', 'Understood, not editing.',
  'turn ended: cancelled', '**pen_create** — not executed (stopped)', 'after the stop' }) do
  H.check(text:find(want, 1, true), 'resumed transcript lacks ' .. want .. ':\n' .. text)
end
H.done()
