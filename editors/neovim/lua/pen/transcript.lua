--- The transcript buffer: `pen://transcript` (markdown, in a split, reused).
--- It is rendered from two sources: live `pen/event` notifications while a turn runs, and
--- `pen/getTranscript` entries when a session is resumed. Both are tagged `kind`/`data` by pen
--- (the kinds they share carry the same data), and both go through `M.step`, so a resumed
--- session looks like a live one.
local P = require('pen.protocol')

local M = {}

--- sessionId -> bufnr, so each session keeps one buffer.
M.bufs = {}
--- sessionId -> true when the last thing written was a block (tool call, notice), not text.
M.after_block = {}
--- sessionId -> { turnId -> true } for the turns whose end its buffer already shows.
M.ended_turns = {}
--- sessionId -> the session's usage so far in a line (from the last `usage` event or turn end).
M.session_usage = {}
--- sessionId -> { mark = extmark id, count = lines }: where the session's plan checklist is, so
--- each `plan` update rewrites it in place rather than adding another.
M.plans = {}
M.plan_ns = vim.api.nvim_create_namespace('pen.checklist')

--- Usage in a line: the input in total, the share read from the provider's cache (only when
--- the provider reports cache reads), and the output; nil for anything that is not usage.
function M.usage_line(u)
  if type(u) ~= 'table' or type(u.inputTokens) ~= 'number' or type(u.outputTokens) ~= 'number' then
    return nil
  end
  local cached = ''
  if type(u.cacheReadTokens) == 'number' then
    local percent = u.inputTokens > 0 and math.floor(u.cacheReadTokens * 100 / u.inputTokens) or 0
    cached = (' (%d%% cached)'):format(percent)
  end
  return ('%d input tokens%s, %d output tokens'):format(u.inputTokens, cached, u.outputTokens)
end

local function buf_name(session_id)
  -- The first transcript is plain `pen://transcript`; more sessions get their id appended,
  -- which keeps names unique (Neovim refuses two buffers with one name).
  local count = vim.tbl_count(M.bufs)
  if count == 0 then
    return 'pen://transcript'
  end
  return 'pen://transcript/' .. session_id
end

--- The buffer for a session, created on first use.
function M.buf(session_id)
  local b = M.bufs[session_id]
  if b and vim.api.nvim_buf_is_valid(b) then
    return b
  end
  b = vim.api.nvim_create_buf(true, true)
  vim.api.nvim_buf_set_name(b, buf_name(session_id))
  vim.bo[b].buftype = 'nofile'
  vim.bo[b].bufhidden = 'hide'
  vim.bo[b].swapfile = false
  vim.bo[b].filetype = 'markdown'
  vim.b[b].pen_session = session_id
  M.bufs[session_id] = b
  return b
end

--- Show the session's buffer in a split (reusing a window already showing it).
function M.show(session_id, split)
  local b = M.buf(session_id)
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_win_get_buf(w) == b then
      return b, w
    end
  end
  local cur = vim.api.nvim_get_current_win()
  vim.cmd((split or 'vsplit'))
  local w = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(w, b)
  vim.wo[w].wrap = true
  -- Keep the user where they were typing; the transcript only follows along.
  vim.api.nvim_set_current_win(cur)
  return b, w
end

--- Append text at the end of the buffer; text may continue the last line (streaming deltas).
function M.append(session_id, text)
  local b = M.buf(session_id)
  local last = vim.api.nvim_buf_line_count(b)
  local last_line = vim.api.nvim_buf_get_lines(b, last - 1, last, false)[1] or ''
  local parts = vim.split(text, '\n', { plain = true })
  parts[1] = last_line .. parts[1]
  vim.api.nvim_buf_set_lines(b, last - 1, last, false, parts)
  -- Scroll windows showing the transcript to the end so streaming stays visible.
  for _, w in ipairs(vim.fn.win_findbuf(b)) do
    vim.api.nvim_win_set_cursor(w, { vim.api.nvim_buf_line_count(b), 0 })
  end
