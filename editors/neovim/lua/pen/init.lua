--- pen for Neovim: attaches the `pen serve` daemon as an LSP client (so open buffers sync and
--- pen's edits land in buffers with undo) and adds commands to prompt, stop, switch sessions.
local transcript = require('pen.transcript')
local P = require('pen.protocol')
local methods = P.methods

local M = {}

--- Documented defaults (see `:help pen-setup`).
M.defaults = {
  cmd = { 'pen', 'serve' },
  -- Handed verbatim to the daemon as initializationOptions and via pen/setConfig.
  settings = {},
  -- Extra environment for the daemon (e.g. PEN_DATA_DIR); nil inherits Neovim's.
  cmd_env = nil,
  -- Markers that find the workspace root of a buffer; one pen client per root.
  root_markers = { '.git' },
  -- Ex command used to open the transcript window.
  split = 'vsplit',
  -- false: no mappings. A table maps actions to lhs, e.g. { prompt = '<leader>pp' }.
  keymaps = false,
}

M.config = vim.deepcopy(M.defaults)

--- State of the plugin: the current session per client and the turn running in it.
M.state = {
  session = nil, -- current sessionId
  running = {}, -- sessionId -> client id while a pen/prompt is out
  last_result = {}, -- sessionId -> last pen/prompt result
  last_prompt = {}, -- sessionId -> the text of its last prompt, for :PenRetry
  status = '', -- short text for the statusline
  mode = nil, -- the permission mode :PenMode chose (nil: the daemon's `mode` setting)
  mode_sent = {}, -- 'clientId:sessionId' -> the mode last sent to that daemon with pen/setMode
}

local function notify(msg, level)
  vim.notify('pen: ' .. msg, level or vim.log.levels.INFO)
end

local function root_for(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  if name ~= '' and not name:match('^%a+://') then
    local r = vim.fs.root(buf, M.config.root_markers)
    if r then
      return r
    end
  end
  return vim.fn.getcwd()
end

--- A file buffer pen should see (not the transcript, help, terminals, …).
local function is_file_buf(buf)
  return vim.api.nvim_buf_is_loaded(buf)
    and vim.bo[buf].buftype == ''
    and vim.api.nvim_buf_get_name(buf) ~= ''
    and not vim.api.nvim_buf_get_name(buf):match('^%a+://')
end

--- `pen/requestApproval`: show the diff, then ask. The handler runs inside the coroutine
--- Neovim's RPC layer wraps server requests in, so it can yield until the user answers
--- without blocking the UI, then return the result.
local DENY_WITH_REASON = 'Deny and tell pen why'
local CHOICES = { 'Allow', 'Allow for session', 'Deny', DENY_WITH_REASON }
local DECISION = { Allow = P.decision.ALLOW, ['Allow for session'] = P.decision.ALLOW_FOR_SESSION, Deny = P.decision.DENY,
  [DENY_WITH_REASON] = P.decision.DENY }

local function approval_handler(_, params)
  local co = coroutine.running()
  local session = params.sessionId
  -- The diff goes into the transcript (and its window) before the question is asked.
  transcript.show(session, M.config.split)
  transcript.approval(params)
  local who = params.mode and ('pen [%s]'):format(params.mode) or 'pen'
  local prompt
  if params.kind == P.approval_kind.START_MCP_SERVER then
    prompt = ('%s wants to start the project MCP server %s (.mcp.json): %s'):format(who,
      tostring(params.server), tostring(params.commandLine))
  else
    prompt = ('%s wants to run %s%s'):format(who, params.tool,
      params.arguments and params.arguments.path and (' on ' .. params.arguments.path) or '')
    if params.arguments and params.arguments.command then
      prompt = prompt .. ': ' .. params.arguments.command
    end
  end
  M.state.status = 'pen: waiting for approval'
  vim.cmd('redrawstatus')
  local answered, choice, reason = false, nil, nil
  -- Resume on the next tick: a synchronous select (or a test stub) may answer before this
  -- coroutine has yielded.
  local function answer(item, why)
    vim.schedule(function()
      answered, choice, reason = true, item, why
      if coroutine.status(co) == 'suspended' then
        coroutine.resume(co)
      end
    end)
  end
  vim.schedule(function()
    vim.ui.select(CHOICES, { prompt = prompt, kind = 'pen.approval' }, function(item)
      if item ~= DENY_WITH_REASON then
        return answer(item)
      end
      vim.ui.input({ prompt = 'Why? (pen reads it): ' }, function(why)
        answer(item, why)
      end)
    end)
  end)
  if not answered then
    coroutine.yield()
  end
  -- A late answer to a withdrawn approval (Stop came first) must not revive the status.
  if M.state.running[session] then
    M.state.status = 'pen: running'
  end
  local result = { decision = DECISION[choice] or P.decision.DENY }
  if reason and reason ~= '' then
    result.reason = reason
  end
  return result
end

local function event_handler(_, params)
  transcript.on_event(params)
  -- Only the pen/prompt answer ends a turn for the statusline: a late event of the previous
  -- turn must not blank the status of the next one.
  if params.kind == P.event_kind.TOOL_CALL_STARTED and M.state.running[params.sessionId] then
    M.state.status = 'pen: ' .. tostring(params.data and params.data.tool)
    vim.cmd('redrawstatus')
  end
end

--- The pen client for a buffer's root, started (or reused) with vim.lsp.start.
function M.client(buf)
  buf = buf or vim.api.nvim_get_current_buf()
  local root = root_for(buf)
  for _, c in ipairs(vim.lsp.get_clients({ name = 'pen' })) do
    if c.root_dir == root then
      if is_file_buf(buf) and not vim.lsp.buf_is_attached(buf, c.id) then
        vim.lsp.buf_attach_client(buf, c.id)
      end
      return c
    end
  end
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  local id = vim.lsp.start({
    name = 'pen',
    cmd = M.config.cmd,
    cmd_env = M.config.cmd_env,
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = vim.fs.basename(root) } },
    init_options = M.config.settings,
    capabilities = caps,
    handlers = {
      [methods.EVENT] = event_handler,
      [methods.REQUEST_APPROVAL] = approval_handler,
    },
  }, { bufnr = buf, attach = is_file_buf(buf) })
  if not id then
    notify('could not start ' .. table.concat(M.config.cmd, ' '), vim.log.levels.ERROR)
    return nil
  end
  local client = vim.lsp.get_client_by_id(id)
  -- pen answers -32002 to requests before `initialize` completes; the handshake is local and
  -- quick, so wait for it (bounded) rather than queue requests ourselves.
  if not vim.wait(10000, function() return client.initialized or client:is_stopped() end, 10)
    or not client.initialized
  then
    notify('pen serve did not initialize (see :PenLog)', vim.log.levels.ERROR)
    return nil
  end
  -- Attach every open file buffer under this root, so pen reads their unsaved text.
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if b ~= buf and is_file_buf(b) and root_for(b) == root then
      vim.lsp.buf_attach_client(b, id)
    end
  end
  return client
end

--- Synchronous request helper for short calls (not pen/prompt).
local function request_sync(client, method, params, timeout)
  local resp = client:request_sync(method, params or vim.empty_dict(), timeout or 10000)
  if not resp then
    return nil, 'timeout'
  end
  if resp.err then
    return nil, resp.err.message
  end
  return resp.result
end

local function ensure_session(client, title)
  if M.state.session then
    return M.state.session
  end
  local res, err = request_sync(client, methods.NEW_SESSION,
    -- an empty Lua table would encode as a JSON array
    title and { title = title } or vim.empty_dict())
  if not res then
    notify('newSession failed: ' .. tostring(err), vim.log.levels.ERROR)
    return nil
  end
  M.state.session = res.sessionId
  return res.sessionId
end

--- What the owner has in view, for `pen/prompt`'s `context`: the current buffer's file, the
--- range of `:'<,'>Pen` and the window's visible lines. pen reads the lines from the buffer it
--- is sent (unsaved text included), so only the range goes. A buffer without a file sends the
--- range's text, which pen judges like any text a client sends (key material is withheld);
--- nil for such a buffer without a range.
local function focus_context(buf, range)
  local name = vim.api.nvim_buf_get_name(buf)
  if name == '' or vim.bo[buf].buftype ~= '' then
    if not range then
      return nil
    end
    local lines = vim.api.nvim_buf_get_lines(buf, range[1] - 1, range[2], false)
    return { selection = { startLine = range[1], endLine = range[2], text = table.concat(lines, '\n') .. '\n' } }
  end
  local context = { activeFile = vim.fn.fnamemodify(name, ':p') }
  if range then
    context.selection = { startLine = range[1], endLine = range[2] }
  end
  local win = vim.fn.bufwinid(buf)
  if win ~= -1 then
    local top, bottom = vim.fn.line('w0', win), vim.fn.line('w$', win)
    if top > 0 and bottom >= top then
      context.visibleRanges = { { startLine = top, endLine = bottom } }
    end
  end
  return context
end

--- `:Pen {prompt}`: send one turn; the answer streams into the transcript.
function M.prompt(text, range)
  local buf = vim.api.nvim_get_current_buf()
  if vim.b[buf].pen_session then
    -- Prompting from the transcript: use the file window's buffer for the root instead.
    buf = vim.fn.bufnr('#') > 0 and vim.fn.bufnr('#') or buf
  end
  local context = focus_context(buf, range)
  local shown = text
  if range and not context.activeFile then
    shown = ('%s\n\n(with lines %d-%d of a buffer without a file)'):format(text, range[1], range[2])
  elseif range then
    shown = ('%s\n\n(with `%s` lines %d-%d)'):format(text, vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ':.'),
      range[1], range[2])
  end
  local client = M.client(buf)
  if not client then
    return
  end
  local session = ensure_session(client, text:sub(1, 60))
  if not session then
    return
  end
  if M.state.running[session] then
    notify('a turn is already running; :PenStop first', vim.log.levels.WARN)
    return
  end
  if not M.send_mode(client, session) then
    return
  end
  transcript.show(session, M.config.split)
  transcript.prompt(session, shown)
  -- Remember which daemon runs the turn: :PenStop must go to that one.
  M.state.running[session] = client.id
  M.state.last_prompt[session] = text
  M.state.status = 'pen: thinking'
  -- pen/prompt answers when the turn ends: asynchronous, the UI never waits on it.
  -- Sent for the file's buffer, so its pending changes reach pen first.
  client:request(methods.PROMPT, { sessionId = session, text = text, context = context }, function(err, result)
    M.state.running[session] = nil
    M.state.status = ''
    if err then
      local l = { '> error: ' .. tostring(err.message) }
      -- A JSON-RPC error carries its kind in `data` (`session_busy`: another turn runs).
      local kind = type(err.data) == 'table' and err.data.kind or nil
      if transcript.ERROR_HINTS[kind] then
        table.insert(l, '> ' .. transcript.ERROR_HINTS[kind])
      end
      transcript.lines(session, l)
      M.state.last_result[session] = { error = err }
    else
      M.state.last_result[session] = result
      M.show_instructions(client, session)
      transcript.on_event({ sessionId = session, turnId = result.turnId, kind = P.event_kind.TURN_ENDED,
        data = { stopReason = result.stopReason, lastError = result.lastError, errorKind = result.errorKind,
          usage = result.usage, sessionUsage = result.sessionUsage } })
      if result.stopReason == P.stop_reason.ERROR and result.lastError then
        local hint = transcript.ERROR_HINTS[result.errorKind]
        notify(tostring(result.lastError) .. (hint and ('\n' .. hint) or ''), vim.log.levels.ERROR)
      end
      if M.NEW_SESSION_KINDS[result.errorKind] then
        M.offer_new_session(session)
      end
    end
    vim.cmd('redrawstatus')
  end, buf)
