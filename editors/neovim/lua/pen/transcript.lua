--- The transcript buffer: `pen://transcript` (markdown, in a split, reused).
--- It is rendered from two sources: live `pen/event` notifications while a turn runs, and
--- `pen/getTranscript` entries when a session is resumed. Both go through the same small
--- writers so a resumed session looks like a live one.
local M = {}

--- sessionId -> bufnr, so each session keeps one buffer.
M.bufs = {}
--- sessionId -> true when the last thing written was a block (tool call, notice), not text.
M.after_block = {}
--- turnIds whose end is already rendered.
M.ended_turns = {}

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
  vim.api.nvim_buf_set_lines(M.buf(session_id), 0, -1, false, {})
end

local function short_args(args)
  if type(args) ~= 'table' then
    return ''
  end
  if args.path then
    return '`' .. tostring(args.path) .. '`'
  end
  if args.command then
    return '`' .. tostring(args.command) .. '`'
  end
  if args.query then
    return '`' .. tostring(args.query) .. '`'
  end
  return ''
end

--- Human words for tool_call_finished states.
local STATE_LABEL = {
  done = 'done',
  error = 'error',
  denied = 'denied by the owner',
  stale_authority = 'approval no longer applies',
  not_executed = 'not executed (stopped)',
  unknown = 'outcome unknown',
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
  local l = { ('- ❓ **%s** %s — waiting for approval'):format(d.tool or '?', short_args(d.arguments)) }
  if type(d.diff) == 'string' then
    vim.list_extend(l, M.diff_lines(d.diff))
  end
  M.lines(d.sessionId, l)
end

--- A finished tool call: its state, and for anything but success the start of its result.
function M.finished(session_id, d)
  local l = { ('- %s **%s** — %s'):format(d.isError and '✗' or '✓', d.tool or '?',
    STATE_LABEL[d.state] or tostring(d.state)) }
  if type(d.excerpt) == 'string' and d.excerpt ~= '' and d.state ~= 'done' then
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

--- Render one live `pen/event`.
function M.on_event(p)
  local s, d = p.sessionId, p.data or {}
  if p.kind == 'text_delta' then
    M.text(s, d.text or '')
  elseif p.kind == 'tool_call_started' then
    M.lines(s, { ('- 🔧 **%s** %s — running'):format(d.tool or '?', short_args(d.arguments)) })
  elseif p.kind == 'approval_requested' then
    M.approval(vim.tbl_extend('keep', d, { sessionId = s }))
  elseif p.kind == 'approval_withdrawn' then
    M.lines(s, { ('- approval for `%s` withdrawn (stopped)'):format(d.callId or '?') })
  elseif p.kind == 'tool_call_finished' then
    M.finished(s, d)
  elseif p.kind == 'context_trimmed' and d.reason == 'budget' then
    M.lines(s, { M.budget_notice(d) })
  elseif p.kind == 'context_trimmed' then
    M.lines(s, { ('> context trimmed (%s): %d tool result(s) cut to %s bytes'):format(
      tostring(d.reason), #(d.shrunkCallIds or {}), tostring(d.headBytes or '?')) })
  elseif p.kind == 'turn_ended' then
    -- The end of a turn is rendered once, from this event or from the pen/prompt answer,
    -- whichever Neovim sees first: pen has been seen to deliver turn_ended just after the
    -- answer, and by then the next prompt may already be in the buffer.
    if p.turnId then
      if M.ended_turns[p.turnId] then
        return
      end
      M.ended_turns[p.turnId] = true
    end
    local l = { ('*— turn ended: %s*'):format(tostring(d.stopReason)) }
    if d.lastError and d.lastError ~= vim.NIL then
      vim.list_extend(l, M.quote(tostring(d.lastError)))
    end
    M.lines(s, l)
  end
end

--- The line for a prompt-budget report (policy 3): what was compacted and the estimate.
function M.budget_notice(d)
  local parts = {}
  local excerpted = #(d.excerptedCallIds or {})
  local dropped = #(d.droppedExchanges or {})
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

--- Render stored entries (`pen/getTranscript`), e.g. when resuming a session. Stored payloads
--- are snake_case (`call_id`, `status`, `stop_reason`); they are mapped onto the same lines the
--- live events produce.
function M.render_entries(session_id, entries)
  for _, e in ipairs(entries) do
    local p = type(e.payload) == 'table' and e.payload or {}
    if e.kind == 'user_prompt' then
      M.prompt(session_id, p.text or '')
    elseif e.kind == 'assistant_message' then
      -- Its tool_calls are rendered from the tool_call entries that follow.
      if type(p.text) == 'string' and p.text ~= '' then
        M.text(session_id, p.text)
      end
    elseif e.kind == 'tool_call' then
      M.lines(session_id, { ('- 🔧 **%s** %s'):format(tostring(p.name), short_args(p.arguments)) })
    elseif e.kind == 'tool_result' then
      M.finished(session_id, { tool = p.name, state = p.status, isError = p.is_error,
        excerpt = type(p.content) == 'string' and p.content or nil })
    elseif e.kind == 'event' and p.type == 'turn_ended' then
      M.on_event({ sessionId = session_id, kind = 'turn_ended',
        data = { stopReason = p.stop_reason, lastError = p.last_error } })
    elseif e.kind == 'event' and p.type == 'results_shrunk' then
      -- Stored form of context_trimmed; its reason is the provider's rejection.
      M.on_event({ sessionId = session_id, kind = 'context_trimmed',
        data = { reason = 'context_window_exceeded', shrunkCallIds = p.call_ids, headBytes = p.head_bytes } })
    elseif e.kind == 'event' and p.type == 'context_trimmed' then
      M.on_event({ sessionId = session_id, kind = 'context_trimmed',
        data = { reason = 'budget', excerptedCallIds = p.excerpted_call_ids, omittedCallIds = p.omitted_call_ids,
          droppedExchanges = p.dropped_exchanges,
          tokensBefore = p.tokens_before, tokensAfter = p.tokens_after, budget = p.budget } })
    elseif e.kind == 'event' and p.type == 'context_window_rejected' then
      M.lines(session_id, { ('> the model rejected a request of about %s tokens as over its context window'):format(
        tostring(p.estimated_tokens)) })
    elseif e.kind == 'event' then
      M.lines(session_id, { '> ' .. vim.json.encode(p) })
    end
  end
end

return M
