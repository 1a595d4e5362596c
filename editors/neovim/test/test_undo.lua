-- :PenUndo reverts a turn's edit of a modified, unsaved CRLF buffer through the editor: the
-- buffer gets the user's unsaved text back, fileformat stays dos, the disk is untouched, and `u`
-- takes the revert back (it was an edit of the buffer). :PenFork starts a session before it.
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
vim.api.nvim_buf_set_lines(0, 1, 2, false, { 'line two UNSAVED' })
local file_buf = vim.api.nvim_get_current_buf()
vim.ui.select = function(_, _, cb) cb('Allow') end

vim.cmd('Pen change line two')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
local lines = vim.api.nvim_buf_get_lines(file_buf, 0, -1, false)
H.check(vim.deep_equal(lines, { 'line one', 'line two EDITED', 'line three' }), 'edited ' .. vim.inspect(lines))

local pen = require('pen')
local session = pen.state.session
-- A script makes no undo break between changes, as a user's keys would: close the undo block
-- of pen's edit (setting 'undolevels' to itself does, see :help undo-break).
vim.bo[file_buf].undolevels = vim.bo[file_buf].undolevels
vim.cmd('PenUndo')
H.wait(20000, function() return pen.state.last_revert ~= nil end, 'the revert')
local reverted = pen.state.last_revert
H.check(not reverted.error, 'revert error ' .. vim.inspect(reverted))
H.check(#reverted.files == 1 and reverted.files[1].path == 'a.txt' and reverted.files[1].status == 'reverted',
  'files ' .. vim.inspect(reverted.files))
lines = vim.api.nvim_buf_get_lines(file_buf, 0, -1, false)
H.check(vim.deep_equal(lines, { 'line one', 'line two UNSAVED', 'line three' }), 'user text back ' .. vim.inspect(lines))
H.check(vim.bo[file_buf].fileformat == 'dos', 'fileformat stays dos')
local disk = io.open(ws .. '/a.txt', 'rb'):read('a')
H.check(disk == 'line one\r\nline two\r\nline three\r\n', 'disk untouched: ' .. vim.inspect(disk))
H.check(H.transcript_text():find('a.txt: reverted', 1, true), 'shown in the transcript:\n' .. H.transcript_text())
-- The revert is one undo step of the buffer.
vim.api.nvim_set_current_buf(file_buf)
vim.cmd('normal! u')
lines = vim.api.nvim_buf_get_lines(file_buf, 0, -1, false)
H.check(vim.deep_equal(lines, { 'line one', 'line two EDITED', 'line three' }), 'after u: ' .. vim.inspect(lines))

-- A fork before the turn: a new, empty session becomes the current one; the original stays.
local forked = pen.fork('1')
H.check(forked and forked ~= session, 'forked ' .. tostring(forked))
H.check(pen.state.session == forked, 'the fork is the current session')
H.done()
