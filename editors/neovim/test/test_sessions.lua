-- :PenSessions lists sessions with vim.ui.select, resumes the picked one and re-renders its
-- transcript from pen/getTranscript; the next :Pen continues that session.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({
  { text = 'First answer about apples.' },
  { text = 'Second answer about pears.' },
  { text = 'Continuing the apple session.' },
})
vim.fn.writefile({ 'x' }, ws .. '/c.txt')
vim.cmd.edit('c.txt')
local pen = require('pen')

vim.cmd('Pen tell me about apples')
H.wait_turn()
local first = pen.state.session
vim.cmd('PenNew')
H.check(pen.state.session ~= first, 'PenNew made a new session')
pen.state.last_result = {}
vim.cmd('Pen tell me about pears')
H.wait_turn()
local second = pen.state.session
local b2 = require('pen.transcript').bufs[second]
H.check(vim.api.nvim_buf_get_name(b2) == 'pen://transcript/' .. second, 'second buffer name ' .. vim.api.nvim_buf_get_name(b2))

-- Forget the first session's buffer, as after a restart of Neovim.
vim.api.nvim_buf_delete(require('pen.transcript').bufs[first], { force = true })
require('pen.transcript').bufs[first] = nil

local offered
vim.ui.select = function(items, opts, cb)
  offered = vim.tbl_map(opts.format_item, items)
  for _, it in ipairs(items) do
    if it.sessionId == first then
      return cb(it)
    end
  end
  cb(nil)
end
vim.cmd('PenSessions')
H.check(offered and #offered == 2, 'two sessions offered: ' .. vim.inspect(offered))
H.check(offered[2]:find('apples', 1, true), 'newest first: ' .. vim.inspect(offered))
H.check(pen.state.session == first, 'resumed the first session')
local text = H.transcript_text()
H.check(text:find('tell me about apples', 1, true), 'prompt re-rendered:\n' .. text)
H.check(text:find('First answer about apples.', 1, true), 'answer re-rendered:\n' .. text)
H.check(not text:find('pears', 1, true), 'only that session:\n' .. text)

pen.state.last_result = {}
vim.cmd('Pen more apples')
H.wait_turn()
H.check(H.transcript_text():find('Continuing the apple session.', 1, true), 'continued')
local list = vim.lsp.get_clients({ name = 'pen' })[1]:request_sync('pen/listSessions', vim.empty_dict(), 5000).result
for _, s in ipairs(list.sessions) do
  if s.sessionId == first then
    H.check(s.entryCount >= 4, 'the first session grew: ' .. vim.inspect(s))
  end
end
if vim.env.PEN_SHOW then print(H.transcript_text()) end
H.done()