end

--- The buffer lines of `items`: each item split at its newlines (a CR before one is dropped),
--- because `nvim_buf_set_lines` refuses an item that contains a newline, and errors, answers
--- and tool results often do.
function M.split_lines(items)
  local out = {}
  for _, item in ipairs(items) do
    for _, line in ipairs(vim.split(tostring(item), '\n', { plain = true })) do
      table.insert(out, (line:gsub('\r$', '')))
    end
  end
  return out
end

--- `text` as a Markdown block quote: every line of it starts with `> `.
function M.quote(text)
  local out = {}
  for _, line in ipairs(M.split_lines({ text })) do
    table.insert(out, line == '' and '>' or ('> ' .. line))
  end
  return out
end

--- Append whole lines (a block), starting on a fresh line. An item may hold several lines.
function M.lines(session_id, lines)
  lines = M.split_lines(lines)
  M.after_block[session_id] = true
  local b = M.buf(session_id)
  local last = vim.api.nvim_buf_line_count(b)
  local last_line = vim.api.nvim_buf_get_lines(b, last - 1, last, false)[1] or ''
  if last == 1 and last_line == '' then
    vim.api.nvim_buf_set_lines(b, 0, 1, false, lines)
  else
    if last_line ~= '' then
      table.insert(lines, 1, '')
    end
    vim.api.nvim_buf_set_lines(b, last, last, false, lines)
  end
  M.append(session_id, '\n')
end

function M.clear(session_id)
  M.after_block[session_id] = nil
  M.plans[session_id] = nil
  -- The buffer is rendered again from scratch: so are the ends of its turns.
  M.ended_turns[session_id] = nil
  vim.api.nvim_buf_set_lines(M.buf(session_id), 0, -1, false, {})
end

--- What a call works on, as pen sends it (`summary`: its tool computes it), quoted.
local function subject(d)
  if type(d.summary) == 'string' and d.summary ~= '' then
    return '`' .. d.summary .. '`'
  end
  return ''
end

--- Human words for the states of a finished call (pen's `CallOutcome`).
local STATE_LABEL = {
  [P.call_outcome.DONE] = 'done',
  [P.call_outcome.ERROR] = 'error',
  [P.call_outcome.DENIED] = 'denied by the owner',
  [P.call_outcome.STALE_AUTHORITY] = 'approval no longer applies',
  [P.call_outcome.NOT_EXECUTED] = 'not executed (stopped)',
  [P.call_outcome.INTERRUPTED] = 'interrupted; outcome unknown',
  [P.call_outcome.UNKNOWN] = 'outcome unknown',
}

--- What the plugin says of a turn that ended in error, by pen's `errorKind` (never by the
--- wording of `lastError`): how to go on. nil when the error itself says enough.
local K = P.error_kind
M.ERROR_HINTS = {
  [K.HISTORY_UNREPAIRABLE] = 'this session cannot continue: :PenNew starts a new one',
  [K.CONTEXT_WINDOW] = "the conversation no longer fits the model's context window: :PenNew starts a new session",
  [K.NO_PROVIDER] = 'no model provider is configured: see :checkhealth pen, and the `settings` of '
    .. "require('pen').setup() (:help pen-setup)",
  [K.AUTH] = 'the provider refused the credentials: check the API key and the provider `settings` '
    .. '(:checkhealth pen, :help pen-setup)',
  [K.RATE_LIMIT] = 'the provider is rate-limiting requests: :PenRetry sends the prompt again',
  [K.NETWORK] = 'the provider could not be reached: :PenRetry sends the prompt again',
  [K.SESSION_BUSY] = 'another pen is running a turn in this session: wait for it, or stop it there',
  [K.BUDGET_TOO_LARGE] = 'the prompt does not fit the prompt budget: shorten it, or :PenNew starts a new session',
}

function M.diff_lines(diff)
  local out = { '```diff' }
  vim.list_extend(out, vim.split((diff:gsub('\r', '')), '\n', { plain = true, trimempty = true }))
  table.insert(out, '```')
  return out