end

--- Shows, once per session, the instruction files its requests carry (name, size, cut), from
--- `pen/getSessionContext`; an older pen without the method shows nothing.
function M.show_instructions(client, session)
  M.state.instructions_shown = M.state.instructions_shown or {}
  if M.state.instructions_shown[session] then
    return
  end
  client:request(methods.GET_SESSION_CONTEXT, { sessionId = session }, function(err, result)
    if err or type(result) ~= 'table' or not result.recorded then
      return
    end
    M.state.instructions_shown[session] = true
    if type(result.instructions) == 'table' and #result.instructions > 0 then
      transcript.lines(session, { '> instructions: ' .. transcript.instruction_files(result.instructions) })
    end
  end)
end

--- The `errorKind`s after which a session cannot go on: a new session is the way on.
M.NEW_SESSION_KINDS = {
  [P.error_kind.HISTORY_UNREPAIRABLE] = true,
  [P.error_kind.CONTEXT_WINDOW] = true,
}

--- `:PenRetry`: send the last prompt of the current session again (after a rate limit or a
--- network failure).
function M.retry()
  local s = M.state.session
  local text = s and M.state.last_prompt[s]
  if not text then
    notify('no prompt to retry in this session', vim.log.levels.WARN)
    return
  end
  M.prompt(text)
