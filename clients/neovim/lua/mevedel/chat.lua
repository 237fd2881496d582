-- mevedel.chat: prompt an agent and watch its turns, in a chat buffer.
--
-- `mevedel/turn/prompt` sends a prompt to an ACP agent as the next turn of
-- a session and answers once the turn settled; meanwhile the server sends
-- `mevedel/turn/didUpdate` (phases starting, running, cancelling, settled;
-- events response, reasoning, tool_call, plan, permission). A session's
-- chat buffer shows its past turns (`mevedel/turn/list` and
-- `mevedel/turn/show`) and streams the running one: the response as it
-- arrives, reasoning folded, each tool call with its status and diffs,
-- the plan, permission decisions, a sub-agent's activity nested under the
-- tool call that started it (mevedel.nested: streamed, a closed fold once
-- it is done), and the error of a failed or refused prompt with what to do
-- about it. From the chat: cancel the turn, and
-- Rewind, Redo, Fork or Worktree Fork at the turn under the cursor (the
-- prepare / confirm / commit flow of `mevedel.lifecycle`).

local mevedel = require('mevedel')
local present = mevedel.present

local M = {}

local levels = vim.log.levels

-- State ------------------------------------------------------------------------------

-- One chat per session id: { session, client_id, bufnr, name, access,
-- turns (settled or past, by position), live (the turn in flight, or the
-- prompt waiting to start), refusal, asking }.
local chats = {}
-- The agent picked for a session here (the server remembers it too).
local agents_by_session = {}
-- Turns whose live view was seen here (it has the diffs), by turn id.
local live_by_id = {}
-- `mevedel/turn/show` of settled turns, by turn id.
local shown_by_id = {}
-- Fold levels of a chat buffer's lines, by buffer.
local folds = {}

--- The agent picked for SESSION here, if any.
function M.agent_for(session)
  return agents_by_session[session]
end

function M.set_agent(session, agent)
  agents_by_session[session] = agent
end

--- The chat of SESSION (its model; nil when none was opened or prompted).
function M.get(session)
  return chats[session]
end

local value = mevedel.value

local function chat_for(session, client_id)
  local chat = chats[session]
  if not chat then
    chat = { session = session, turns = {}, name = session }
    chats[session] = chat
  end
  chat.client_id = client_id or chat.client_id
  return chat
end

local function client_of(chat)
  local client = chat.client_id and vim.lsp.get_client_by_id(chat.client_id)
  if client then
    return client
  end
  return mevedel.client_or_notify()
end

-- Events -------------------------------------------------------------------------

local function find_block(turn, kind, call_id)
  for _, block in ipairs(turn.blocks) do
    if block.kind == kind and (call_id == nil or block.callId == call_id) then
      return block
    end
  end
end