end

--- callIds whose approval (and diff) is already rendered: the `pen/requestApproval` request
--- and the `approval_requested` event carry the same data and may arrive in either order.
M.shown_approvals = {}

--- Render an approval request with its diff, once per call.
function M.approval(d)
  if M.shown_approvals[d.callId or ''] then
    return
  end
  M.shown_approvals[d.callId or ''] = true
  local what = d.kind == P.approval_kind.START_MCP_SERVER
    and ('**start MCP server** %s: %s'):format(tostring(d.server), tostring(d.commandLine))
    or ('**%s** %s'):format(d.tool or '?', subject(d))
  local l = { ('- ❓ %s — waiting for approval'):format(what) }
  if type(d.diff) == 'string' then
    vim.list_extend(l, M.diff_lines(d.diff))
  end
  M.lines(d.sessionId, l)
end

--- A finished tool call: its state, and for anything but success the start of its result.
function M.finished(session_id, d)
  local l = { ('- %s **%s** — %s'):format(d.isError and '✗' or '✓', d.tool or '?',
    STATE_LABEL[d.state] or tostring(d.state)) }
  if type(d.excerpt) == 'string' and d.excerpt ~= '' and d.state ~= P.call_outcome.DONE then
    table.insert(l, '  > ' .. (d.excerpt:gsub('%s+', ' ')):sub(1, 200))
  end
  M.lines(session_id, l)
end

--- Answer text (streamed or stored). After a block of tool lines it starts a new paragraph.
function M.text(session_id, text)
  if M.after_block[session_id] then
    M.after_block[session_id] = nil
    if text ~= '' then
      M.append(session_id, '\n')
    end
  end
  M.append(session_id, text)
end

--- The end of a turn, rendered once per turn (from the live event, the pen/prompt answer or
--- the stored entry, whichever comes first): the stop reason, the error and what to do.
function M.turn_ended(s, turn_id, d)
  -- pen has been seen to deliver turn_ended just after the answer, and by then the next prompt
  -- may already be in the buffer.
  if turn_id and turn_id ~= vim.NIL then
    local ended = M.ended_turns[s] or {}
    M.ended_turns[s] = ended
    if ended[turn_id] then
      return
    end
    ended[turn_id] = true
  end
  local l = { ('*— turn ended: %s*'):format(tostring(d.stopReason)) }
  if d.lastError and d.lastError ~= vim.NIL then
    vim.list_extend(l, M.quote(tostring(d.lastError)))
  end
  local hint = M.ERROR_HINTS[d.errorKind]
  if hint then
    table.insert(l, '> ' .. hint)
  end
  -- The turn's usage and the session's so far (absent in turns an older pen stored).
  local turn = M.usage_line(d.usage)
  if turn then
    table.insert(l, '> usage this turn: ' .. turn)
  end
  local session = M.usage_line(d.sessionUsage)
  if session then
    M.session_usage[s] = session
    table.insert(l, '> usage this session: ' .. session)
  end
  M.lines(s, l)
end

local PLAN_MARKS = {
  [P.plan_step_status.PENDING] = '[ ]',
  [P.plan_step_status.IN_PROGRESS] = '[>]',
  [P.plan_step_status.DONE] = '[x]',
}

--- The lines of a plan checklist: a heading, then one `- [x] text` line per step, in order.
function M.plan_lines(steps)
  steps = type(steps) == 'table' and steps or {}
  if #steps == 0 then
    return { '**Plan** (cleared)' }
  end
  local l = { '**Plan**' }
  for _, step in ipairs(steps) do
    -- A step is one line (pen refuses line breaks); a stray one is flattened anyway.
    local text = tostring(step.text):gsub('[\r\n]+', ' ')
    table.insert(l, ('- %s %s'):format(PLAN_MARKS[step.status] or '[?]', text))
  end
  return l
end

