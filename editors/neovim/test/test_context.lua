-- :'<,'>Pen sends the range as pen/prompt's context; pen reads the lines from the buffer
-- (unsaved text included), and the project's AGENTS.md is in the system part.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local ws = H.setup({ { text = 'It is the middle.' }, { text = 'It is the file.' }, { text = 'Code.' }, { text = 'Withheld.' } })
vim.fn.writefile({ 'Answer in haiku.' }, ws .. '/AGENTS.md')
vim.fn.writefile({ 'one on disk', 'two on disk', 'three on disk' }, ws .. '/lines.txt')
vim.cmd.edit('lines.txt')
require('pen').client(0)
-- Unsaved changes: pen must see these, not the disk.
vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'one UNSAVED', 'two UNSAVED', 'three UNSAVED' })

vim.cmd('2,3Pen explain these lines')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))
local sent = vim.fn.readfile(H.requests_file)
local body = vim.json.decode(sent[#sent])
local user = body.messages[#body.messages].content
H.check(user:find('explain these lines\n\n[What the owner has in view', 1, true), 'the context note: ' .. user)
H.check(user:find('Active file: lines.txt\nSelection: lines 2-3\n```\ntwo UNSAVED\nthree UNSAVED\n```', 1, true),
  'the range from the buffer: ' .. user)
H.check(not user:find('on disk', 1, true), 'the disk text was sent: ' .. user)
H.check(user:find('Visible lines: 1-3', 1, true), 'the visible lines: ' .. user)
local system = body.messages[1].content
H.check(system:find('## AGENTS.md\nAnswer in haiku.', 1, true), 'AGENTS.md in the system part: ' .. system)
H.check(H.transcript_text():find('(with `lines.txt` lines 2-3)', 1, true), 'the range in the transcript')
-- The panel shows the instruction files the session uses.
H.wait(5000, function()
  return H.transcript_text():find('> instructions: `AGENTS.md` 17 bytes', 1, true) ~= nil
end, 'the instruction files in the transcript')
-- The stored context is shown in a line, never as its JSON (on a resumed transcript).
local lines = require('pen.transcript')
local shown = {}
local real = lines.lines
lines.lines = function(_, l) vim.list_extend(shown, l) end
lines.step('s', nil, 'session_context', { environment = 'x',
  instructions = { { path = 'AGENTS.md', bytes = 17, cut = false } } })
-- A stored change of instructions reads as the live event does; a revert is a line, not JSON.
lines.step('s', nil, 'instructions_changed', { files = { { path = 'AGENTS.md', bytes = 9, cut = true } } })
lines.step('s', nil, 'files_reverted', { turns = { 't_1' }, note = 'n', interrupted = false,
  files = { { path = 'a.txt', status = 'reverted' }, { path = 'b.txt', status = vim.NIL } } })
-- A project MCP server asking to start shows its command line.
lines.approval({ kind = 'start_mcp_server', sessionId = 's', turnId = 't', callId = 'mcp_start_files',
  server = 'files', commandLine = 'node server.js', root = '/w' })
lines.lines = real
H.check(shown[1] == '> instructions: `AGENTS.md` 17 bytes', 'the stored context line: ' .. vim.inspect(shown))
H.check(shown[4] == '- ❓ **start MCP server** files: node server.js — waiting for approval',
  'the server start approval: ' .. vim.inspect(shown))
H.check(shown[2] == '> the project\'s instructions changed: `AGENTS.md` 9 bytes (cut); this prompt carries the new text',
  'the stored change line: ' .. vim.inspect(shown))
H.check(shown[3] == '> reverted t_1: `a.txt` reverted, `b.txt` not known', 'the stored revert line: ' .. vim.inspect(shown))

-- Without a range the current buffer is still named.
require('pen').state.last_result = {}
vim.cmd('Pen and the file')
H.wait_turn()
sent = vim.fn.readfile(H.requests_file)
body = vim.json.decode(sent[#sent])
user = body.messages[#body.messages].content
H.check(user:find('Active file: lines.txt', 1, true) and not user:find('Selection:', 1, true), 'the buffer: ' .. user)

-- A buffer without a file sends the range's text, which pen judges alone: ordinary lines reach
-- the model, key-body lines never do (issue 26, item 2).
vim.cmd.enew()
local body = 'b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW'
vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'local x = compute()', body, body, body })
for _, case in ipairs({ { range = '1,1', sent = true }, { range = '2,4', sent = false } }) do
  require('pen').state.last_result = {}
  vim.cmd(case.range .. 'Pen what is this')
  H.wait_turn()
  sent = vim.fn.readfile(H.requests_file)
  local body_sent = vim.json.decode(sent[#sent])
  user = body_sent.messages[#body_sent.messages].content
  H.check(user:find('of a buffer with no file', 1, true), 'the scratch selection: ' .. user)
  if case.sent then
    H.check(user:find('local x = compute()', 1, true), 'the scratch line was not sent: ' .. user)
  else
    H.check(not user:find(body, 1, true), 'key-body lines were sent: ' .. user)
    H.check(user:find('private key material', 1, true), 'no note: ' .. user)
  end
end
H.done()