local function add_text(turn, kind, text)
  if not text or text == '' then
    return
  end
  local last = turn.blocks[#turn.blocks]
  if last and last.kind == kind then
    last.text = last.text .. text
  else
    table.insert(turn.blocks, { kind = kind, text = text })
  end
end

local TOOL_FIELDS = { 'title', 'toolKind', 'status', 'output', 'diffs' }

--- Apply one TurnEvent to TURN's blocks.
function M.apply_event(turn, event)
  local kind = event.kind
  if kind == 'response' or kind == 'reasoning' then
    add_text(turn, kind, value(event.text))
  elseif kind == 'tool_call' then
    local call_id = value(event.callId)
    local block = call_id and find_block(turn, 'tool', call_id)
    if not block then
      block = { kind = 'tool', callId = call_id }
      table.insert(turn.blocks, block)
    end
    for _, field in ipairs(TOOL_FIELDS) do
      if value(event[field]) ~= nil then
        block[field] = event[field]
      end
    end
  elseif kind == 'plan' then
    local block = find_block(turn, 'plan')
    if block then
      block.text = value(event.text) or ''
    else
      table.insert(turn.blocks, { kind = 'plan', text = value(event.text) or '' })
    end
  elseif kind == 'permission' then
    table.insert(turn.blocks, {
      kind = 'permission',
      callId = value(event.callId),
      text = value(event.text) or '',
      decision = value(event.decision) or '',
      allowed = event.allowed == true,
    })
  end
end

--- A `mevedel/turn/show` result as a turn of the chat.
function M.turn_from_show(shown)
  local summary = shown.summary
  local turn = {
    turn = summary.turn,
    turnId = summary.turnId,
    segment = summary.segment,
    state = summary.state,
    reason = value(summary.reason),
    -- The labels as recorded (absent for turns recorded by hand).
    agent = value(summary.agent),
    stopReason = value(summary.stopReason),
    prompt = shown.prompt,
    blocks = {},
  }
  local nested = require('mevedel.nested')
  -- Sub-agents' own sub-agents' tasks, waiting for their caller's.
  local waiting = {}
  for _, item in ipairs(shown.items or {}) do
    local kind = item.kind
    if kind == 'response' or kind == 'reasoning' then
      add_text(turn, kind, value(item.text))
    elseif kind == 'tool_call' then
      table.insert(turn.blocks, {
        kind = 'tool',
        callId = value(item.callId),
        title = value(item.name),
        toolKind = value(item.toolKind),
        arguments = value(item.arguments),
      })
    elseif kind == 'tool_result' then
      local block = find_block(turn, 'tool', value(item.callId))
      if not block then
        block = { kind = 'tool', callId = value(item.callId) }
        table.insert(turn.blocks, block)
      end
      block.status = item.isError == true and 'failed' or 'completed'
      block.output = value(item.output)
    elseif kind == 'plan' then
      local block = find_block(turn, 'plan')
      if block then
        block.text = value(item.text) or ''
      else
        table.insert(turn.blocks, { kind = 'plan', text = value(item.text) or '' })
      end
    elseif kind == 'permission' then
      table.insert(turn.blocks, {
        kind = 'permission',
        callId = value(item.callId),
        text = value(item.text) or '',
        decision = value(item.output) or '',
        allowed = item.isError ~= true,
      })
    elseif kind == 'mail' then
      table.insert(turn.blocks, { kind = 'mail', sender = value(item.sender), text = value(item.text) or '' })
    elseif kind == 'agent_task' then
      -- A sub-agent's settled task, as the live chat shows it settled.
      nested.add_task(turn, item, waiting)
    end
  end
  nested.place_waiting(turn, waiting)
  return turn
end

-- Rendering ------------------------------------------------------------------------

-- What to do about a refused prompt, by error kind (the server's reason
-- says more).
M.actions = {
  ['agent-not-configured'] = 'add the agent to the `agents` setting (and set `defaultAgent`); docs/agents.md has ready entries',
  ['agent-not-installed'] = "install the agent's program, or fix `agents.NAME.command`",
  ['agent-needs-login'] = 'log in with one of the login methods named above (the agent keeps its own login), then prompt again',
  ['agent-failed'] = "read the agent's log ($XDG_STATE_HOME/mevedel/logs/agent-NAME.log), fix the cause, then prompt again",
  ['attachment-refused'] = 'attach a text file inside the workspace (or an image, for an agent that takes images), or none',
  ['read-only'] = 'take control of the session (:MevedelTakeControl), or prompt in a session of your own',
  ['conflict'] = 'wait for the running turn to settle, or cancel it (:MevedelCancel)',
  ['owner-missing'] = 'open the session first (:MevedelSessions)',
  ['transfer-draining'] = 'the session is being handed to another client; prompt there, or take control back later',
}

local function split_lines(text)
  return vim.split(text or '', '\n', { plain = true })
end

local function indented(into, text, prefix)
  for _, line in ipairs(split_lines(text)) do
    table.insert(into, prefix .. line)
  end
end

local function relative(chat, path)
  local root = chat.root
  if root and path:sub(1, #root + 1) == root .. '/' then
    return path:sub(#root + 2)
  end
  return path
end

local diff_text = (vim.text and vim.text.diff) or vim.diff

local function diff_lines(chat, diff)
  local path = relative(chat, diff.path or '?')
  local old = value(diff.oldText)
  local new = diff.newText or ''
  local lines = { '--- ' .. (old and path or '/dev/null'), '+++ ' .. path }
  local function ensure_newline(text)
    return (text == '' or text:sub(-1) == '\n') and text or text .. '\n'
  end
  local hunks = diff_text(ensure_newline(old or ''), ensure_newline(new), { result_type = 'unified', ctxlen = 2 })
  for _, line in ipairs(split_lines(hunks)) do
    if line ~= '' then
      table.insert(lines, line)
    end
  end
  return lines
end

local STATE_WORDS = {
  ['in-flight'] = 'in flight',
  completed = 'completed',
  errored = 'errored',
  interrupted = 'interrupted',
}

-- The sentence saying why a turn was interrupted (BEGAN false: its prompt
-- was aborted before its turn began), from the REASON the server recorded.
local function why_interrupted(reason, began)
  local stop = reason:sub(-1) == '.' and '' or '.'
  return (began and 'Interrupted: ' or 'Aborted before it reached the agent: ') .. reason .. stop
end

-- Adds LINE to SINK ({ lines, levels }) with its fold LEVEL (nil: none).
local function emit(sink, line, level)
  table.insert(sink.lines, line)
  if level then
    sink.levels[#sink.lines] = level
  end
end

local PHASE_WORDS = { starting = 'starting', running = 'running', cancelling = 'cancelling' }

local render_blocks

-- A sub-agent's block (mevedel.nested): a heading naming it and how it
-- stands, then its activity indented under it; while it runs its activity
-- shows (streamed), once settled it is a closed fold under the heading.
local function render_agent(chat, block, sink, indent, depth)
  local settled = block.phase == 'settled'
  local inner = settled and depth + 1 or depth
  local body = { lines = {}, levels = {} }
  local prefix = indent .. '    '
  local function text(head, t)
    for i, line in ipairs(split_lines(t)) do
      emit(body, prefix .. (i == 1 and head or string.rep(' ', #head)) .. line, inner > 0 and tostring(inner) or nil)
    end
  end
  render_blocks(chat, block.blocks, body, prefix, inner)
  if block.error then
    text('[error] ', block.error.message or block.error.kind or 'the sub-agent failed')
  end
  local name = block.label or block.path
  if settled then
    emit(sink, string.format('%s[agent] %s: %s, %d line%s (zo shows, zc hides)', indent, name, block.outcome or 'completed',
      #body.lines, #body.lines == 1 and '' or 's'), '>' .. inner)
  else
    emit(sink, string.format('%s[agent] %s: %s', indent, name, PHASE_WORDS[block.phase] or 'starting'), depth > 0 and tostring(depth) or nil)
  end
  for i, line in ipairs(body.lines) do
    emit(sink, line, body.levels[i])
  end
  -- Why its task was interrupted or failed, after the fold (so it shows
  -- while the activity is folded), as a turn's reason ends the turn.
  if settled and block.reason and block.outcome ~= 'completed' then
    local why = block.outcome == 'interrupted' and why_interrupted(block.reason, true)
      or '[' .. (STATE_WORDS[block.outcome] or block.outcome) .. '] ' .. block.reason
    emit(sink, prefix .. why, depth > 0 and tostring(depth) or nil)
  end
end

-- BLOCKS as lines into SINK, each after INDENT, inside DEPTH folds
-- (reasoning is a closed fold one deeper).
render_blocks = function(chat, blocks, sink, indent, depth)
  local level = depth > 0 and tostring(depth) or nil
  local function put(line)
    emit(sink, indent .. line, level)
  end
  local function put_text(text, prefix)
    for _, line in ipairs(split_lines(text)) do
      put(prefix .. line)
    end
  end
  for _, block in ipairs(blocks) do
    if block.kind == 'response' then
      put_text(block.text, '')
    elseif block.kind == 'reasoning' then
      local body = split_lines(block.text)
      emit(sink, indent .. string.format('[reasoning] %d line%s (zo shows, zc hides)', #body, #body == 1 and '' or 's'), '>' .. (depth + 1))
      for _, line in ipairs(body) do
        emit(sink, indent .. '  ' .. line, tostring(depth + 1))
      end
    elseif block.kind == 'tool' then
      local title = block.title or block.callId or 'tool'
      local what = block.toolKind and (' (' .. block.toolKind .. ')') or ''
      put(string.format('[tool] %s%s: %s', title, what, block.status or 'pending'))
      if block.output and block.output ~= '' then
        put_text(block.output, '    ')
      end
      for _, diff in ipairs(block.diffs or {}) do
        for _, line in ipairs(diff_lines(chat, diff)) do
          put('    ' .. line)
        end
      end
      for _, agent in ipairs(block.nested or {}) do
        render_agent(chat, agent, sink, indent .. '    ', depth)
      end
    elseif block.kind == 'agent' then
      render_agent(chat, block, sink, indent, depth)
    elseif block.kind == 'plan' then
      put('[plan]')
      put_text(block.text, '    ')
    elseif block.kind == 'permission' then
      put(string.format('[permission] %s -> %s (%s)', block.text, block.decision, block.allowed and 'allowed' or 'refused'))
    elseif block.kind == 'mail' then
      put('[mail from ' .. (block.sender or '?') .. ']')
      put_text(block.text, '    ')
    end
  end
end

-- Renders TURN as lines, with the fold levels of its lines (reasoning is a
-- closed fold) relative to its first line.
local function render_turn(chat, turn, live)
  local lines, levels_ = {}, {}
  local state
  if live then
    state = ({ starting = 'starting the agent', running = 'running', cancelling = 'cancelling' })[turn.phase] or 'sending'
    if chat.asking and turn.phase == 'running' then
      state = 'waiting for your answer'
    end
  else
    state = STATE_WORDS[turn.state] or tostring(turn.state)
  end
  local number = turn.turn and ('Turn ' .. turn.turn) or 'New turn'
  local agent = turn.agent and (' · ' .. turn.agent) or ''
  table.insert(lines, string.format('## %s (%s)%s', number, state, agent))
  for _, line in ipairs(split_lines(turn.prompt or '')) do
    table.insert(lines, '> ' .. line)
  end
  for _, attachment in ipairs(turn.attachments or {}) do
    table.insert(lines, '> [attached ' .. attachment .. ']')
  end
  table.insert(lines, '')
  render_blocks(chat, turn.blocks or {}, { lines = lines, levels = levels_ }, '', 0)
  if live and chat.asking then
    table.insert(lines, '[permission] ' .. chat.asking .. ' (waiting for your answer)')
  end
  if turn.error then
    table.insert(lines, string.format('[error] %s', turn.error.message or turn.error.kind or 'the turn failed'))
    local action = value(turn.error.action) or M.actions[turn.error.kind]
    if action then
      table.insert(lines, '    what to do: ' .. action)
    end
  elseif turn.reason and turn.state == 'interrupted' then
    table.insert(lines, why_interrupted(turn.reason, true))
  elseif turn.reason and turn.state ~= 'completed' then
    table.insert(lines, '[' .. (STATE_WORDS[turn.state] or turn.state) .. '] ' .. turn.reason)
  end
  if turn.stopReason and turn.stopReason ~= 'end_turn' then
    table.insert(lines, '[stop] ' .. turn.stopReason)
  end
  table.insert(lines, '')
  return lines, levels_
end

--- The status of SESSION's chat in words: starting, running, cancelling,
--- waiting for an answer, or idle.
function M.status(session)
  local chat = chats[session]
  if not chat then
    return 'idle'
  end
  local live = chat.live
  if not live then
    local last = chat.turns[#chat.turns]
    if last then
      return string.format('idle (turn %d %s)', last.turn, STATE_WORDS[last.state] or tostring(last.state))
    end
    return 'idle'
  end
  if chat.asking then
    return 'waiting for your answer'
  end
  if live.phase == 'running' then
    return 'running turn ' .. tostring(live.turn or '?')
  elseif live.phase == 'cancelling' then
    return 'cancelling turn ' .. tostring(live.turn or '?')
  end
  return 'starting ' .. (live.agent or 'the agent')
end

--- For a statusline: the current buffer's chat status, else ''.
function M.statusline()
  local session = vim.b.mevedel_chat_session
  if not session then
    return ''
  end
  return 'mevedel: ' .. M.status(session)
end

local function key_hint()
  local keys = mevedel.options().chat.keys
  local parts = {}
  for _, pair in ipairs({ { 'prompt', 'prompt' }, { 'cancel', 'cancel' }, { 'help', 'more keys' } }) do
    if keys[pair[1]] then
      table.insert(parts, keys[pair[1]] .. ' ' .. pair[2])
    end
  end
  return table.concat(parts, ', ')
end

local function header(chat)
  local access = chat.access == 'read-only' and ' [read-only]' or ''
  local last = chat.turns[#chat.turns]
  local agent = agents_by_session[chat.session] or (chat.live and chat.live.agent) or chat.last_agent or (last and last.agent)
  return {
    string.format('# mevedel chat: %s%s', chat.name or chat.session, access),
    string.format('agent: %s%s | %s | %s', agent or 'not picked yet',
      (function(summary) return summary and (' | ' .. summary) or '' end)(require('mevedel.options').summary(chat.session)),
      M.status(chat.session), key_hint()),
    '',
  }
end

-- Replaces BUFNR's lines with LINES where they differ (the common head and
-- tail stay, and with them the cursors and folds on them); a window that
-- was on the last line stays on the last line.
local function replace_lines(bufnr, lines)
  local old = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local first = 1
  while first <= #old and first <= #lines and old[first] == lines[first] do
    first = first + 1
  end
  if first > #old and first > #lines then
    return
  end
  local old_last, new_last = #old, #lines
  while old_last >= first and new_last >= first and old[old_last] == lines[new_last] do
    old_last, new_last = old_last - 1, new_last - 1
  end
  local following = {}
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_buf(win) == bufnr and vim.api.nvim_win_get_cursor(win)[1] >= #old then
      table.insert(following, win)
    end
  end
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  vim.api.nvim_buf_set_lines(bufnr, first - 1, old_last, false, vim.list_slice(lines, first, new_last))
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'modified', false)
  for _, win in ipairs(following) do
    vim.api.nvim_win_set_cursor(win, { math.max(1, #lines), 0 })
  end
end

local function render_now(chat)
  local bufnr = chat.bufnr
  if not bufnr or not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  local lines = header(chat)
  local levels_ = {}
  local starts = {}
  local function put(turn, live)
    local turn_lines, turn_levels
    if not live and turn.rendered then
      turn_lines, turn_levels = turn.rendered[1], turn.rendered[2]
    else
      turn_lines, turn_levels = render_turn(chat, turn, live)
      if not live and turn.state ~= 'in-flight' then
        turn.rendered = { turn_lines, turn_levels }
      end
    end
    local base = #lines
    if turn.turn then
      table.insert(starts, { line = base + 1, turn = turn.turn })
    end
    for i, level in pairs(turn_levels) do
      levels_[base + i] = level
    end
    vim.list_extend(lines, turn_lines)
  end
  local segment
  for _, turn in ipairs(chat.turns) do
    if segment and turn.segment and turn.segment ~= segment then
      vim.list_extend(lines, { string.format('---- segment %d (compacted or cleared before it) ----', turn.segment), '' })
    end
    segment = turn.segment or segment
    put(turn, false)
  end
  if chat.live then
    put(chat.live, true)
  end
  -- The prompts queued behind the running turn (mevedel.queue).
  local queued, entries = require('mevedel.queue').lines(chat.session)
  chat.queue_at = {}
  for offset, entry in pairs(entries) do
    chat.queue_at[#lines + offset] = entry
  end
  vim.list_extend(lines, queued)
  if chat.refusal then
    local r = chat.refusal
    table.insert(lines, r.aborted and '## Prompt aborted' or ('## Prompt refused: ' .. r.kind))
    for _, line in ipairs(split_lines(r.prompt or '')) do
      table.insert(lines, '> ' .. line)
    end
    table.insert(lines, '')
    if r.aborted then
      table.insert(lines, why_interrupted(r.aborted, false))
    else
      table.insert(lines, '[error] ' .. r.message)
    end
    if r.action then
      table.insert(lines, '    what to do: ' .. r.action)
    end
    table.insert(lines, '')
  end
  if #chat.turns == 0 and not chat.live and not chat.refusal and #queued == 0 then
    table.insert(lines, 'No turns yet. ' .. (mevedel.options().chat.keys.prompt or ':MevedelPrompt') .. ' writes a prompt.')
  end
  folds[bufnr] = levels_
  chat.starts = starts
  replace_lines(bufnr, lines)
  vim.b[bufnr].mevedel_chat_status = M.status(chat.session)
  vim.b[bufnr].mevedel_chat_title = chat.name or chat.session
end

local pending_render = {}

-- Renders CHAT on the next loop iteration (one render for a burst).
local function render(chat)
  if pending_render[chat.session] then
    return
  end
  pending_render[chat.session] = true
  vim.schedule(function()
    pending_render[chat.session] = nil
    render_now(chat)
    vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelChatUpdated', modeline = false })
  end)
end
M.render = render

--- Fold level of line LNUM of the current buffer (its 'foldexpr').
function M.foldexpr(lnum)
  local levels_ = folds[vim.api.nvim_get_current_buf()]
  return levels_ and levels_[lnum] or '0'
end

function M.foldtext()
  return vim.fn.getline(vim.v.foldstart) .. '  '
end

_G.mevedel_chat_foldexpr = M.foldexpr
_G.mevedel_chat_foldtext = M.foldtext

-- Loading ----------------------------------------------------------------------

--- Read SESSION's turns from the server again and render its chat.
--- Returns true, or nil and the error.
---
--- Its requests wait (request_sync), and while they wait Neovim handles
--- what else arrives: the turn's last didUpdate, the prompt's answer, the
--- didChange of its settlement, each of which may settle the live turn
--- here or start another reload. So the turns are put together only after
--- the last answer, from the state here at that moment (a turn this chat
--- watched live stays the one shown, with its agent, attachments and
--- diffs; a turn still running stays the live one), and a reload whose
--- turns a later one (started during its wait, so reading the server
--- later) already put in place gives way to it.
function M.reload(session, client)
  local chat = chats[session]
  if not chat then
    return nil, 'no chat of ' .. session
  end
  client = client or client_of(chat)
  if not client then
    return nil, 'the mevedel server is not running'
  end
  chat.client_id = client.id
  chat.root = client.config.root_dir
  require('mevedel.options').ensure(client, session) -- the header's mode and model
  chat.loads = (chat.loads or 0) + 1
  local load = chat.loads
  local function is_live(summary)
    local live = chat.live
    return summary.state == 'in-flight' and live ~= nil and (live.turnId == summary.turnId or live.turnId == nil)
  end
  require('mevedel.queue').load(client, session)
  local listing, err = mevedel.request(client, 'mevedel/turn/list', { sessionId = session })
  if not listing then
    return nil, err
  end
  -- The turns neither watched here nor read before, read now.
  local read = {}
  for _, summary in ipairs(listing.turns) do
    local known = live_by_id[summary.turnId] or (summary.state ~= 'in-flight' and shown_by_id[summary.turnId])
    if not known and not is_live(summary) then
      local shown, show_err = mevedel.request(client, 'mevedel/turn/show', { sessionId = session, turn = summary.turn })
      if not shown then
        return nil, show_err
      end
      local turn = M.turn_from_show(shown)
      if turn.state ~= 'in-flight' then
        shown_by_id[turn.turnId] = turn
      end
      read[summary.turnId] = turn
    end
  end
  if (chat.loaded or 0) > load then
    -- A later reload ran while this one waited; its turns stand.
    return true
  end
  -- From here on nothing waits.
  chat.loaded = load
  local turns = {}
  for _, summary in ipairs(listing.turns) do
    local turn = live_by_id[summary.turnId]
    if turn then
      turn.rendered = nil
      if summary.state ~= 'in-flight' then
        -- (A listing made before the turn settled here says in-flight.)
        turn.state = summary.state
        turn.reason = value(summary.reason)
      end
      turn.segment = summary.segment
      turn.prompt = turn.prompt or summary.prompt
      table.insert(turns, turn)
    elseif not is_live(summary) then
      turn = read[summary.turnId] or (summary.state ~= 'in-flight' and shown_by_id[summary.turnId]) or nil
      if turn then
        table.insert(turns, turn)
      end
    end
  end
  chat.turns = turns
  render(chat)
  return true
end

local function refresh_name(chat, client)
  local listing = mevedel.request(client, 'mevedel/session/list', vim.empty_dict())
  for _, row in ipairs(listing and listing.sessions or {}) do
    if row.sessionId == chat.session then
      chat.name = row.displayName
      chat.access = value(row.access)
    end
  end
end

-- The chat buffer ----------------------------------------------------------------

local function buffer_name(session)
  return 'mevedel chat ' .. session
end

local function set_window_options(win)
  vim.api.nvim_win_call(win, function()
    vim.cmd('setlocal foldmethod=expr foldexpr=v:lua.mevedel_chat_foldexpr(v:lnum) foldlevel=0 foldenable')
    vim.cmd('setlocal foldtext=v:lua.mevedel_chat_foldtext() foldminlines=0 wrap linebreak nonumber nolist')
    vim.cmd([[setlocal statusline=%<mevedel\ chat:\ %{get(b:,'mevedel_chat_title','')}%=%{get(b:,'mevedel_chat_status','')}\ ]])
  end)
end

local function map(bufnr, key, run, desc)
  if key then
    vim.keymap.set('n', key, run, { buffer = bufnr, silent = true, nowait = true, desc = desc })
  end
end

local function ensure_buffer(chat)
  if chat.bufnr and vim.api.nvim_buf_is_valid(chat.bufnr) then
    return chat.bufnr
  end
  local name = buffer_name(chat.session)
  local bufnr = vim.fn.bufnr(name)
  if bufnr < 0 then
    bufnr = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(bufnr, name)
  end
  chat.bufnr = bufnr
  vim.api.nvim_buf_set_option(bufnr, 'buftype', 'nofile')
  vim.api.nvim_buf_set_option(bufnr, 'bufhidden', 'hide')
  vim.api.nvim_buf_set_option(bufnr, 'swapfile', false)
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'filetype', 'markdown')
  vim.b[bufnr].mevedel_session = chat.session
  vim.b[bufnr].mevedel_chat_session = chat.session
  vim.b[bufnr].mevedel_client = chat.client_id
  local session = chat.session
  local keys = mevedel.options().chat.keys
  map(bufnr, keys.prompt, function()
    M.compose({ session = session })
  end, 'mevedel: write a prompt')
  map(bufnr, keys.cancel, function()
    M.cancel(session)
  end, 'mevedel: cancel the running turn')
  map(bufnr, keys.rewind, function()
    M.rewind_here()
  end, 'mevedel: rewind to before or after the turn under the cursor')
  map(bufnr, keys.redo, function()
    M.redo_here()
  end, 'mevedel: return to an earlier state (redo)')
  map(bufnr, keys.fork, function()
    M.fork_here()
  end, 'mevedel: fork after the turn under the cursor')
  map(bufnr, keys.worktree_fork, function()
    M.fork_here(true)
  end, 'mevedel: worktree fork after the turn under the cursor')
  map(bufnr, keys.show_turn, function()
    local turn = M.turn_at_cursor()
    if turn then
      require('mevedel.sessions').show_turn(turn, session)
    end
  end, 'mevedel: show the turn under the cursor alone')
  map(bufnr, keys.review, function()
    local turn = M.turn_at_cursor()
    if turn then
      require('mevedel.review').open(turn, turn, session)
    end
  end, 'mevedel: review what the turn under the cursor changed')
  map(bufnr, keys.options, function()
    require('mevedel.options').pick(session)
  end, "mevedel: choose the agent's mode, model or another option")
  map(bufnr, keys.queue_edit, function()
    M.edit_queued_here()
  end, 'mevedel: edit the queued prompt under the cursor')
  map(bufnr, keys.queue_cancel, function()
    M.cancel_queued_here()
  end, 'mevedel: cancel the queued prompt under the cursor')
  map(bufnr, keys.steer, function()
    M.steer_here()
  end, 'mevedel: steer: send the queued prompt under the cursor now, or write steering (the running turn is cancelled)')
  map(bufnr, keys.close, function()
    pcall(vim.cmd, 'close')
  end, 'mevedel: close the chat window')
  map(bufnr, keys.help, function()
    M.help()
  end, 'mevedel: the chat keys')
  local group = vim.api.nvim_create_augroup('mevedel-chat-' .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd('BufWinEnter', {
    group = group,
    buffer = bufnr,
    callback = function()
      set_window_options(vim.api.nvim_get_current_win())
    end,
  })
  return bufnr
end

--- Draw SESSION's chat again (its header: the agent's mode and options).
function M.redraw(session)
  local chat = chats[session]
  if chat and chat.bufnr and vim.api.nvim_buf_is_valid(chat.bufnr) then
    render(chat)
  end
end

--- The chat keys, told.
function M.help()
  local keys = mevedel.options().chat.keys
  local lines = {}
  for _, pair in ipairs({
    { 'prompt', 'write a prompt (:MevedelPrompt)' },
    { 'cancel', 'cancel the running turn (:MevedelCancel)' },
    { 'rewind', 'rewind to before or after the turn under the cursor' },
    { 'redo', 'return to an earlier state' },
    { 'fork', 'fork after the turn under the cursor' },
    { 'worktree_fork', 'worktree fork after the turn under the cursor' },
    { 'show_turn', 'show the turn under the cursor alone' },
    { 'review', 'review what the turn under the cursor changed (:MevedelReview)' },
    { 'options', "choose the agent's mode, model or another option (:MevedelOptions)" },
    { 'queue_edit', 'edit the queued prompt under the cursor' },
    { 'queue_cancel', 'cancel the queued prompt under the cursor' },
    { 'steer', 'steer: send the queued prompt under the cursor now, or write steering (cancels the running turn)' },
    { 'close', 'close the chat window' },
  }) do
    if keys[pair[1]] then
      table.insert(lines, string.format('%-6s %s', keys[pair[1]], pair[2]))
    end
  end
  table.insert(lines, "zo/zc  show/hide reasoning, or a sub-agent's activity once it is done")
  mevedel.notify('chat keys:\n' .. table.concat(lines, '\n'), levels.INFO)
end

local function show_buffer(bufnr, how)
  local win = vim.fn.bufwinid(bufnr)
  if win >= 0 then
    vim.api.nvim_set_current_win(win)
  else
    how = how or mevedel.options().chat.window
    if how == 'vsplit' then
      vim.cmd('botright vsplit')
    elseif how == 'split' then
      vim.cmd('botright split')
    elseif how == 'tab' then
      vim.cmd('tabnew')
    end
    vim.api.nvim_win_set_buf(0, bufnr)
    win = vim.api.nvim_get_current_win()
  end
  set_window_options(win)
  return win
end

-- The session SESSION (nil: the current buffer's, else the server's
-- current one), or nil and why.
local function resolve_session(client, session, create)
  session = session or require('mevedel.sessions').session_here()
  if session then
    return session
  end
  local listing, err, data = mevedel.request(client, 'mevedel/turn/list', vim.empty_dict())
  if listing then
    return listing.sessionId
  end
  if create and type(data) == 'table' and data.kind == 'owner-missing' then
    local state, create_err, create_data = mevedel.request(client, 'mevedel/session/create', vim.empty_dict())
    if state then
      mevedel.notify('started session ' .. state.displayName, levels.INFO)
      return state.sessionId
    end
    return nil, create_err, create_data
  end
  return nil, err, data
end

--- Open the chat of SESSION (nil: the current buffer's, else the current
--- session) in a window (HOW: 'vsplit', 'split', 'tab', 'current'; default
--- the `chat.window` option), its turns read from the server. Returns the
--- buffer number.
--- The chat buffer :MevedelChat shows when no server can say which session
--- is meant (it died, or one started again has none current yet):
--- SESSION's, else the one chat there is.
local function standing_chat(session)
  local chat = session and chats[session]
  if not chat then
    for _, each in pairs(chats) do
      if each.bufnr and vim.api.nvim_buf_is_valid(each.bufnr) then
        if chat then
          return nil -- several: which one is not ours to guess
        end
        chat = each
      end
    end
  end
  if chat and chat.bufnr and vim.api.nvim_buf_is_valid(chat.bufnr) then
    return chat.bufnr
  end
  return nil
end

function M.open(session, how, client)
  client = client or mevedel.client()
  if not client then
    -- The chat as it stands is still shown, with its last words (what
    -- became of a turn the server's death ended) and its keys: p starts
    -- the server again.
    local bufnr = standing_chat(session)
    if bufnr then
      show_buffer(bufnr, how)
      return bufnr
    end
    mevedel.client_or_notify()
    return nil
  end
  local err, resolved
  resolved, err = resolve_session(client, session, false)
  if not resolved then
    local bufnr = standing_chat(session)
    if bufnr then
      show_buffer(bufnr, how)
      return bufnr
    end
    mevedel.notify((err or 'no session') .. '; :MevedelPrompt starts one, :MevedelSessions picks one', levels.WARN)
    return nil
  end
  session = resolved
  local chat = chat_for(session, client.id)
  chat.root = client.config.root_dir
  refresh_name(chat, client)
  local bufnr = ensure_buffer(chat)
  vim.b[bufnr].mevedel_client = client.id
  local ok, load_err = M.reload(session, client)
  if not ok then
    mevedel.notify(load_err)
  end
  render_now(chat)
  show_buffer(bufnr, how)
  return bufnr
end

--- The turn number of the chat section under the cursor, or nil.
function M.turn_at_cursor()
  local chat = chats[vim.b.mevedel_chat_session or '']
  if not chat then
    return nil
  end
  local row = vim.api.nvim_win_get_cursor(0)[1]
  local found
  for _, start in ipairs(chat.starts or {}) do
    if start.line <= row then
      found = start.turn
    end
  end
  return found
end

-- Prompting -------------------------------------------------------------------------

local function format_agent(entry)
  local notes = {}
  if entry.default == true then
    table.insert(notes, 'default')
  end
  if entry.found == false then
    table.insert(notes, 'not installed')
  end
  local note = #notes > 0 and (' (' .. table.concat(notes, ', ') .. ')') or ''
  return string.format('%s%s  %s', entry.name, note, table.concat(entry.command or {}, ' '))
end
M.format_agent = format_agent

-- Calls ON_AGENT(name or nil) with the agent for SESSION: given, picked
-- before for the session, else asked (vim.ui.select) when the server has
-- more than one; nil lets the server choose (one configured, or none:
-- then it refuses and says how to configure one).
local function choose_agent(client, session, given, on_agent)
  if given then
    agents_by_session[session] = given
    return on_agent(given)
  end
  if agents_by_session[session] then
    return on_agent(agents_by_session[session])
  end
  local listing = mevedel.request(client, 'mevedel/agent/list', vim.empty_dict())
  local entries = listing and listing.agents or {}
  if #entries <= 1 then
    return on_agent(nil)
  end
  local ordered = {}
  for _, entry in ipairs(entries) do
    table.insert(ordered, entry.default == true and 1 or #ordered + 1, entry)
  end
  vim.ui.select(ordered, { prompt = 'mevedel: agent for ' .. session, format_item = format_agent, kind = 'mevedel.agent' }, function(entry)
    if not entry then
      mevedel.notify('no agent picked; the prompt was not sent', levels.INFO)
      return
    end
    agents_by_session[session] = entry.name
    on_agent(entry.name)
  end)
end

--- Pick the agent of SESSION (nil: here or current) from the server's list.
function M.pick_agent(session)
  local client = mevedel.client_or_notify()
  if not client then
    return
  end
  local err
  session, err = resolve_session(client, session, false)
  if not session then
    mevedel.notify(err)
    return
  end
  agents_by_session[session] = nil
  choose_agent(client, session, nil, function(name)
    if name then
      mevedel.notify(session .. ' prompts ' .. name .. ' from now on', levels.INFO)
      local chat = chats[session]
      if chat then
        render(chat)
      end
    else
      mevedel.notify('the server has at most one agent configured; it is used', levels.INFO)
    end
  end)
end

-- Moves the live TURN among CHAT's settled turns (once), by number.
local function settle_into(chat, turn)
  turn.rendered = nil
  if turn.turnId then
    live_by_id[turn.turnId] = turn
  end
  for i, other in ipairs(chat.turns) do
    if other == turn or (turn.turnId and other.turnId == turn.turnId) then
      chat.turns[i] = turn
      return
    end
  end
  local at = #chat.turns + 1
  while at > 1 and chat.turns[at - 1].turn and turn.turn and chat.turns[at - 1].turn > turn.turn do
    at = at - 1
  end
  table.insert(chat.turns, at, turn)
end

local function finish(chat, result)
  local live = chat.live
  if live and (live.turnId == nil or live.turnId == result.turnId) then
    chat.live = nil
  else
    live = live_by_id[result.turnId]
  end
  if live then
    live.turn = result.turn
    live.turnId = result.turnId
    live.state = result.outcome
    live.error = value(result.error)
    live.stopReason = value(result.stopReason)
    live.agent = result.agent
    settle_into(chat, live)
  end
  chat.asking = nil
  chat.last_agent = result.agent
  agents_by_session[chat.session] = agents_by_session[chat.session] or result.agent
end

local function refused(chat, text, err, data)
  local kind = type(data) == 'table' and data.kind or 'error'
  chat.live = nil
  chat.asking = nil
  if kind == 'prompt-aborted' and chat.refusal and chat.refusal.aborted then
    -- The chat shows it already, with the abort's reason.
    mevedel.notify('the prompt was aborted before it reached the agent: ' .. chat.refusal.aborted, levels.INFO)
    return
  end
  chat.refusal = {
    prompt = text,
    kind = kind,
    message = err,
    action = M.actions[kind],
  }
  render(chat)
  mevedel.notify(string.format('the prompt was refused (%s): %s%s', kind, err, M.actions[kind] and ('\nwhat to do: ' .. M.actions[kind]) or ''))
end

--- The server process CLIENT_ID talked to has exited (crashed, or
--- stopped): its chats' running turns will get no answer. Each ends as
--- errored here, saying what became of it; the record keeps the turn in
--- flight until the session is opened again, which records it interrupted.
function M.on_client_exit(client_id)
  for _, chat in pairs(chats) do
    if chat.client_id == client_id then
      chat.client_id = nil
      chat.asking = nil
      local live = chat.live
      if live then
        chat.live = nil
        live.state = 'errored'
        live.error = {
          kind = 'server-exited',
          message = 'the mevedel server stopped while the turn ran; what arrived is kept, and opening the session again records the turn interrupted',
          action = M.actions['owner-missing'],
        }
        settle_into(chat, live)
      end
      render(chat)
    end
  end
end

--- Send a prompt. OPTS: text (required), attachments (addresses or
--- workspace paths), session (default: the current buffer's, else the
--- current one, else a new one), agent (default: picked, see
--- choose_agent), on_done(result or nil, err, data) after it settled.
function M.send(opts)
  local text = opts.text and vim.trim(opts.text) or ''
  if text == '' then
    mevedel.notify('the prompt is empty; nothing was sent', levels.WARN)
    return
  end
  local client = mevedel.client_or_notify()
  if not client then
    return
  end
  local session, err, data = resolve_session(client, opts.session, true)
  if not session then
    mevedel.notify_failure(err, data)
    return
  end
  local queue = require('mevedel.queue')
  if opts.edit_entry then
    return queue.edit(client, session, opts.edit_entry, text, opts.on_done)
  end
  choose_agent(client, session, opts.agent, function(agent)
    local chat = chat_for(session, client.id)
    chat.root = client.config.root_dir
    if opts.steer then
      return queue.steer(client, session, { text = text, agent = agent, attachments = opts.attachments, on_done = opts.on_done })
    end
    if chat.live then
      -- A turn runs: the prompt waits in the session's queue, sent when it settles.
      return queue.add(client, session, text, { agent = agent, attachments = opts.attachments, on_done = opts.on_done })
    end
    if not chat.bufnr or not vim.api.nvim_buf_is_valid(chat.bufnr) then
      refresh_name(chat, client)
      ensure_buffer(chat)
      M.reload(session, client)
    end
    if mevedel.options().chat.open_on_prompt and vim.fn.bufwinid(chat.bufnr) < 0 then
      local from = vim.api.nvim_get_current_win()
      show_buffer(chat.bufnr)
      vim.api.nvim_set_current_win(from)
    end
    chat.refusal = nil
    chat.live = {
      prompt = text,
      attachments = opts.attachments,
      agent = agent,
      phase = 'sending',
      blocks = {},
      state = 'in-flight',
    }
    render(chat)
    local params = { sessionId = session, text = text }
    if agent then
      params.agent = agent
    end
    if opts.attachments and #opts.attachments > 0 then
      params.attachments = opts.attachments
    end
    mevedel.request_async(client, 'mevedel/turn/prompt', params, function(result, request_err, data)
      if result then
        finish(chat, result)
        M.reload(session, client)
        if result.outcome == 'errored' then
          local e = value(result.error) or {}
          mevedel.notify(
            string.format('turn %d failed: %s%s', result.turn, e.message or 'the agent failed', present(e.action) and ('\nwhat to do: ' .. e.action) or '')
          )
        elseif result.outcome == 'interrupted' then
          local why = live_by_id[result.turnId] and live_by_id[result.turnId].reason
          mevedel.notify(string.format('turn %d was interrupted%s; what arrived is kept', result.turn, why and (': ' .. why) or ''), levels.INFO)
        end
      else
        refused(chat, text, request_err, data)
      end
      render(chat)
      if opts.on_done then
        opts.on_done(result, request_err, data)
      end
    end)
  end)
end

--- Cancel SESSION's running turn (nil: the current buffer's or the
--- current session).
function M.cancel(session)
  local client = mevedel.client_or_notify()
  if not client then
    return nil
  end
  local chat = session and chats[session]
  local params = mevedel.scoped(session or require('mevedel.sessions').session_here())
  local result, err = mevedel.request(client, 'mevedel/turn/cancel', params)
  if not result then
    mevedel.notify(err)
    return nil
  end
  if result.cancelled ~= true then
    mevedel.notify('no agent turn is running', levels.INFO)
  elseif chat and chat.live then
    chat.live.phase = 'cancelling'
    render(chat)
  end
  return result
end

-- The prompt buffer ------------------------------------------------------------------

M.prompt_buffer_name = 'mevedel prompt'
local compose_context = {}

local function send_composed(bufnr)
  local context = compose_context[bufnr]
  if not context then
    return
  end
  local text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
  compose_context[bufnr] = nil
  vim.api.nvim_buf_set_option(bufnr, 'modified', false)
  -- Not from inside the buffer's own BufWriteCmd.
  vim.schedule(function()
    local win = vim.fn.bufwinid(bufnr)
    if win >= 0 and #vim.api.nvim_list_wins() > 1 then
      vim.api.nvim_win_close(win, true)
    end
    if vim.api.nvim_buf_is_valid(bufnr) then
      vim.api.nvim_buf_delete(bufnr, { force = true })
    end
    -- Back where the prompt was started (the chat, say, whose keys cancel).
    if context.from_win and vim.api.nvim_win_is_valid(context.from_win) then
      vim.api.nvim_set_current_win(context.from_win)
    end
    if vim.trim(text) == '' then
      mevedel.notify('the prompt is empty; nothing was sent', levels.WARN)
      return
    end
    context.text = text .. (context.suffix or '')
    local continuing = context.continuing
    context.continuing = nil
    if continuing then
      -- The workspace's most recent session, offered after a restart:
      -- opened here first, then prompted.
      require('mevedel.sessions').open(continuing.sessionId, 'auto', function()
        context.session = continuing.sessionId
        M.send(context)
      end)
      return
    end
    M.send(context)
  end)
end

-- The session a prompt written now continues when none is current (after
-- a restart): the listing's `continuable` as { sessionId, displayName },
-- or nil (then the prompt starts a new session).
local function continuable(client)
  local current = mevedel.request(client, 'mevedel/turn/list', vim.empty_dict())
  if current then
    return nil
  end
  local listing = mevedel.request(client, 'mevedel/session/list', vim.empty_dict())
  local id = listing and value(listing.continuable)
  if not id then
    return nil
  end
  for _, row in ipairs(listing.sessions or {}) do
    if row.sessionId == id then
      return { sessionId = id, displayName = row.displayName }
    end
  end
  return { sessionId = id, displayName = id }
end

local function abandon_composed(bufnr)
  local context = compose_context[bufnr] or {}
  compose_context[bufnr] = nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_delete(bufnr, { force = true })
  end
  if context.from_win and vim.api.nvim_win_is_valid(context.from_win) then
    vim.api.nvim_set_current_win(context.from_win)
  end
  mevedel.notify('prompt discarded', levels.INFO)
end

--- Write a prompt in a buffer (several lines; `:w`, <CR> in Normal mode or
--- <C-s> sends it, `q` discards it). CONTEXT: session, agent, attachments,
--- suffix (text added after what is written: a quoted selection).
function M.compose(context)
  context = context or {}
  local existing = vim.fn.bufnr(M.prompt_buffer_name)
  if existing > 0 then
    vim.api.nvim_buf_delete(existing, { force = true })
  end
  local bufnr = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(bufnr, M.prompt_buffer_name)
  vim.api.nvim_buf_set_option(bufnr, 'buftype', 'acwrite')
  vim.api.nvim_buf_set_option(bufnr, 'bufhidden', 'wipe')
  vim.api.nvim_buf_set_option(bufnr, 'swapfile', false)
  vim.api.nvim_buf_set_option(bufnr, 'filetype', 'markdown')
  context.from_win = vim.api.nvim_get_current_win()
  compose_context[bufnr] = context
  vim.cmd('botright split')
  vim.api.nvim_win_set_buf(0, bufnr)
  vim.api.nvim_win_set_height(0, 8)
  local here = context.session or require('mevedel.sessions').session_here()
  local client = not here and mevedel.client() or nil
  if client and context.continuing == nil then
    context.continuing = continuable(client)
  end
  if context.initial then
    vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, vim.split(context.initial, '\n', { plain = true }))
    vim.api.nvim_buf_set_option(bufnr, 'modified', false)
  end
  local attached = context.attachments and #context.attachments > 0 and (' +' .. table.concat(context.attachments, ' +')) or ''
  local function show_target()
    local target = here or 'the current session'
    local fresh = ''
    if context.continuing then
      target = 'continue ' .. context.continuing.displayName
      fresh = ', <C-n> starts a new session'
    end
    local what = context.edit_entry and 'mevedel queued prompt (editing)' or context.steer and 'mevedel steering' or 'mevedel prompt'
    local title = string.format('%s to %s%s  (:w or <CR> sends, q discards%s)', what, target, attached, fresh)
    vim.wo.statusline = title:gsub('%%', '%%%%')
  end
  show_target()
  vim.keymap.set({ 'n', 'i' }, '<C-n>', function()
    if context.continuing then
      context.continuing = false
      show_target()
    end
  end, { buffer = bufnr, desc = 'mevedel: send the prompt to a new session' })
  vim.api.nvim_create_autocmd('BufWriteCmd', {
    buffer = bufnr,
    callback = function()
      send_composed(bufnr)
    end,
  })
  local function send()
    send_composed(bufnr)
  end
  vim.keymap.set('n', '<CR>', send, { buffer = bufnr, desc = 'mevedel: send the prompt' })
  vim.keymap.set({ 'n', 'i' }, '<C-s>', function()
    vim.cmd('stopinsert')
    send()
  end, { buffer = bufnr, desc = 'mevedel: send the prompt' })
  vim.keymap.set('n', 'q', function()
    abandon_composed(bufnr)
  end, { buffer = bufnr, desc = 'mevedel: discard the prompt' })
  require('mevedel.input_history').attach(bufnr)
  vim.cmd('startinsert')
  return bufnr
end

-- The workspace path of BUFNR's file (relative to the server's root when
-- inside it), or nil and why it cannot be attached.
local function attachment_of(bufnr, client)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' or vim.api.nvim_buf_get_option(bufnr, 'buftype') ~= '' then
    return nil, 'this buffer is not a file; only files can be attached'
  end
  local path = vim.fn.fnamemodify(name, ':p')
  local root = client and client.config.root_dir
  if root and path:sub(1, #root + 1) == root .. '/' then
    path = path:sub(#root + 2)
  end
  if vim.api.nvim_buf_get_option(bufnr, 'modified') then
    mevedel.notify(path .. ' has unsaved changes; the agent reads the saved file', levels.WARN)
  end
  return path
end

--- `:MevedelPrompt [--attach] [TEXT]`, with a range: send TEXT (or write
--- the prompt in a buffer when none is given). A range attaches the
--- current file and quotes the lines; --attach attaches the current file.
function M.command(c)
  local args = vim.trim(c.args or '')
  local attach = false
  if args:match('^%-%-attach%f[%s%z]') then
    attach = true
    args = vim.trim(args:sub(#'--attach' + 1))
  end
  local context = {}
  if attach or c.range > 0 then
    local client = mevedel.client_or_notify()
    if not client then
      return
    end
    local path, why = attachment_of(0, client)
    if not path then
      mevedel.notify(why)
      return
    end
    context.attachments = { path }
    if c.range > 0 then
      local lines = vim.api.nvim_buf_get_lines(0, c.line1 - 1, c.line2, false)
      local fence = '```' .. (vim.bo.filetype or '')
      context.suffix = string.format('\n\nLines %d-%d of %s:\n%s\n%s\n```', c.line1, c.line2, path, fence, table.concat(lines, '\n'))
    end
  end
  if args ~= '' then
    context.text = args .. (context.suffix or '')
    return M.send(context)
  end
  return M.compose(context)
end

-- Server messages ------------------------------------------------------------------

-- A sub-agent's update (mevedel.nested): into the root turn it works in,
-- which goes on running whatever the sub-agent's phase.
local function on_nested_update(chat, params, turn_id)
  local live = chat.live
  if live and live.turnId and turn_id and live.turnId ~= turn_id then
    live = nil
  end
  live = live or (turn_id and live_by_id[turn_id])
  if not live then
    -- The root's own first update has not come: the turn is running.
    local prompt, attachments = require('mevedel.queue').sending_text(params.sessionId)
    live = { prompt = prompt, attachments = attachments, blocks = {}, state = 'in-flight', phase = 'running' }
    chat.live = live
  end
  live.rendered = nil
  live.turn = live.turn or value(params.turn)
  live.turnId = live.turnId or turn_id
  require('mevedel.nested').apply(live, params, M.apply_event)
  for _, event in ipairs(value(params.events) or {}) do
    if event.kind == 'permission' then
      chat.asking = nil
    end
  end
  render(chat)
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelTurnUpdated', modeline = false })
end

--- `mevedel/turn/didUpdate`: the running turn's phase and events (a
--- sub-agent's among them, nested in it).
function M.on_did_update(_, params, ctx)
  local chat = chat_for(params.sessionId, ctx and ctx.client_id)
  if chat.root == nil and ctx then
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    chat.root = client and client.config.root_dir
  end
  local turn_id = value(params.turnId)
  if require('mevedel.nested').is_nested(params) then
    return on_nested_update(chat, params, turn_id)
  end
  local live = chat.live
  if live and live.turnId and turn_id and live.turnId ~= turn_id then
    live = nil
  end
  if not live and turn_id and live_by_id[turn_id] then
    -- Already settled by the prompt's answer.
    live = live_by_id[turn_id]
  elseif not live then
    -- A prompt sent from elsewhere in this editor (a command), or a queued
    -- one the server is sending now.
    local prompt, attachments = require('mevedel.queue').sending_text(params.sessionId)
    live = { prompt = prompt, attachments = attachments, blocks = {}, state = 'in-flight' }
    chat.live = live
  end
  live.rendered = nil
  live.phase = params.phase
  live.agent = params.agent
  live.turn = value(params.turn) or live.turn
  live.turnId = turn_id or live.turnId
  for _, event in ipairs(value(params.events) or {}) do
    M.apply_event(live, event)
    if event.kind == 'permission' then
      chat.asking = nil
    end
  end
  if params.phase == 'settled' then
    chat.asking = nil
    chat.last_agent = params.agent
    if live.turn then
      live.state = value(params.outcome) or 'completed'
      live.error = value(params.error)
      live.stopReason = value(params.stopReason)
      live.reason = value(params.reason)
      settle_into(chat, live)
    elseif value(params.outcome) == 'interrupted' then
      -- Aborted while its agent started: it never reached the agent.
      local e = value(params.error) or {}
      chat.refusal = { prompt = live.prompt, kind = e.kind, message = e.message, aborted = value(params.reason) or 'aborted' }
    elseif value(params.error) then
      local e = params.error
      chat.refusal = { prompt = live.prompt, kind = e.kind, message = e.message, action = value(e.action) or M.actions[e.kind] }
    end
    if chat.live == live then
      chat.live = nil
    end
  end
  render(chat)
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelTurnUpdated', modeline = false })
end

--- A permission question is being asked: the running chat says so until
--- its decision arrives. Returns the session asked about, if known.
function M.on_question_asked(client_id, message)
  local running
  for _, chat in pairs(chats) do
    if chat.live and (client_id == nil or chat.client_id == client_id) then
      running = running == nil and chat or false
    end
  end
  if running then
    running.asking = message
    render_now(running)
    return running.session
  end
end

function M.on_question_answered(session)
  local chat = session and chats[session]
  if chat then
    chat.asking = nil
    render(chat)
  end
end

--- `mevedel/session/didChange` and `didPublish` of SESSION: read its turns
--- again when its chat is open.
function M.on_session_change(params, ctx)
  local chat = chats[params.sessionId]
  if not chat or not chat.bufnr or not vim.api.nvim_buf_is_valid(chat.bufnr) then
    return
  end
  if present(params.displayName) then
    chat.name = params.displayName
  end
  if present(params.access) then
    chat.access = params.access
  end
  if params.reason == 'closed' then
    render(chat)
    return
  end
  local client = ctx and vim.lsp.get_client_by_id(ctx.client_id) or nil
  local ok, err = M.reload(chat.session, client)
  if not ok then
    mevedel.notify('could not read the turns of ' .. chat.session .. ': ' .. tostring(err))
  end
end

-- Lifecycle from the chat ------------------------------------------------------------

local function here_or_notify(what)
  local session = vim.b.mevedel_chat_session
  local turn = M.turn_at_cursor()
  if not session or not turn then
    mevedel.notify('put the cursor on a turn of the chat to ' .. what, levels.WARN)
    return nil
  end
  return session, turn
end

--- Rewind the chat's session to before or after the turn under the cursor
--- (asked), showing the impact before confirming.
function M.rewind_here(boundary, on_done)
  local session, turn = here_or_notify('rewind to it')
  if not session then
    return
  end
  require('mevedel.lifecycle').rewind(turn, boundary, session, function(result)
    M.reload(session)
    if on_done then
      on_done(result)
    end
  end)
end

function M.redo_here(on_done)
  local session = vim.b.mevedel_chat_session
  if not session then
    return
  end
  require('mevedel.lifecycle').redo(session, function(result)
    M.reload(session)
    if on_done then
      on_done(result)
    end
  end)
end

--- Fork (WORKTREE: Worktree Fork) after the turn under the cursor; the
--- child's chat opens in this window.
function M.fork_here(worktree, on_done)
  local session, turn = here_or_notify('fork after it')
  if not session then
    return
  end
  local function show(child)
    agents_by_session[child] = agents_by_session[child] or agents_by_session[session]
    M.open(child, 'current')
  end
  local lifecycle = require('mevedel.lifecycle')
  if worktree then
    lifecycle.worktree_fork(turn, nil, session, on_done, { show = show })
  else
    lifecycle.fork(turn, session, on_done, { show = show })
  end
end

-- The queue under the running turn -------------------------------------------------

--- The queued entry under the cursor of the current chat buffer, and its
--- session; nil (said) when the cursor is on none.
function M.queued_at_cursor()
  local session = vim.b.mevedel_chat_session
  local c = session and chats[session]
  local entry = c and c.queue_at and c.queue_at[vim.api.nvim_win_get_cursor(0)[1]]
  if not entry then
    return nil, session
  end
  return entry, session
end

function M.edit_queued_here()
  local entry, session = M.queued_at_cursor()
  if not entry then
    mevedel.notify('the cursor is on no queued prompt', levels.INFO)
    return
  end
  M.compose({ session = session, edit_entry = entry.entryId, initial = entry.text })
end

function M.cancel_queued_here()
  local entry, session = M.queued_at_cursor()
  local client = entry and client_of(chats[session])
  if not entry then
    mevedel.notify('the cursor is on no queued prompt', levels.INFO)
    return
  end
  if client then
    require('mevedel.queue').cancel(client, session, entry.entryId)
  end
end

--- On a queued entry: send it now. Elsewhere: write steering.
function M.steer_here()
  local entry, session = M.queued_at_cursor()
  if entry then
    local client = client_of(chats[session])
    if client then
      require('mevedel.queue').steer(client, session, { entry_id = entry.entryId })
    end
    return
  end
  M.compose({ session = session, steer = true })
end

return M
