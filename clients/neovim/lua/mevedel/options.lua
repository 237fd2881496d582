-- The session's agent modes and config options (model, reasoning effort,
-- ...): `mevedel/agent/didChangeOptions` keeps what the server last told
-- per session (the chat's header shows it), and M.pick chooses one with
-- vim.ui.select through `mevedel/agent/setOption`. The server remembers
-- the choice in the session and applies it whenever the agent starts; a
-- choice the agent refuses is told, naming the choice and the agent.
local M = {}

local mevedel = require('mevedel')
local levels = vim.log.levels

-- AgentOptions by session id, as last told.
local by_session = {}

local value = mevedel.value

local function redraw(session)
  local ok, chat = pcall(require, 'mevedel.chat')
  if ok and chat.redraw then
    chat.redraw(session)
  end
end

local function keep(options)
  if type(options) == 'table' and options.sessionId then
    by_session[options.sessionId] = options
    redraw(options.sessionId)
  end
end

--- `mevedel/agent/didChangeOptions`.
function M.on_did_change(_, params)
  keep(params)
end

--- The label of VALUE of the config OPTION.
local function value_name(option, v)
  if option.kind == 'boolean' then
    return v == true and 'on' or 'off'
  end
  for _, item in ipairs(option.values or {}) do
    if item.value == v then
      return item.name
    end
  end
  return tostring(v)
end

local function mode_name(options)
  local current = value(options.currentMode)
  if not current then
    return nil
  end
  for _, mode in ipairs(options.modes or {}) do
    if mode.id == current then
      return mode.name
    end
  end
  return current
end

--- What the chat's header says of SESSION's options ('mode Plan · Model
--- Large'), or nil while the agent has not told them.
function M.summary(session)
  local options = by_session[session]
  if not options or options.known ~= true then
    return nil
  end
  local parts = {}
  local mode = mode_name(options)
  if mode then
    table.insert(parts, 'mode ' .. mode)
  end
  for _, option in ipairs(options.configOptions or {}) do
    table.insert(parts, option.name .. ' ' .. value_name(option, option.current))
  end
  if #parts == 0 then
    return nil
  end
  return table.concat(parts, ' · ')
end

--- Read SESSION's options from the server once (a chat opened later).
function M.ensure(client, session)
  if by_session[session] or not client then
    return
  end
  mevedel.request_async(client, 'mevedel/agent/options', mevedel.scoped(session), function(result)
    if result then
      keep(result)
    end
  end)
end

local function send(client, session, params, agent)
  local result, err = mevedel.request(client, 'mevedel/agent/setOption', mevedel.scoped(session, params))
  if not result then
    mevedel.notify(err, levels.ERROR)
    return
  end
  keep(result)
  mevedel.notify(string.format('agent %s: %s%s', agent, M.summary(result.sessionId) or 'chosen',
    result.running == true and '' or ' (applied with the next prompt)'), levels.INFO)
end

--- Choose the agent's mode or one of its options for SESSION (default: the
--- current buffer's session, else the server's current one).
function M.pick(session)
  local client = mevedel.client_or_notify()
  if not client then
    return
  end
  local options, err = mevedel.request(client, 'mevedel/agent/options', mevedel.scoped(session))
  if not options then
    mevedel.notify(err, levels.ERROR)
    return
  end
  keep(options)
  session = options.sessionId
  local agent = options.agent
  if options.known ~= true then
    mevedel.notify(string.format('agent %s has not said yet which modes and models it offers; send a prompt first', agent))
    return
  end
  local entries = {}
  if #(options.modes or {}) > 0 then
    table.insert(entries, { label = 'Mode: ' .. (mode_name(options) or '?'), mode = true })
  end
  for _, option in ipairs(options.configOptions or {}) do
    table.insert(entries, { label = option.name .. ': ' .. value_name(option, option.current), option = option })
  end
  if #entries == 0 then
    mevedel.notify(string.format('agent %s offers no modes and no options', agent))
    return
  end
  local function label(entry)
    return entry.label
  end
  vim.ui.select(entries, { prompt = 'mevedel: change (agent ' .. agent .. ')', format_item = label, kind = 'mevedel.options' }, function(entry)
    if not entry then
      return -- nothing chosen: nothing sent
    end
    if entry.mode then
      local modes = {}
      for _, mode in ipairs(options.modes) do
        table.insert(modes, { label = mode.name, id = mode.id })
      end
      vim.ui.select(modes, { prompt = 'mevedel: mode (now ' .. (mode_name(options) or '?') .. ')', format_item = label, kind = 'mevedel.mode' }, function(mode)
        if mode then
          send(client, session, { mode = mode.id }, agent)
        end
      end)
      return
    end
    local option = entry.option
    local values = {}
    if option.kind == 'boolean' then
      values = { { label = 'on', value = true }, { label = 'off', value = false } }
    else
      for _, item in ipairs(option.values or {}) do
        local group = value(item.group)
        table.insert(values, { label = group and (item.name .. ' (' .. group .. ')') or item.name, value = item.value })
      end
    end
    local prompt = string.format('mevedel: %s (now %s)', option.name, value_name(option, option.current))
    vim.ui.select(values, { prompt = prompt, format_item = label, kind = 'mevedel.option' }, function(choice)
      if choice then
        send(client, session, { configId = option.id, value = choice.value }, agent)
      end
    end)
  end)
end

return M
