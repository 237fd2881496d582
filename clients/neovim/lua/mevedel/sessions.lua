-- mevedel.sessions: the session half of the Neovim client.
--
-- The server owns sessions (`mevedel/session/*`, `mevedel/turn/*`); this
-- module shows what it lists and sends what the user picked. A session's
-- transcript view is the virtual document of its `history://root`, read
-- like any other `mevedel-resource:` buffer, and `mevedel/session/didChange`
-- reads the views of the session that changed again. The server's
-- questions (`window/showMessageRequest`, such as whether to take over a
-- session whose lease expired) are asked with `vim.ui.select`.

local mevedel = require('mevedel')
local client_or_notify, present, scoped = mevedel.client_or_notify, mevedel.present, mevedel.scoped

local M = {}

--- The `mevedel/session/open` mode of each action the listing offers.
M.open_modes = { Switch = 'auto', Resume = 'resume', Join = 'join', ['Take over'] = 'takeover' }

--- The last `mevedel/session/didChange` params (also announced as the
--- `User MevedelSessionChanged` autocommand).
M.last_change = nil

local levels = vim.log.levels



-- Sends METHOD; on failure tells the user the server's words.
local function call(client, method, params)
  local result, err, data = mevedel.request(client, method, params or vim.empty_dict())
  if not result then
    mevedel.notify_failure(err, data)
  end
  return result
end


--- The session the current buffer is about (a transcript, a turn view), or
--- nil for the server's current session.
function M.session_here()
  local session = vim.b.mevedel_session
  if present(session) then
    return session
  end
  return nil
end

-- Listing ---------------------------------------------------------------------

--- The rows a picker offers for a `mevedel/session/list` result: every
--- session, then the directories that can only be inspected.
function M.picker_items(listing)
  local items = {}
  for _, row in ipairs(listing.sessions or {}) do
    table.insert(items, { kind = 'session', row = row })
  end
  for _, row in ipairs(present(listing.inspect) and listing.inspect or {}) do
    table.insert(items, { kind = 'inspect', row = row })
  end
  return items
end

--- One picker line: name, action, turns, host and id; an Inspect row's reason.
function M.format_item(item)
  local row = item.row
  if item.kind == 'inspect' then
    return string.format('%s  [Inspect]  %s', row.name, row.reason)
  end
  local parts = { row.displayName, '[' .. row.action .. ']', string.format('%d turn%s', row.turns, row.turns == 1 and '' or 's') }
  if present(row.holderHost) then
    table.insert(parts, 'host ' .. row.holderHost)
  end
  if row.current == true then
    table.insert(parts, '(current)')
  end
  if row.displayName ~= row.sessionId then
    table.insert(parts, row.sessionId)
  end
  return table.concat(parts, '  ')
end

-- Transcript views ------------------------------------------------------------

--- Show SESSION's transcript (default: the current session) in the current
--- window, read again if it is already open. Returns the buffer number.
function M.transcript(session, client)
  client = client or client_or_notify()
  if not client then
    return nil
  end
  local described = call(client, 'mevedel/address/describe', scoped(session, { address = 'history://root' }))
  if not described then
    return nil
  end
  local uri = described.uri
  if not present(uri) or not mevedel.uri_session(uri) then
    mevedel.notify('no session is current; pick one with :MevedelSessions', levels.WARN)
    return nil
  end
  local name = mevedel.buffer_name_for_uri(uri)
  local existing = vim.fn.bufnr(name)
  local was_loaded = existing > 0 and vim.api.nvim_buf_is_loaded(existing)
  vim.cmd('edit ' .. vim.fn.fnameescape(name))
  local bufnr = vim.api.nvim_get_current_buf()
  if was_loaded then
    local ok, err = mevedel.refresh_virtual(bufnr, client)
    if not ok then
      mevedel.notify(err)
    end
  end
  vim.b[bufnr].mevedel_closed = nil
  return bufnr
end

-- Opening ---------------------------------------------------------------------

-- The open waiting for the user to answer the server's question through an
-- asynchronous vim.ui.select (see on_question), by client id.
local pending_open = {}
local late_questions = {}

