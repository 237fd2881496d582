-- mevedel.control: control transfer between clients.
--
-- One client writes a session at a time. Take control acquires a free,
-- released or own lease at once, takes over an expired one after the
-- server's Take over / Cancel question, and asks the owner of a live one.
-- The owner's server asks its user Grant or Keep (window/showMessageRequest,
-- answered through vim.ui.select by mevedel.sessions.on_question).
-- `mevedel/control/didChange` reports each step on both sides.

local mevedel = require('mevedel')
local client_or_notify, scoped = mevedel.client_or_notify, mevedel.scoped

local M = {}

local levels = vim.log.levels

--- The last `mevedel/control/didChange` params (also announced as the
--- `User MevedelControlChanged` autocommand).
M.last_change = nil



local OUTCOMES = {
  acquired = 'you have control (writable here)',
  ['took-over'] = 'took over the expired lease (writable here)',
  ['already-owner'] = 'you already have control',
}

--- Take control of SESSION (nil: the current one). Does not wait (the
--- server may ask a question first): ON_TAKEN(result) runs after.
function M.take(session, on_taken)
  local client = client_or_notify()
  if not client then
    return
  end
  mevedel.request_async(client, 'mevedel/control/take', scoped(session), function(result, err, data)
    if not result then
      mevedel.notify_failure(err, data)
      return
    end
    local said = OUTCOMES[result.outcome]
      or string.format('asked %s for control; read-only until it answers', result.ownerHost or 'its owner')
    mevedel.notify(result.sessionId .. ': ' .. said, levels.INFO)
    if on_taken then
      on_taken(result)
    end
  end)
end

--- Save, publish and release SESSION; it stays open here read-only.
function M.release(session)
  local client = client_or_notify()
  local result, err = client and mevedel.request(client, 'mevedel/control/release', scoped(session))
  if not result then
    if err then
      mevedel.notify(err)
    end
    return nil
  end
  mevedel.notify(
    string.format('released %s%s; it is read-only here now', result.sessionId, result.committed == true and ' (published its unsaved content)' or ''),
    levels.INFO
  )
  return result
end

local function answer(method, verb, session)
  local client = client_or_notify()
  local status, err = client and mevedel.request(client, method, scoped(session))
  if not status then
    if err then
      mevedel.notify(err)
    end
    return nil
  end
  mevedel.notify(string.format('%s the request for %s (%s)', verb, status.sessionId, status.phase), levels.INFO)
  return status
end

--- Answer the waiting request for SESSION outside the question.
function M.grant(session)
  return answer('mevedel/control/grant', 'granted', session)
end

function M.keep(session)
  return answer('mevedel/control/keep', 'kept', session)
end

--- `mevedel/control/didChange`: tell the user, announce it.
function M.on_did_change(_, params)
  M.last_change = params
  local warn = params.phase == 'void' or params.phase == 'failed' or params.phase == 'rejected'
  mevedel.notify(params.message, warn and levels.WARN or levels.INFO)
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelControlChanged', modeline = false })
end

return M