--- The session's plan (the whole list each time): the first one is appended as a block; each
--- later one replaces it where it is, so the buffer holds one checklist, kept current.
function M.plan(s, steps)
  local b = M.buf(s)
  local lines = M.plan_lines(steps)
  local shown = M.plans[s]
  if shown then
    local at = vim.api.nvim_buf_get_extmark_by_id(b, M.plan_ns, shown.mark, {})
    if at[1] then
      vim.api.nvim_buf_set_lines(b, at[1], at[1] + shown.count, false, lines)
      vim.api.nvim_buf_set_extmark(b, M.plan_ns, at[1], 0, { id = shown.mark })
      shown.count = #lines
      return
    end
  end
  M.lines(s, lines)
  -- `M.lines` ends the block with an empty line: the checklist is the lines before it.
  local start = vim.api.nvim_buf_line_count(b) - 1 - #lines
  M.plans[s] = { mark = vim.api.nvim_buf_set_extmark(b, M.plan_ns, start, 0, {}), count = #lines }
end

local E = P.event_kind
local R = P.entry_kind

--- One step of a session, live or stored: `kind` and `data` as pen sends them.
function M.step(s, turn_id, kind, d)
  d = type(d) == 'table' and d or {}
  if kind == E.TEXT_DELTA or kind == R.ASSISTANT_MESSAGE then
    -- A stored answer's calls are rendered from the tool_call entries that follow it.
    if type(d.text) == 'string' and d.text ~= '' then
      M.text(s, d.text)
    end
  elseif kind == R.USER_PROMPT then
    M.prompt(s, type(d.text) == 'string' and d.text or '')
  elseif kind == E.TOOL_CALL_STARTED or kind == R.TOOL_CALL then
    M.lines(s, { ('- 🔧 **%s** %s — running'):format(tostring(d.tool), subject(d)) })
  elseif kind == E.APPROVAL_REQUESTED then
    M.approval(vim.tbl_extend('keep', d, { sessionId = s }))
  elseif kind == E.APPROVAL_WITHDRAWN then
    M.lines(s, { ('- approval for `%s` withdrawn (stopped)'):format(d.callId or '?') })
  elseif kind == E.TOOL_CALL_FINISHED then
    M.finished(s, d)
  elseif kind == R.TOOL_RESULT then
    -- The stored result carries the whole content the model read, where the event has a head.
    M.finished(s, vim.tbl_extend('force', d, { tool = d.tool ~= vim.NIL and d.tool or '?',
      excerpt = type(d.content) == 'string' and d.content or nil }))
  elseif kind == E.CONTEXT_TRIMMED and d.reason == P.trim_reason.BUDGET then
    M.lines(s, { M.budget_notice(d) })
  elseif kind == E.CONTEXT_TRIMMED then
    M.lines(s, { ('> context trimmed (%s): %d tool result(s) cut to %s bytes'):format(
      tostring(d.reason), #(d.shrunkCallIds or {}), tostring(d.headBytes or '?')) })
  elseif kind == R.CONTEXT_WINDOW_REJECTED then
    M.lines(s, { ('> the model rejected a request of about %s tokens as over its context window'):format(
      tostring(d.estimatedTokens)) })
  elseif kind == E.PLAN then
    M.plan(s, d.steps)
  elseif kind == R.TOOL_ALLOWED_FOR_SESSION then
    M.lines(s, { ('> `%s` allowed for the rest of this session'):format(tostring(d.tool)) })
  elseif kind == E.CONTEXT_WINDOW then
    -- One line at a session's first turn: the model, its window and where that came from.
    M.lines(s, { '> ' .. tostring(d.line) })
  elseif kind == E.PROVIDER_WARNING then
    M.lines(s, { '> ⚠ ' .. tostring(d.message) })
  elseif kind == E.USAGE then
    -- One request's usage: kept for the status line; the turn's end shows the totals.
    M.session_usage[s] = M.usage_line(d.session) or M.session_usage[s]
  elseif kind == E.TURN_ENDED then
    M.turn_ended(s, turn_id, d)
  elseif kind == E.INSTRUCTIONS_CHANGED then
    M.lines(s, { '> the project\'s instructions changed: ' .. M.instruction_files(d.files)
      .. '; this prompt carries the new text' })
  elseif kind == R.SESSION_CONTEXT then
    -- The instructions and environment the session's requests carry (pen/getSessionContext).
    if type(d.instructions) == 'table' and #d.instructions > 0 then
      M.lines(s, { '> instructions: ' .. M.instruction_files(d.instructions) })
    end
  elseif kind == R.INSTRUCTIONS_DELIVERED then
    M.lines(s, { '> instructions delivered with a result: ' .. M.instruction_files(d.files) })
  elseif kind == R.CONTEXT_COMPACTED then
    M.lines(s, { ('> context compacted (policy %s): %s older exchange(s) left out, budget %s tokens'):format(
      tostring(d.policyVersion), tostring(d.droppedCount), tostring(d.budget)) })
  elseif kind == R.REVERT_STARTED then
    M.lines(s, { ('> reverting %s: %s'):format(M.list(d.turns), M.list(d.files)) })
  elseif kind == R.FILES_REVERTED then
    local files = {}
    for _, f in ipairs(type(d.files) == 'table' and d.files or {}) do
      local status = f.status ~= vim.NIL and f.status or 'not known'
      table.insert(files, ('`%s` %s'):format(tostring(f.path), tostring(status)))
    end
    M.lines(s, { ('> %s %s: %s'):format(d.interrupted and 'interrupted revert of' or 'reverted',
      M.list(d.turns), table.concat(files, ', ')) })
  elseif kind == R.EVENT then
    -- An event of a newer pen: shown as it is stored.
    M.lines(s, { '> ' .. vim.json.encode(d) })
  end
end

--- A list of names in a line.
function M.list(names)
  return table.concat(vim.tbl_map(tostring, type(names) == 'table' and names or {}), ', ')
end

--- Instruction files in a line: name, size, cut or not read.
function M.instruction_files(files)
  local out = {}
  for _, f in ipairs(type(files) == 'table' and files or {}) do
    local note = ''
    if f.refused ~= nil and f.refused ~= vim.NIL then
      note = ' (not read)'
    elseif f.cut then
      note = ' (cut)'
    end
    table.insert(out, ('`%s` %s bytes%s'):format(tostring(f.path), tostring(f.bytes or '?'), note))
  end
  return table.concat(out, ', ')
end

--- Render one live `pen/event`.
function M.on_event(p)
  M.step(p.sessionId, p.turnId, p.kind, p.data)
end

--- The line for a prompt-budget report (policy 3): what was compacted and the estimate.
function M.budget_notice(d)
  local parts = {}
  local excerpted = #(d.excerptedCallIds or {})
  -- droppedExchanges are seq spans (adjacent exchanges joined); droppedCount counts them.
  local dropped = d.droppedCount or #(d.droppedExchanges or {})
  if excerpted > 0 then
    table.insert(parts, ('%d older tool call(s) sent as excerpts'):format(excerpted))
  end
  local omitted = #(d.omittedCallIds or {})
  if omitted > 0 then
    table.insert(parts, ('%d of them left out'):format(omitted))
  end
  if dropped > 0 then
    table.insert(parts, ('%d older exchange(s) left out'):format(dropped))
  end
  return ('> context trimmed (budget): %s; about %s → %s tokens, budget %s'):format(
    table.concat(parts, ', '), tostring(d.tokensBefore), tostring(d.tokensAfter), tostring(d.budget))
end

function M.prompt(session_id, text)
  local l = { '## You' }
  vim.list_extend(l, vim.split(text, '\n', { plain = true }))
  vim.list_extend(l, { '', '## pen' })
  M.lines(session_id, l)
end

--- Render stored entries (`pen/getTranscript`), e.g. when resuming a session: through the
--- same `step` as live events.
function M.render_entries(session_id, entries)
  for _, e in ipairs(entries) do
    M.step(session_id, e.turnId, e.kind, e.data)
  end
end

return M