local function opened(client, result, on_opened)
  local state = result.session
  local verb = ({ switch = 'switched to', join = 'joined', takeover = 'took over' })[result.action] or 'resumed'
  local message = string.format('%s %s (%s)', verb, state.displayName, state.access)
  if present(result.interruptedTurn) then
    message = message .. string.format('; turn %d was in flight and is now interrupted', result.interruptedTurn)
  end
  mevedel.notify(message, levels.INFO)
  M.transcript(state.sessionId, client)
  if present(state.recoveryPending) then
    require('mevedel.lifecycle').offer_recovery(
      client,
      state.sessionId,
      string.format('%s is in recovery %s: an interrupted Rewind or Redo left project files to repair', state.sessionId, state.recoveryPending)
    )
  end
  if on_opened then
    on_opened(result)
  end
end

--- Open SESSION in MODE ('auto', 'resume', 'join' or 'takeover') and show
--- its transcript. Does not wait: ON_OPENED(result) runs once it is open.
function M.open(session, mode, on_opened, client)
  client = client or client_or_notify()
  if not client then
    return
  end
  local params = { sessionId = session, mode = mode or 'auto' }
  pending_open[client.id] = { session = session, on_opened = on_opened }
  mevedel.request_async(client, 'mevedel/session/open', params, function(result, err, data)
    local pending = pending_open[client.id]
    pending_open[client.id] = nil
    if result then
      opened(client, result, on_opened)
    elseif type(data) == 'table' and data.kind == 'takeover-declined' and (late_questions[client.id] or pending.superseded) then
      -- The question is (or was) in front of the user; their answer decides.
    else
      mevedel.notify_failure(err, data)
    end
  end)
end

--- Pick a session from the server's listing (vim.ui.select) and open it
--- with the mode its action gives; Inspect rows say why they cannot open.
function M.pick(on_opened)
  local client = client_or_notify()
  if not client then
    return
  end
  local listing = call(client, 'mevedel/session/list')
  if not listing then
    return
  end
  local items = M.picker_items(listing)
  if #items == 0 then
    mevedel.notify('this workspace has no sessions yet; :MevedelSessionNew starts one', levels.INFO)
    return
  end
  vim.ui.select(items, { prompt = 'mevedel sessions', format_item = M.format_item, kind = 'mevedel.session' }, function(item)
    if not item then
      return
    end
    if item.kind == 'inspect' then
      mevedel.notify(string.format('%s can only be inspected: %s', item.row.name, item.row.reason), levels.WARN)
      return
    end
    M.open(item.row.sessionId, M.open_modes[item.row.action], on_opened, client)
  end)
end

-- Commands --------------------------------------------------------------------

--- Start a session (NAME may be empty) and show its transcript.
function M.create(name)
  local client = client_or_notify()
  if not client then
    return nil
  end
  name = name and vim.trim(name) or ''
  local state = call(client, 'mevedel/session/create', name ~= '' and { name = name } or vim.empty_dict())
  if state then
    mevedel.notify('created session ' .. state.displayName, levels.INFO)
    M.transcript(state.sessionId, client)
  end
  return state
end

function M.rename(name, session)
  local client = client_or_notify()
  local state = client and call(client, 'mevedel/session/rename', scoped(session, { name = name or '' }))
  if state then
    mevedel.notify(string.format('session %s is now called %s', state.sessionId, state.displayName), levels.INFO)
  end
  return state
end

local function report_save(what, result)
  if result then
    local outcome = result.committed == true and 'published'
      or (present(result.note) and result.note)
      or 'nothing was published'
    mevedel.notify(string.format('%s %s: %s', what, result.sessionId, outcome), levels.INFO)
  end
  return result
end

function M.save(session)
  local client = client_or_notify()
  return report_save('saved', client and call(client, 'mevedel/session/save', scoped(session)))
end

function M.close(session)
  local client = client_or_notify()
  local result = client and call(client, 'mevedel/session/close', scoped(session))
  if result then
    mevedel.notify('closed ' .. result.sessionId .. (result.saved == true and ' (saved its unsaved content)' or ''), levels.INFO)
  end
  return result
end

