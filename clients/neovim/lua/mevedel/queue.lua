-- mevedel.queue: prompts queued behind a session's running turn, and
-- steering, in the chat buffer.
--
-- A prompt sent while the chat's turn runs goes to `mevedel/queue/add`: the
-- server keeps it (durably) and sends it when the turn settles. The chat
-- shows the queue under the running turn; on an entry's line the chat keys
-- edit it (`e`), cancel it (`x`) or send it now (`S`, steering: the running
-- turn is cancelled); `S` elsewhere writes steering. The server tells every
-- change with `mevedel/queue/didChange` (the whole queue).

local mevedel = require('mevedel')

local M = {}

local levels = vim.log.levels

-- The queue of each session: { entries, paused, problems }.
local queues = {}

local value = mevedel.value

--- The queue of SESSION as last heard ({ entries = {}, paused = false } when none).
function M.get(session)
  return queues[session] or { entries = {}, paused = false, problems = {} }
end

local function set(session, state)
  queues[session] = {
    entries = value(state.entries) or {},
    paused = state.paused == true,
    problems = value(state.problems) or {},
  }
  local chat = require('mevedel.chat')
  local c = chat.get(session)
  if c then
    chat.render(c)
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelQueueChanged', modeline = false })
end

--- The text of SESSION's entry being sent now (its turn is starting), if any.
function M.sending_text(session)
  for _, entry in ipairs(M.get(session).entries) do
    if entry.state == 'sending' then
      return entry.text, value(entry.attachments)
    end
  end
end

local STATE_WORDS = { queued = 'queued', sending = 'sending', review = 'needs review' }

local function first_line(text)
  local line = (text or ''):match('^[^\n]*') or ''
  if #line < #(text or '') then
    line = line .. ' …'
  end
  return line
end

--- The chat lines of SESSION's queue and, for each line that is an entry,
--- that entry (by line offset from 1).
function M.lines(session)
  local state = M.get(session)
  local lines, at = {}, {}
  if #state.entries == 0 and #state.problems == 0 then
    return lines, at
  end
  local keys = mevedel.options().chat.keys
  table.insert(lines, string.format('## Queued (%d)%s', #state.entries, state.paused and ' -- paused: an entry needs review' or ''))
  table.insert(lines, string.format('   %s edits, %s cancels, %s sends now (cancelling the running turn)',
    keys.queue_edit or '-', keys.queue_cancel or '-', keys.steer or '-'))
  for _, entry in ipairs(state.entries) do
    local what = entry.kind == 'steer' and 'steering' or STATE_WORDS[entry.state] or entry.state
    if entry.kind == 'steer' and entry.state ~= 'queued' then
      what = 'steering, ' .. (STATE_WORDS[entry.state] or entry.state)
    end
    table.insert(lines, string.format('- [%s] %s', what, first_line(entry.text)))
    at[#lines] = entry
    for _, attachment in ipairs(value(entry.attachments) or {}) do
      table.insert(lines, '    [attached ' .. attachment .. ']')
      at[#lines] = entry
    end
    if value(entry.reason) then
      table.insert(lines, '    why: ' .. entry.reason)
      at[#lines] = entry
    end
  end
  for _, problem in ipairs(state.problems) do
    table.insert(lines, '[unreadable] ' .. problem)
  end
  table.insert(lines, '')
  return lines, at
end

local function scoped(session)
  return { sessionId = session }
end

--- Read SESSION's queue from the server (a chat opened or read again).
function M.load(client, session)
  mevedel.request_async(client, 'mevedel/queue/list', scoped(session), function(result)
    if result then
      set(session, result)
    end
  end)
end

local function answered(what, on_done)
  return function(result, err, data)
    if not result then
      local kind = type(data) == 'table' and data.kind or 'error'
      local action = require('mevedel.chat').actions[kind]
      mevedel.notify(string.format('%s was refused (%s): %s%s', what, kind, err, action and ('\nwhat to do: ' .. action) or ''))
    end
    if on_done then
      on_done(result, err, data)
    end
  end
end

--- Queue TEXT behind SESSION's running turn.
function M.add(client, session, text, opts)
  opts = opts or {}
  local params = scoped(session)
  params.text = text
  params.agent = opts.agent
  if opts.attachments and #opts.attachments > 0 then
    params.attachments = opts.attachments
  end
  mevedel.request_async(client, 'mevedel/queue/add', params, answered('queueing the prompt', function(result, ...)
    if result then
      mevedel.notify('queued: it is sent when the running turn settles', levels.INFO)
    end
    if opts.on_done then
      opts.on_done(result, ...)
    end
  end))
end

--- Steer SESSION: send TEXT (or the entry ENTRY_ID) now, cancelling the running turn.
function M.steer(client, session, opts)
  local params = scoped(session)
  params.text = opts.text
  params.entryId = opts.entry_id
  params.agent = opts.agent
  if opts.attachments and #opts.attachments > 0 then
    params.attachments = opts.attachments
  end
  mevedel.request_async(client, 'mevedel/queue/steer', params, answered('steering', opts.on_done))
end

function M.edit(client, session, entry_id, text, on_done)
  local params = scoped(session)
  params.entryId = entry_id
  params.text = text
  mevedel.request_async(client, 'mevedel/queue/edit', params, answered('editing the queued prompt', on_done))
end

function M.cancel(client, session, entry_id, on_done)
  local params = scoped(session)
  params.entryId = entry_id
  mevedel.request_async(client, 'mevedel/queue/cancel', params, answered('cancelling the queued prompt', function(result, ...)
    if result then
      set(session, result)
      mevedel.notify('the queued prompt was cancelled; it is not sent', levels.INFO)
    end
    if on_done then
      on_done(result, ...)
    end
  end))
end

--- `mevedel/queue/didChange`.
function M.on_did_change(_, params)
  set(params.sessionId, params)
end

return M