end

--- No turn can run in `session` again (its transcript says so): offer a new session, with a
--- choice when there is a UI to ask; `:PenNew` in any case.
function M.offer_new_session(session)
  if #vim.api.nvim_list_uis() == 0 then
    return
  end
  vim.schedule(function()
    vim.ui.select({ 'Start a new session', 'Keep this one' },
      { prompt = 'pen cannot repair this session' }, function(choice)
        if choice == 'Start a new session' then
          M.new_session('')
        end
      end)
  end)
end

function M.stop()
  local s = M.state.session
  local id = s and M.state.running[s]
  local client = id and vim.lsp.get_client_by_id(id)
  if not client then
    notify('nothing is running')
    return
  end
  client:request(methods.STOP, { sessionId = s }, function(err, res)
    if err then
      notify('stop failed: ' .. err.message, vim.log.levels.ERROR)
    elseif not res.stopped then
      notify('nothing was running')
    end
  end)
end

function M.new_session(title)
  local client = M.client()
  if not client then
    return
  end
  M.state.session = nil
  local s = ensure_session(client, title ~= '' and title or nil)
  if s then
    transcript.show(s, M.config.split)
    notify('new session ' .. s)
  end
end

--- Fetch every page of a session's transcript and render it into its buffer.
function M.load_transcript(client, session)
  transcript.clear(session)
  local after = nil
  repeat
    local res, err = request_sync(client, methods.GET_TRANSCRIPT, { sessionId = session, afterSeq = after })
    if not res then
      notify('getTranscript failed: ' .. tostring(err), vim.log.levels.ERROR)
      return
    end
    transcript.render_entries(session, res.entries or {})
    after = res.nextAfterSeq
  until after == nil or after == vim.NIL or #(res.entries or {}) == 0