function M.retry_publication(session)
  local client = client_or_notify()
  return report_save('retried', client and call(client, 'mevedel/session/retryPublication', scoped(session)))
end

function M.abandon_publication(session)
  local client = client_or_notify()
  local result = client and call(client, 'mevedel/session/abandonPublication', scoped(session))
  if result then
    local outcome = result.abandoned == true and 'the failed save was dropped; the next save carries its content'
      or 'no failed save was pending'
    mevedel.notify(result.sessionId .. ': ' .. outcome, levels.INFO)
  end
  return result
end

function M.abort_turn(reason, session)
  local client = client_or_notify()
  local params = scoped(session, (reason and reason ~= '') and { reason = reason } or nil)
  return report_save('interrupted the turn in flight in', client and call(client, 'mevedel/turn/abort', params))
end

-- Turns -----------------------------------------------------------------------

function M.format_turn(turn)
  local text = string.format('%d  %s  %d tools  %s', turn.turn, turn.state, turn.toolCalls, turn.prompt)
  if present(turn.reason) then
    text = text .. '  (' .. turn.reason .. ')'
  end
  return text
end

--- Move to TURN's heading in SESSION's transcript view (opening it).
function M.goto_turn(turn, session)
  local client = client_or_notify()
  local shown = client and call(client, 'mevedel/turn/show', scoped(session, { turn = turn }))
  if not shown then
    return false
  end
  local heading = vim.split(shown.markdown, '\n', { plain = true })[1]
  local bufnr = M.transcript(shown.sessionId, client)
  if not bufnr then
    return false
  end
  for row, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if line == heading then
      vim.api.nvim_win_set_cursor(0, { row, 0 })
      vim.cmd('normal! zt')
      return true
    end
  end
  mevedel.notify(string.format('turn %d is not in the transcript of %s', turn, shown.sessionId), levels.WARN)
  return false
end

--- Pick a turn of SESSION (vim.ui.select) and go to it in the transcript.
function M.pick_turn(session)
  local client = client_or_notify()
  local listing = client and call(client, 'mevedel/turn/list', scoped(session))
  if not listing then
    return
  end
  if #listing.turns == 0 then
    mevedel.notify(listing.sessionId .. ' has no turns yet', levels.INFO)
    return
  end
  vim.ui.select(listing.turns, { prompt = 'mevedel turns of ' .. listing.sessionId, format_item = M.format_turn, kind = 'mevedel.turn' }, function(turn)
    if turn then
      M.goto_turn(turn.turn, listing.sessionId)
    end
  end)
end

--- Show TURN of SESSION alone, as the transcript renders it, read-only.
function M.show_turn(turn, session)
  local client = client_or_notify()
  local shown = client and call(client, 'mevedel/turn/show', scoped(session, { turn = turn }))
  if not shown then
    return nil
  end
  local name = string.format('mevedel turn %d of %s', turn, shown.sessionId)
  local bufnr = vim.fn.bufnr(name)
  if bufnr < 0 then
    bufnr = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(bufnr, name)
  end
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, vim.split(shown.markdown, '\n', { plain = true }))
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'filetype', 'markdown')
  vim.b[bufnr].mevedel_session = shown.sessionId
  vim.api.nvim_set_current_buf(bufnr)
  return bufnr
end

-- Server messages -------------------------------------------------------------

--- `mevedel/session/didChange`: read the session's open views again.
function M.on_did_change(_, params, ctx)
  M.last_change = params
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.b[bufnr].mevedel_uri and vim.b[bufnr].mevedel_session == params.sessionId then
      if params.reason == 'closed' then
        -- Its live conversation is gone from the server; the text stays.
        vim.b[bufnr].mevedel_closed = true
      elseif client then
        local ok, err = mevedel.refresh_virtual(bufnr, client)
        if not ok then
          mevedel.notify('could not refresh ' .. vim.api.nvim_buf_get_name(bufnr) .. ': ' .. tostring(err))
        end
      end
    end
  end
  require('mevedel.chat').on_session_change(params, ctx)
  if params.reason == 'closed' then
    mevedel.notify('session ' .. params.sessionId .. ' was closed; its transcript view is no longer updated', levels.INFO)
  elseif params.reason == 'read-only' then
    mevedel.notify('session ' .. params.sessionId .. ' is now read-only here (another client took it over)', levels.WARN)
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelSessionChanged', modeline = false })
end

