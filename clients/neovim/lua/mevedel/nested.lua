-- mevedel.nested: a retained sub-agent's activity (the `Agent` tool) in
-- the turn model of the chat.
--
-- A `mevedel/turn/didUpdate` with an `agentPath` is a sub-agent's, in the
-- parent's turn (`turn`/`turnId`): its phase, its events (the root's
-- kinds) and, once `settled`, its outcome. Each sub-agent is one block of
-- kind `agent` nested under the tool call of its parent through which it
-- was called (`parentCallId`): a sub-agent `a/b` inside `a`'s own block,
-- under `a`'s tool call of that id when `a` shows one, else at the end of
-- `a`'s activity; a top-level one under the root's tool call (which may
-- arrive after the sub-agent's first words: it is made then, and its
-- details fill in when they come), or at the end of the turn so far when
-- the call is not known. A later task of the same sub-agent (another
-- Agent call naming it) is a block of its own. A sub-agent settling never
-- settles the turn.

local value = require('mevedel').value

local M = {}

local function tool_with(blocks, call_id)
  for _, block in ipairs(blocks) do
    if block.kind == 'tool' and block.callId == call_id then
      return block
    end
  end
end

-- Puts the new agent BLOCK (path PATH, called through CALL_ID) in TURN.
local function place(turn, block, path, call_id)
  local parent_path = path:match('^(.*)/[^/]+$')
  local parent = parent_path and turn.agents[parent_path]
  local scope = parent and parent.blocks or turn.blocks
  local tool = call_id and tool_with(scope, call_id)
  if not tool and call_id and not parent then
    -- The root's tool call not seen yet: its own event fills it in.
    tool = { kind = 'tool', callId = call_id }
    table.insert(turn.blocks, tool)
  end
  if tool then
    tool.nested = tool.nested or {}
    table.insert(tool.nested, block)
  else
    table.insert(scope, block)
  end
end

--- The agent block of PATH in TURN, made and placed when new.
function M.agent_block(turn, path, label, call_id)
  turn.agents = turn.agents or {}
  local block = turn.agents[path]
  if not block then
    block = { kind = 'agent', path = path, blocks = {}, phase = 'starting' }
    turn.agents[path] = block
    place(turn, block, path, call_id)
  end
  block.label = label or block.label
  return block
end

--- Apply a sub-agent's didUpdate PARAMS to the root TURN (APPLY_EVENT:
--- the chat's TurnEvent reader, given a block holding `blocks`). Returns
--- its block.
function M.apply(turn, params, apply_event)
  local path = value(params.agentPath)
  local known = turn.agents and turn.agents[path]
  if known and known.phase == 'settled' and params.phase ~= 'settled' then
    -- Another task of the same sub-agent (a later Agent call): a block of its own.
    turn.agents[path] = nil
  end
  local block = M.agent_block(turn, path, value(params.agent), value(params.parentCallId))
  block.phase = params.phase
  for _, event in ipairs(value(params.events) or {}) do
    apply_event(block, event)
  end
  if params.phase == 'settled' then
    block.outcome = value(params.outcome) or 'completed'
    block.reason = value(params.reason)
    block.error = value(params.error)
  end
  return block
end

-- Whether a tool call's TITLE names the Agent tool (`Agent`,
-- `mcp__mevedel__Agent`, `mcp Agent`...).
local function names_agent_tool(title)
  for word in (title or ''):gmatch('%w+') do
    if word == 'Agent' then
      return true
    end
  end
  return false
end

local function parent_of(path)
  return path:match('^(.*)/[^/]+$')
end

-- The conversation of ITEM, a recorded task, as its fold shows it (how
-- and why it ended are the item's own fields, said after the fold).
local function conversation(item)
  return value(item.output) or ''
end

--- A settled task recorded in a turn (a `mevedel/turn/show` agent_task
--- item) as the agent block the live chat holds once the task settled:
--- its conversation, from the record, is its activity.
function M.from_task(item)
  local name = value(item.name) or '?'
  local sender = value(item.sender)
  local said = conversation(item)
  return {
    kind = 'agent',
    path = name,
    label = sender and (name .. ' (' .. sender .. ')') or name,
    phase = 'settled',
    -- How it ended and why, said as its settled update was (a server that
    -- sends no outcome says only whether it failed).
    outcome = value(item.outcome) or (item.isError == true and 'did not complete' or 'completed'),
    reason = value(item.reason),
    blocks = said ~= '' and { { kind = 'response', text = said } } or {},
  }
end

--- Put ITEM, a task recorded in the read-back TURN, where the live chat
--- shows it: under the call that started it (`parentCallId`; a record
--- that names none: the newest Agent call without its answer yet, as the
--- task settles before its caller's answer, a guess parallel calls
--- defeat), else after the turn so far. A sub-agent's own
--- sub-agent's task is recorded before its caller's: it waits in WAITING
--- and goes after its caller's activity (what is left waiting at the end
--- of the turn goes after it, `M.place_waiting`).
function M.add_task(turn, item, waiting)
  local block = M.from_task(item)
  local own = {}
  for i = #waiting, 1, -1 do
    if parent_of(waiting[i].path) == block.path then
      table.insert(own, 1, table.remove(waiting, i))
    end
  end
  vim.list_extend(block.blocks, own)
  if parent_of(block.path) then
    table.insert(waiting, block)
    return
  end
  local call
  local parent_call = value(item.parentCallId)
  if parent_call then
    call = tool_with(turn.blocks, parent_call)
  else
    for i = #turn.blocks, 1, -1 do
      local candidate = turn.blocks[i]
      if candidate.kind == 'tool' and not candidate.status and names_agent_tool(candidate.title) then
        call = candidate
        break
      end
    end
  end
  place(turn, block, block.path, call and call.callId)
end

--- Put the tasks left WAITING for a caller's task the read-back TURN does
--- not hold after the turn.
function M.place_waiting(turn, waiting)
  vim.list_extend(turn.blocks, waiting)
end

--- Whether the root TURN's update PARAMS are a sub-agent's.
function M.is_nested(params)
  return value(params.agentPath) ~= nil
end

return M