end

function M.sessions()
  local client = M.client()
  if not client then
    return
  end
  local res, err = request_sync(client, methods.LIST_SESSIONS, { limit = 200 })
  if not res then
    notify('listSessions failed: ' .. tostring(err), vim.log.levels.ERROR)
    return
  end
  vim.ui.select(res.sessions or {}, {
    prompt = 'pen session',
    kind = 'pen.session',
    format_item = function(s)
      return ('%s  (%d entries)  %s'):format(s.title or '(untitled)', s.entryCount or 0,
        os.date('%Y-%m-%d %H:%M', math.floor((s.updatedAt or 0) / 1000)))
    end,
  }, function(choice)
    if not choice then
      return
    end
    M.state.session = choice.sessionId
    transcript.show(choice.sessionId, M.config.split)
    M.load_transcript(client, choice.sessionId)
  end)
end

--- The turn ids of `session`, oldest first (from pen/getTranscript).
local function turns_of(client, session)
  local turns, seen, after = {}, {}, nil
  repeat
    local res, err = request_sync(client, methods.GET_TRANSCRIPT, { sessionId = session, afterSeq = after })
    if not res then
      return nil, err
    end
    for _, e in ipairs(res.entries or {}) do
      local t = e.turnId
      if type(t) == 'string' and not seen[t] then
        seen[t] = true
        table.insert(turns, t)
      end
    end
    after = res.nextAfterSeq
  until after == nil or after == vim.NIL or #(res.entries or {}) == 0
  return turns
end