-- Following, refresh, compaction and /clear ------------------------------------

-- Sessions whose following was turned off here, by client id and session.
local follow_off = {}

--- Turn following of SESSION (nil: the current one) on or off here.
function M.toggle_follow(session)
  local client = client_or_notify()
  if not client then
    return nil
  end
  if not session then
    local listing = call(client, 'mevedel/turn/list')
    if not listing then
      return nil
    end
    session = listing.sessionId
  end
  local key = client.id .. ' ' .. session
  local state = call(client, 'mevedel/session/setFollow', { sessionId = session, enabled = follow_off[key] == true })
  if not state then
    return nil
  end
  follow_off[key] = state.enabled ~= true or nil
  local said
  if state.enabled ~= true then
    said = 'not following (:MevedelRefresh reads the latest)'
  elseif state.following == true then
    said = "following the owner's publications (" .. (present(state.mode) and state.mode or 'on') .. ')'
  else
    said = 'following is on; it applies while the session is read-only here'
  end
  mevedel.notify(session .. ': ' .. said, levels.INFO)
  return state
end

--- Read SESSION's committed head now, followed or not.
function M.refresh(session)
  local client = client_or_notify()
  local result = client and call(client, 'mevedel/session/refresh', scoped(session))
  if not result then
    return nil
  end
  local said = ({
    unchanged = "already at the owner's latest",
    writable = 'you own it; there is nothing to refresh',
  })[result.status]
  if result.status == 'advanced' then
    said = string.format("now at the owner's latest (%d settled turns)", result.publication.settledTurns)
  elseif result.status == 'held-back' then
    said = 'not advanced: ' .. tostring(result.publication.heldBack)
  end
  mevedel.notify(result.sessionId .. ': ' .. said, levels.INFO)
  return result
end

--- Compact SESSION: its live segment closes, the next starts with SUMMARY.
function M.compact(summary, session)
  local client = client_or_notify()
  local result = client and call(client, 'mevedel/session/compact', scoped(session, { summary = summary or '' }))
  if result then
    mevedel.notify(
      string.format('%s: segment %d closed; segment %d starts with your summary', result.sessionId, result.previousSegment, result.segment),
      levels.INFO
    )
  end
  return result
end

--- /clear SESSION: the current chat closes as a chapter, a new one starts.
function M.clear(session)
  local client = client_or_notify()
  local result = client and call(client, 'mevedel/session/clear', scoped(session))
  if result then
    mevedel.notify(
      string.format('%s: chapter %s closed; a new chat starts in segment %d', result.sessionId, tostring(result.chapter), result.segment),
      levels.INFO
    )
  end
  return result
end

--- The last `mevedel/session/didPublish` params (also announced as the
--- `User MevedelSessionPublished` autocommand).
M.last_publish = nil

--- `mevedel/session/didPublish`: a followed session advanced; read its
--- open views again (whole settled turns only). A held-back head is told.
function M.on_did_publish(_, params, ctx)
  M.last_publish = params
  if present(params.heldBack) then
    mevedel.notify(params.sessionId .. ': the owner published a newer state, not adopted here: ' .. params.heldBack, levels.WARN)
  else
    require('mevedel.chat').on_session_change(params, ctx)
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if client and vim.api.nvim_buf_is_loaded(bufnr) and vim.b[bufnr].mevedel_uri and vim.b[bufnr].mevedel_session == params.sessionId then
        local ok, err = mevedel.refresh_virtual(bufnr, client)
        if not ok then
          mevedel.notify('could not refresh ' .. vim.api.nvim_buf_get_name(bufnr) .. ': ' .. tostring(err))
        end
      end
    end
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelSessionPublished', modeline = false })
end

-- A late answer to a question whose request has gone ahead without it.
local late_control = {}

