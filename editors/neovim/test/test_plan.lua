-- pen_plan: the plan shows in the transcript as one checklist, rewritten in place by each
-- update (never a second one), live and again when the stored transcript is loaded.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
H.setup({
  { tool_calls = { { id = 'call_p1', name = 'pen_plan', arguments = { steps = {
    { text = 'read the parser', status = 'in_progress' },
    { text = 'fix the off-by-one', status = 'pending' },
  } } } } },
  { tool_calls = { { id = 'call_p2', name = 'pen_plan', arguments = { steps = {
    { text = 'read the parser', status = 'done' },
    { text = 'fix the off-by-one', status = 'in_progress' },
    { text = 'run the tests', status = 'pending' },
  } } } } },
  { text = 'Working on it.' },
})
local pen = require('pen')

vim.cmd('Pen fix the parser')
local res = H.wait_turn()
H.check(res.stopReason == 'end_turn', 'stopReason ' .. vim.inspect(res))

local latest = table.concat({
  '**Plan**',
  '- [x] read the parser',
  '- [>] fix the off-by-one',
  '- [ ] run the tests',
}, '\n')
local function check_one_checklist(when)
  local text = H.transcript_text()
  local first = text:find('**Plan**', 1, true)
  H.check(first, when .. ': no checklist in\n' .. text)
  H.check(not text:find('**Plan**', first + 1, true), when .. ': a second checklist in\n' .. text)
  H.check(text:find(latest, 1, true), when .. ': the checklist is not the latest plan:\n' .. text)
  H.check(not text:find('- [>] read the parser', 1, true), when .. ': the old plan is still shown:\n' .. text)
  -- In place: the checklist stays where the first plan was, before the answer.
  H.check(first < text:find('Working on it.', 1, true), when .. ': the checklist moved:\n' .. text)
end
check_one_checklist('live')

-- The stored transcript renders the same single checklist.
local client = vim.lsp.get_clients({ name = 'pen' })[1]
pen.load_transcript(client, pen.state.session)
check_one_checklist('stored')
H.done()
