-- A session whose history pen cannot repair (here a result with no call, as a hand edit of the
-- database leaves it): :Pen ends in error with errorKind history_unrepairable, the transcript
-- says the session cannot continue, and the plugin offers a new session, which it starts.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
H.setup({ { text = 'First answer.' }, { text = 'never sent: the history is refused first' } })
local pen = require('pen')

vim.cmd('Pen hello')
H.check(H.wait_turn().stopReason == 'end_turn', 'the first turn ends')
local first = pen.state.session

-- The hand edit: a tool result whose call is nowhere in the session.
local db = vim.fs.joinpath(H.data, 'sessions.sqlite3')
local edit = vim.system({ 'python3', '-c', [[
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("""INSERT INTO entries (session_id, seq, kind, turn_id, tick, created_at, call_id, payload)
              SELECT ?1, MAX(seq) + 1, 'tool_result', NULL, 0, 0, 'ghost',
                     '{"call_id": "ghost", "content": "ok", "status": "done"}'
              FROM entries WHERE session_id = ?1""", (sys.argv[2],))
db.commit()
]], db, first }):wait()
H.check(edit.code == 0, 'hand edit of the database: ' .. (edit.stderr or ''))

-- A UI that answers the offer with "Start a new session".
vim.api.nvim_list_uis = function() return { {} } end
local offered
vim.ui.select = function(items, opts, cb)
  offered = { items = items, prompt = opts.prompt }
  cb('Start a new session')
end

pen.state.last_result = {}
vim.cmd('Pen continue')
-- The turn of the first session: by the time it is seen, the offer may have moved on.
H.wait(20000, function() return pen.state.last_result[first] ~= nil end, 'the second turn to end')
local res = pen.state.last_result[first]
H.check(res.stopReason == 'error', 'stopReason ' .. vim.inspect(res))
H.check(res.errorKind == 'history_unrepairable', 'errorKind ' .. vim.inspect(res))
-- The first session's own buffer: the offer may already have moved on to the new session.
local b = require('pen.transcript').bufs[first]
local text = table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\n')
H.check(text:find('this session cannot continue', 1, true), 'the transcript says so:\n' .. text)
-- Re-rendered from pen/getTranscript, the stored turn_ended says so again, from its errorKind.
require('pen').load_transcript(require('pen').client(), first)
local stored = table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\n')
H.check(stored:find('this session cannot continue', 1, true), 'the stored transcript says so:\n' .. stored)
H.wait(5000, function() return offered ~= nil end, 'the offer of a new session')
H.check(vim.tbl_contains(offered.items, 'Start a new session'), 'offer ' .. vim.inspect(offered))
H.wait(5000, function() return pen.state.session ~= nil and pen.state.session ~= first end,
  'a new session after the offer was taken')
H.done()