local function answered_late(client_id, title)
  local control_session = late_control[client_id]
  late_control[client_id] = nil
  if control_session then
    if title == 'Grant' then
      require('mevedel.control').grant(control_session)
    elseif title == 'Keep' or title == nil then
      require('mevedel.control').keep(control_session)
    end
    return
  end
  local late = late_questions[client_id]
  late_questions[client_id] = nil
  local open = late and late.open
  if open then
    open.superseded = true
  end
  if title == 'Take over' and open then
    -- The server declined the first open for want of an answer; this one
    -- carries the confirmation.
    local client = vim.lsp.get_client_by_id(client_id)
    if client then
      local params = { sessionId = open.session, mode = 'takeover', confirmTakeover = true }
      mevedel.request_async(client, 'mevedel/session/open', params, function(result, err)
        if result then
          opened(client, result, open.on_opened)
        else
          mevedel.notify(err)
        end
      end)
    end
  elseif open then
    mevedel.notify(open.session .. ' was not taken over', levels.INFO)
  end
end

-- The server asks permission for an agent's tool call in these words
-- ("AGENT asks permission: TITLE"); the chat shows the question meanwhile.
local function is_permission(message)
  return type(message) == 'string' and message:find(' asks permission: ', 1, true) ~= nil
end

--- `window/showMessageRequest`: ask with vim.ui.select (the actions as its
--- items; kind `mevedel.permission` for an agent's permission question,
--- else `mevedel.question`) and answer the chosen action. From Neovim 0.10
--- the handler runs in a coroutine, so a vim.ui.select that answers later
--- (a picker plugin) still answers the request. On older versions the
--- reply cannot wait: the server gets no answer (for a takeover: Cancel; for
--- a permission: refused) and the open is sent again, confirmed, if the
--- user then chooses Take over; a Grant / Keep question gets an error
--- answer and the late choice is sent as mevedel/control/grant or keep.
--- Esc or an empty choice answers null at once: the cautious choice
--- (refuse a permission, Cancel a takeover, Keep the session).
function M.on_question(_, params, ctx)
  local titles = {}
  for _, action in ipairs(params.actions or {}) do
    table.insert(titles, action.title)
  end
  if #titles == 0 then
    mevedel.notify(params.message, levels.INFO)
    return vim.NIL
  end
  local permission = is_permission(params.message)
  local chat_session = permission and require('mevedel.chat').on_question_asked(ctx.client_id, params.message) or nil
  local function done(choice)
    if permission then
      require('mevedel.chat').on_question_answered(chat_session)
    end
    return choice and { title = choice } or vim.NIL
  end
  local co, is_main = coroutine.running()
  local waiting = co ~= nil and not is_main and vim.fn.has('nvim-0.10') == 1
  local answered, answer = false, nil
  local asking = true
  vim.ui.select(titles, { prompt = 'mevedel: ' .. params.message, kind = permission and 'mevedel.permission' or 'mevedel.question' }, function(choice)
    -- Neovim's own select leaves the question's lines in the message
    -- area: the message after the answer (what was done, or not) would
    -- stack under them and ask "Press ENTER" of someone who had answered.
    pcall(vim.cmd, 'redraw')
    if asking then
      answered, answer = true, choice
    elseif waiting then
      -- Resumed outside the picker's callback, after the yield below.
      vim.schedule(function()
        coroutine.resume(co, choice)
      end)
    elseif permission then
      if choice then
        mevedel.notify('the answer came too late for this Neovim; the agent was refused', levels.WARN)
      end
    else
      answered_late(ctx.client_id, choice)
    end
  end)
  asking = false
  if answered then
    return done(answer)
  end
  if waiting then
    return done(coroutine.yield())
  end
  if permission then
    return done(nil)
  end
  local asked_for = type(params.message) == 'string' and params.message:match('asks for control of session (.-)%. ')
  if asked_for then
    -- A null answer would Keep at once; an error answer leaves it to the
    -- late choice (sent as mevedel/control/grant or keep) or the timeout.
    late_control[ctx.client_id] = asked_for
    return nil, { code = -32800, message = 'the question is answered later' }
  end
  late_questions[ctx.client_id] = { open = nil }
  if pending_open[ctx.client_id] then
    late_questions[ctx.client_id].open = pending_open[ctx.client_id]
  end
  return vim.NIL
end

return M
