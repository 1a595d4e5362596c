-- :PenMode (with completion) switches the session's permission mode: in plan mode an edit is
-- refused without asking; in edit mode it runs without asking; the statusline names the mode.
-- "Deny and tell pen why" sends the reason, which the model reads.
-- The command below must ask in edit mode: it runs unconfined (the sandbox is off here; a
-- sandboxed command runs without asking in edit mode).
vim.env.PEN_SANDBOX = 'off'
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local edit = function(id, old, new)
  return { tool_calls = { { id = id, name = 'pen_edit', arguments = {
    path = 'b.txt', edits = { { old_text = old, new_text = new } } } } } }
end
local ws = H.setup({
  { tool_calls = { { id = 'r1', name = 'pen_read', arguments = { path = 'b.txt' } } } },
  edit('e1', 'one', 'two'),
  { text = 'Plan: change one to two.' },
  edit('e2', 'one', 'two'),
  { text = 'Edited.' },
  { tool_calls = { { id = 'c1', name = 'pen_command', arguments = { command = 'echo hi > ran.txt' } } } },
  { text = 'Not run.' },
})
vim.fn.writefile({ 'one' }, ws .. '/b.txt')
local pen = require('pen')
local asked = {}
vim.ui.select = function(items, opts, cb)
  table.insert(asked, opts.prompt)
  cb('Deny and tell pen why')
end
vim.ui.input = function(_, cb) cb('run the tests instead') end

H.check(vim.deep_equal(vim.fn.getcompletion('PenMode ', 'cmdline'), { 'plan', 'ask', 'edit', 'auto' }),
  'completion: ' .. vim.inspect(vim.fn.getcompletion('PenMode ', 'cmdline')))
vim.cmd('PenMode plan')
H.check(pen.status() == 'pen [plan]', 'statusline names the mode: ' .. pen.status())
vim.cmd('Pen change it')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'plan turn ' .. vim.inspect(res))
H.check(#asked == 0, 'plan mode asked: ' .. vim.inspect(asked))
local text = H.transcript_text()
H.check(text:find('refused in plan mode', 1, true), 'refusal in transcript:\n' .. text)
H.check(vim.deep_equal(vim.fn.readfile(ws .. '/b.txt'), { 'one' }), 'file unchanged')

vim.cmd('PenMode edit')
pen.state.last_result = {}
vim.cmd('Pen go ahead')
res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'edit turn ' .. vim.inspect(res))
H.check(#asked == 0, 'edit mode asked for an edit: ' .. vim.inspect(asked))
H.check(vim.deep_equal(vim.fn.readfile(ws .. '/b.txt'), { 'two' }), 'edited: ' .. vim.inspect(vim.fn.readfile(ws .. '/b.txt')))

-- An unconfined command still asks in edit mode: the question names the mode; the reason
-- reaches the model.
pen.state.last_result = {}
vim.cmd('Pen run something')
res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'command turn ' .. vim.inspect(res))
H.check(#asked == 1 and asked[1]:find('pen [edit] wants to run pen_command', 1, true), 'asked: ' .. vim.inspect(asked))
H.check(vim.fn.filereadable(ws .. '/ran.txt') == 0, 'the command did not run')
local requests = vim.fn.readfile(H.requests_file)
H.check(requests[#requests]:find('The owner said: run the tests instead', 1, true), 'the reason reaches the model')
H.done()
