-- Usage: each turn's end shows the turn's and the session's usage (input, cached share,
-- output), live and again when the session's transcript is loaded from pen.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
H.setup({
  { text = 'First.', usage = { prompt_tokens = 2006, completion_tokens = 300, total_tokens = 2306,
      prompt_tokens_details = { cached_tokens = 1920 } } },
  { text = 'Second.', usage = { prompt_tokens = 2100, completion_tokens = 20, total_tokens = 2120,
      prompt_tokens_details = { cached_tokens = 2000 } } },
})
local pen = require('pen')
local transcript = require('pen.transcript')

vim.cmd('Pen one')
H.check(H.wait_turn().stopReason == 'end_turn', 'first turn')
pen.state.last_result = {}
vim.cmd('Pen two')
local res = H.wait_turn()
H.check(res.sessionUsage and res.sessionUsage.inputTokens == 4106, 'pen/prompt totals ' .. vim.inspect(res))

local expected = {
  '> usage this turn: 2006 input tokens (95% cached), 300 output tokens',
  '> usage this session: 2006 input tokens (95% cached), 300 output tokens',
  '> usage this turn: 2100 input tokens (95% cached), 20 output tokens',
  '> usage this session: 4106 input tokens (95% cached), 320 output tokens',
}
local function check_lines(when)
  local text = H.transcript_text()
  local at = 1
  for _, line in ipairs(expected) do
    local found = text:find(line, at, true)
    H.check(found, when .. ': missing ' .. line .. ' in\n' .. text)
    at = found + #line
  end
end
check_lines('live')
local session = pen.state.session
H.check(transcript.session_usage[session] == '4106 input tokens (95% cached), 320 output tokens',
  'session usage ' .. tostring(transcript.session_usage[session]))

-- The stored transcript renders the same lines.
local client = vim.lsp.get_clients({ name = 'pen' })[1]
pen.load_transcript(client, session)
check_lines('stored')
H.done()