--- The turn `arg` names (an id, or a number counted from 1), else the session's last one.
local function pick_turn(client, session, arg)
  local turns, err = turns_of(client, session)
  if not turns then
    return nil, err
  end
  if arg and arg ~= '' then
    local n = tonumber(arg)
    if n then
      return turns[n], ('no turn %d (the session has %d)'):format(n, #turns)
    end
    return arg
  end
  return turns[#turns], 'the session has no turn'
end

--- The client, the current session and the turn `arg` names in it (`pick_turn`), or nothing
--- after telling the owner why (no session, no such turn).
local function session_turn(arg)
  local client = M.client()
  local s = M.state.session
  if not client or not s then
    notify('no pen session', vim.log.levels.WARN)
    return
  end
  local turn, why = pick_turn(client, s, arg)
  if not turn then
    notify(tostring(why), vim.log.levels.ERROR)
    return
  end
  return client, s, turn
end

--- The lines of a pen/revertTurn result for the transcript.
local function revert_lines(res)
  local l = { '', ('> reverted %d turn(s): %s'):format(#res.turns, table.concat(res.turns, ', ')) }
  for _, f in ipairs(res.files or {}) do
    table.insert(l, ('> - %s: %s%s'):format(f.path, f.status, f.reason and (' (' .. f.reason .. ')') or ''))
    if f.diff then
      table.insert(l, '```diff')
      vim.list_extend(l, vim.split(f.diff, '\n', { plain = true, trimempty = true }))
      table.insert(l, '```')
    end
  end
  for _, c in ipairs(res.commands or {}) do
    table.insert(l, ('> not reverted: %s `%s`'):format(c.tool, c.summary))
  end
  return l
end

--- `:PenUndo [turn]`: revert the file changes of a turn (the last one by default; an id or a
--- number) and every later one. Open buffers change as edits (`u` takes the revert back).
--- Conflicts (files changed since pen wrote them) are shown as diffs, then overwritten only
--- when the owner says so.
function M.undo(arg, force)
  local client, s, turn = session_turn(arg)
  if not turn then
    return
  end
  M.state.status = 'pen: reverting'
  -- Asynchronous: the daemon sends workspace/applyEdit back while it reverts.
  client:request(methods.REVERT_TURN, { sessionId = s, turnId = turn, force = force or false }, function(err, res)
    M.state.status = ''
    M.state.last_revert = err and { error = err } or res
    if err then
      notify('revert failed: ' .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    transcript.lines(s, revert_lines(res))
    local conflicts = vim.tbl_filter(function(f) return f.status == P.file_status.CONFLICT end, res.files or {})
    if #conflicts > 0 and not force then
      vim.ui.select({ 'Keep them', 'Overwrite them' },
        { prompt = ('%d file(s) changed since pen wrote them'):format(#conflicts) }, function(choice)
          if choice == 'Overwrite them' then
            M.undo(turn, true)
          end
        end)
    end
  end)
end

--- `:PenFork [turn]`: a new session with the history before a turn (the last one by default),
--- which becomes the current session; the original is not changed.
function M.fork(arg)
  local client, s, turn = session_turn(arg)
  if not turn then
    return
  end
  local res, err = request_sync(client, methods.FORK_SESSION, { sessionId = s, beforeTurnId = turn })
  if not res then
    notify('fork failed: ' .. tostring(err), vim.log.levels.ERROR)
    return
  end
  M.state.session = res.sessionId
  transcript.show(res.sessionId, M.config.split)
  M.load_transcript(client, res.sessionId)
  notify('forked ' .. s .. ' before ' .. turn .. ' as ' .. res.sessionId)
  return res.sessionId
end

--- The data directory, as the daemon computes it: $PEN_DATA_DIR, else the platform's.
function M.data_dir()
  local env = (M.config.cmd_env or {}).PEN_DATA_DIR or vim.env.PEN_DATA_DIR
  if env and env ~= '' then
    return env
  end
  local xdg = vim.env.XDG_DATA_HOME
  if not xdg or xdg == '' then
    xdg = vim.fs.joinpath(vim.env.HOME or '~', '.local', 'share')
  end
  return vim.fs.joinpath(xdg, 'pen')
end

function M.log()
  local logs = vim.fn.glob(vim.fs.joinpath(M.data_dir(), 'logs', 'pen.log.*'), false, true)
  if #logs == 0 then
    notify('no log in ' .. vim.fs.joinpath(M.data_dir(), 'logs'), vim.log.levels.WARN)
    return
  end
  table.sort(logs)
  vim.cmd('split ' .. vim.fn.fnameescape(logs[#logs]))
end

--- `:PenMcp`: one line per MCP server (status, tools, schema tokens, why it is down).
function M.mcp_status()
  local client = vim.lsp.get_clients({ name = 'pen' })[1]
  if not client then
    notify('pen is not running: MCP servers start with the first turn', vim.log.levels.INFO)
    return
  end
  local res, err = request_sync(client, methods.MCP_STATUS, vim.empty_dict())
  if not res then
    notify('pen/mcpStatus: ' .. tostring(err), vim.log.levels.ERROR)
    return
  end
  local lines = {}
  for _, s in ipairs(res.servers or {}) do
    lines[#lines + 1] = ('%s: %s, %d tools, ~%d schema tokens%s%s'):format(s.name, s.status,
      s.toolCount, s.schemaTokens, s.project and ' (.mcp.json)' or '',
      s.reason ~= vim.NIL and s.reason and (' — ' .. s.reason) or '')
  end
  notify(#lines > 0 and table.concat(lines, '\n') or 'no MCP servers configured', vim.log.levels.INFO)
end

--- Sends the mode :PenMode chose to the session's daemon (pen/setMode) unless it has it; false
--- (and says why) when the daemon refused it.
function M.send_mode(client, session)
  local mode = M.state.mode
  -- Keyed by client too: a restarted daemon knows no session's mode.
  local key = client.id .. ':' .. session
  if not mode or M.state.mode_sent[key] == mode then
    return true
  end
  local _, err = request_sync(client, methods.SET_MODE, { sessionId = session, mode = mode })
  if err then
    notify('setMode: ' .. tostring(err), vim.log.levels.ERROR)
    return false
  end
  M.state.mode_sent[key] = mode
  return true
end

--- `:PenMode {mode}`: the permission mode of this and later sessions (plan, ask, edit, auto);
--- the running turn's next call is decided under it. Without an argument, says the mode.
function M.set_mode(mode)
  if mode == nil or mode == '' then
    notify('mode: ' .. (M.state.mode or 'the daemon\'s `mode` setting (ask by default)'))
    return
  end
  if not vim.tbl_contains(M.MODES, mode) then
    notify(('no mode %q; the modes are %s'):format(mode, table.concat(M.MODES, ', ')), vim.log.levels.ERROR)
    return
  end
  M.state.mode = mode
  local session = M.state.session
  if session then
    local id = M.state.running[session]
    local client = id and vim.lsp.get_client_by_id(id) or M.client()
    if client then
      M.send_mode(client, session)
    end
  end
  vim.cmd('redrawstatus')
end

--- The permission modes, as the protocol names them (for :PenMode's completion).
M.MODES = { P.mode.PLAN, P.mode.ASK, P.mode.EDIT, P.mode.AUTO }

--- Statusline component: '' when idle, unless :PenMode chose a mode (then it is shown).
function M.status()
  local mode = M.state.mode
  if not mode then
    return M.state.status
  end
  if M.state.status == '' then
    return ('pen [%s]'):format(mode)
  end
  return (M.state.status:gsub('^pen:', ('pen [%s]:'):format(mode)))
end

--- Push new settings to running daemons (pen/setConfig) as well as future starts.
function M.set_settings(settings)
  M.config.settings = settings
  for _, c in ipairs(vim.lsp.get_clients({ name = 'pen' })) do
    c:request(methods.SET_CONFIG, settings, function(err)
      if err then
        notify('setConfig: ' .. err.message, vim.log.levels.ERROR)
      end
    end)
  end
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  if opts and opts.settings then
    -- verbatim: no deep merge with defaults, lists such as auto_approve stay as given
    M.config.settings = opts.settings
    if #vim.lsp.get_clients({ name = 'pen' }) > 0 then
      M.set_settings(opts.settings)
    end
  end
  local km = M.config.keymaps
  if type(km) == 'table' then
    local actions = {
      prompt = function() vim.api.nvim_feedkeys(':Pen ', 'n', false) end,
      stop = M.stop,
      new = function() M.new_session('') end,
      sessions = M.sessions,
    }
    for action, lhs in pairs(km) do
      if actions[action] and lhs then
        vim.keymap.set('n', lhs, actions[action], { desc = 'pen: ' .. action })
      end
    end
  end
  -- Attach file buffers opened later to an existing client for their root.
  local group = vim.api.nvim_create_augroup('pen_attach', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
    group = group,
    callback = function(ev)
      local root = root_for(ev.buf)
      for _, c in ipairs(vim.lsp.get_clients({ name = 'pen' })) do
        if c.root_dir == root and is_file_buf(ev.buf) then
          vim.lsp.buf_attach_client(ev.buf, c.id)
        end
      end
    end,
  })
end

return M
