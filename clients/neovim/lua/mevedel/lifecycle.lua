-- mevedel.lifecycle: Rewind, Redo, Fork, Worktree Fork and Save As.
--
-- Each is two-phase on the server: `.../prepare` reports the impact and a
-- token, `.../commit` with the token rechecks and acts. This module asks
-- what to do (vim.ui.select, vim.ui.input), shows the whole impact (files
-- restored, capture gaps, files changed outside, the Git index, what
-- becomes of the agent's own history) in the `mevedel impact` window and,
-- with Neovim's own vim.ui.select, in the confirmation question itself,
-- and commits only when the user picks the action; Cancel (or no choice)
-- sends nothing more, so nothing changes. A refusal because the session
-- is in recovery offers Retry / Abandon / Leave it.

local mevedel = require('mevedel')
local client_or_notify, present, scoped = mevedel.client_or_notify, mevedel.present, mevedel.scoped

local M = {}

local levels = vim.log.levels


local function list(value)
  return present(value) and value or {}
end

local function plural(count, word)
  return string.format('%d %s%s', count, word, count == 1 and '' or 's')
end

local function label_line(label)
  return string.format('  turn %d: %s', label.turn, label.preview)
end

local function append(into, items)
  for _, item in ipairs(items) do
    table.insert(into, item)
  end
  return into
end

-- Impact text -------------------------------------------------------------------

-- What becomes of the agent's own (native) history, when the server says.
local function agent_lines(impact)
  if present(impact.agentHistory) then
    return { 'Agent: ' .. impact.agentHistory }
  end
  return {}
end
M.agent_lines = agent_lines

-- Rewind: the sub-agents whose tasks changed a FileRestore, after it.
local function by_agents(r)
  local agents = list(r.agents)
  if #agents == 0 then
    return ''
  end
  return string.format(', changed by sub-agent%s %s', #agents == 1 and '' or 's', table.concat(agents, ', '))
end

local function file_lines(impact)
  local lines = {}
  local restores = list(impact.restores)
  local writes = vim.tbl_filter(function(r)
    return r.changes == true
  end, restores)
  if #writes > 0 then
    table.insert(lines, string.format('Restores %s:', plural(#writes, 'file')))
    for _, r in ipairs(writes) do
      -- The action: delete, create directory, remove directory, chmod 755,
      -- relink; a restore shows the bytes it writes.
      local action = present(r.action) and r.action or (r.state == 'absent' and 'delete' or 'restore')
      local content = action == 'restore' and plural(present(r.size) and r.size or 0, 'byte') or action
      table.insert(lines, string.format('  %s (%s of turn %d: %s)%s', r.path, r.checkpoint, r.turn, content, by_agents(r)))
    end
  end
  if #restores > #writes then
    table.insert(lines, string.format('%s already match and stay as they are', plural(#restores - #writes, 'captured file')))
  end
  if #list(impact.gaps) > 0 then
    table.insert(lines, 'Capture gaps (these files may have changed and are NOT restored):')
    for _, gap in ipairs(impact.gaps) do
      table.insert(lines, string.format('  %s (turn %d: %s)', gap.path, gap.turn, gap.reason))
    end
  end
  if #list(impact.externallyModified) > 0 then
    table.insert(lines, 'Changed outside the session since recorded (the commit overwrites them):')
    for _, change in ipairs(impact.externallyModified) do
      table.insert(lines, string.format('  %s (recorded by turn %d)', change.path, change.recordedTurn))
    end
  end
  local git = impact.git or {}
  if git.status == 'checked' and #list(git.divergent) > 0 then
    table.insert(lines, 'Git index will differ from the restored files:')
    for _, path in ipairs(git.divergent) do
      table.insert(lines, '  ' .. path)
    end
  elseif git.status == 'unavailable' then
    table.insert(lines, 'Git could not be asked about the index: ' .. (present(git.detail) and git.detail or 'no detail'))
  end
  return lines
end

--- { summary, details, action } for a RewindImpact.
function M.describe_rewind(impact)
  local where = impact.boundary == 'after' and string.format('to after the response of turn %d', impact.turn)
    or string.format('to before the prompt of turn %d', impact.turn)
  local summary = string.format('Rewind %s %s: %s kept.', impact.sessionId, where, plural(impact.keptTurns, 'turn'))
  if impact.empty == true then
    return { summary = summary, details = append({ 'Nothing changes.' }, agent_lines(impact)), action = 'Rewind' }
  end
  local details = {}
  local discarded = list(impact.discarded)
  if #discarded > 0 then
    table.insert(details, string.format('Discards %s:', plural(#discarded, 'prompt')))
    append(details, vim.tbl_map(label_line, discarded))
  elseif impact.transcriptChanges == true then
    table.insert(details, 'Discards no prompts; undoes a compaction or /clear')
  else
    table.insert(details, 'Discards no prompts')
  end
  append(details, file_lines(impact))
  append(details, agent_lines(impact))
  return { summary = summary, details = details, action = 'Rewind' }
end

function M.describe_redo(impact)
  local back, gone = list(impact.restored), list(impact.discarded)
  local details = {}
  if #back > 0 then
    table.insert(details, string.format('Brings back %s:', plural(#back, 'turn')))
    append(details, vim.tbl_map(label_line, back))
  end
  if #gone > 0 then
    table.insert(details, string.format('Discards %s:', plural(#gone, 'prompt')))
    append(details, vim.tbl_map(label_line, gone))
  end
  append(details, file_lines(impact))
  local changes = false
  for _, r in ipairs(list(impact.restores)) do
    changes = changes or r.changes == true
  end
  if #back == 0 and #gone == 0 and not changes then
    table.insert(details, 'Nothing changes.')
  end
  append(details, agent_lines(impact))
  return {
    summary = string.format('Redo %s: return to the state with %s.', impact.sessionId, plural(impact.commonTurns + #back, 'turn')),
    details = details,
    action = 'Redo',
  }
end

local function child_lines(impact)
  local lines = {}
  local artifacts, localFiles = list(impact.attachedArtifacts), list(impact.localFiles)
  if #artifacts > 0 then
    table.insert(lines, string.format('Carries %s: %s', plural(#artifacts, 'attached artifact'), table.concat(artifacts, ', ')))
  end
  if #localFiles > 0 then
    table.insert(lines, string.format('Copies %s: %s', plural(#localFiles, 'session-local file'), table.concat(localFiles, ', ')))
  end
  if present(impact.plansNote) then
    table.insert(lines, 'Plans: ' .. impact.plansNote)
  end
  table.insert(lines, 'The source session is not changed.')
  append(lines, agent_lines(impact))
  return lines
end

--- What a Conversation Fork does to the files: nothing.
M.fork_files_note = 'The working files are left as they are: the fork works in this same checkout (only Worktree Fork gives the fork its own files).'

--- A ForkImpact, or a WorktreeForkImpact when WORKTREE.
function M.describe_fork(impact, worktree)
  local summary = string.format(
    '%s %s after the response of turn %d (%s): a new session with %s.',
    worktree and 'Worktree Fork' or 'Fork',
    impact.sessionId,
    impact.response.turn,
    impact.response.preview,
    plural(impact.turns, 'turn')
  )
  if not worktree then
    return { summary = summary, details = append({ M.fork_files_note }, child_lines(impact)), action = 'Fork' }
  end
  local place = impact.worktree
  local details = {
    string.format(
      'Creates the Git worktree %s on the new branch %s at %s (HEAD of %s)',
      place.directory,
      place.branch,
      place.baseCommit:sub(1, 12),
      place.sourceCheckout
    ),
  }
  if #list(impact.restores) > 0 then
    table.insert(details, "Writes the turn's content of: " .. table.concat(impact.restores, ', '))
  end
  if #list(impact.unrestored) > 0 then
    table.insert(details, 'Left at their HEAD content:')
    for _, file in ipairs(impact.unrestored) do
      table.insert(details, string.format('  %s (%s)', file.path, file.reason))
    end
  end
  if #list(impact.shared) > 0 then
    table.insert(details, 'Shared, not copied (outside the checkout): ' .. table.concat(impact.shared, ', '))
  end
  append(details, child_lines(impact))
  return { summary = summary, details = details, action = 'Create Worktree Fork' }
end

function M.describe_save_as(impact)
  return {
    summary = string.format('Save %s as "%s": a new session with %s.', impact.sessionId, impact.name, plural(impact.turns, 'turn')),
    details = {
      string.format(
        '%s, %s, %s (%s)',
        plural(impact.segments, 'transcript segment'),
        plural(impact.chats, 'chat'),
        plural(impact.artifacts, 'artifact'),
        plural(impact.size, 'byte')
      ),
      'The source session is not changed.',
      unpack(agent_lines(impact)),
    },
    action = 'Save As',
  }
end

--- The Redo picker's line for a RedoState, like the Rewind picker labels a turn.
function M.format_state(state)
  local last = present(state.lastTurn) and string.format('ends at turn %d: %s', state.lastTurn.turn, state.lastTurn.preview)
    or 'the empty session'
  return plural(state.turnCount, 'turn') .. ' · ' .. last
end

-- Showing and confirming -----------------------------------------------------------

M.impact_buffer_name = 'mevedel impact'

--- The last impact shown: { summary, details, action }.
M.last_impact = nil

local function show_impact(described)
  M.last_impact = described
  local bufnr = vim.fn.bufnr(M.impact_buffer_name)
  if bufnr < 0 then
    bufnr = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(bufnr, M.impact_buffer_name)
  end
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, append({ described.summary, '' }, described.details))
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  if vim.fn.bufwinid(bufnr) < 0 then
    local current = vim.api.nvim_get_current_win()
    vim.cmd('botright sbuffer ' .. bufnr)
    vim.api.nvim_set_current_win(current)
  end
  return bufnr
end

function M.hide_impact()
  local bufnr = vim.fn.bufnr(M.impact_buffer_name)
  local win = bufnr >= 0 and vim.fn.bufwinid(bufnr) or -1
  if win >= 0 and #vim.api.nvim_list_wins() > 1 then
    vim.api.nvim_win_close(win, true)
  end
end



-- Sends a lifecycle request; a refusal is told in the server's words, and
-- one because of a pending recovery offers to resolve it.
local function call(client, method, params)
  local result, err, data = mevedel.request(client, method, params)
  if result then
    return result
  end
  mevedel.notify(err)
  if type(data) == 'table' and data.kind == 'recovery-pending' then
    M.offer_recovery(client, params.sessionId, err)
  end
  return nil
end

-- Whether vim.ui.select is Neovim's own (a numbered inputlist), not a
-- picker plugin's.
local function builtin_select()
  local ok, info = pcall(debug.getinfo, vim.ui.select, 'S')
  return ok and info and type(info.source) == 'string' and info.source:find('vim[/\\]ui%.lua$') ~= nil
end

--- Ask whether to commit DESCRIBED ({ summary, details, action }):
--- ON_CHOICE(true) for the action. The impact window is drawn first; with
--- Neovim's own vim.ui.select the question lists every impact line above
--- the numbered choices (a picker plugin gets the summary as its prompt
--- and the impact as `opts.impact`, with the window beside it).
function M.confirm(described, on_choice)
  show_impact(described)
  pcall(vim.cmd, 'redraw')
  local choices = { described.action, 'Cancel' }
  if builtin_select() then
    local lines = append({ described.summary, '' }, described.details)
    table.insert(lines, '')
    for i, choice in ipairs(choices) do
      table.insert(lines, string.format('%d: %s', i, choice))
    end
    local picked = vim.fn.inputlist(lines)
    -- The question's lines stay in the message area: the message after
    -- the commit would stack under them and ask "Press ENTER" (0.7).
    pcall(vim.cmd, 'redraw')
    return on_choice(picked == 1)
  end
  vim.ui.select(choices, {
    prompt = described.summary,
    kind = 'mevedel.confirm',
    impact = append({ described.summary, '' }, described.details),
  }, function(choice)
    on_choice(choice == described.action)
  end)
end

-- Prepare, show the impact, ask; commit with the token only on the action.
-- ON_DONE(result) runs after a commit; nothing runs after a decline.
local function transaction(client, prepare, commit, params, describe, on_done)
  local impact = call(client, prepare, params)
  if not impact then
    return
  end
  local described = describe(impact)
  M.confirm(described, function(confirmed)
    M.hide_impact()
    if not confirmed then
      mevedel.notify(described.action:lower() .. ' cancelled; nothing changed', levels.INFO)
      return
    end
    -- The commit names the session the prepare saw, so a session switch in
    -- between cannot redirect it.
    local result = call(client, commit, { token = impact.token, sessionId = impact.sessionId })
    if result and on_done then
      on_done(result)
    end
  end)
end

local function in_place_done(verb, on_done)
  return function(result)
    local written = #list(result.written) > 0 and '; wrote ' .. table.concat(result.written, ', ') or ''
    local warning = present(result.warning) and ' (warning: ' .. result.warning .. ')' or ''
    local what = result.committed == true and 'now ' .. plural(result.settledTurns, 'settled turn') or 'nothing changed'
    mevedel.notify(string.format('%s %s: %s%s%s', verb, result.sessionId, what, written, warning), levels.INFO)
    if on_done then
      on_done(result)
    end
  end
end

-- OPTS.show(child_id), when given, shows the child instead of its transcript.
local function child_done(client, verb, on_done, opts)
  return function(result)
    local child = result.session
    local warning = present(result.warning) and ' (warning: ' .. result.warning .. ')' or ''
    mevedel.notify(
      string.format('%s %s into %s (%s, %s), now current%s', verb, result.sourceId, child.displayName, child.sessionId, plural(child.settledTurns, 'turn'), warning),
      levels.INFO
    )
    if opts and opts.show then
      opts.show(child.sessionId)
    else
      require('mevedel.sessions').transcript(child.sessionId, client)
    end
    if on_done then
      on_done(result)
    end
  end
end

-- Picking --------------------------------------------------------------------------

-- Calls ON_TURN(turn, session_id) with TURN, or a turn of SESSION the user
-- picks (newest first); COMPLETED_ONLY offers only completed turns.
local function with_turn(client, session, turn, completed_only, what, on_turn)
  if turn then
    return on_turn(turn, session)
  end
  local listing = call(client, 'mevedel/turn/list', scoped(session))
  if not listing then
    return
  end
  local turns = {}
  for i = #listing.turns, 1, -1 do
    local t = listing.turns[i]
    if (completed_only and t.state == 'completed') or (not completed_only and t.state ~= 'in-flight') then
      table.insert(turns, t)
    end
  end
  if #turns == 0 then
    mevedel.notify(listing.sessionId .. ' has no settled turn to ' .. what, levels.INFO)
    return
  end
  vim.ui.select(turns, {
    prompt = 'mevedel: turn to ' .. what,
    format_item = require('mevedel.sessions').format_turn,
    kind = 'mevedel.turn',
  }, function(picked)
    if picked then
      on_turn(picked.turn, listing.sessionId)
    end
  end)
end

local BOUNDARIES = { 'after', 'before' }

function M.format_boundary(turn)
  return function(boundary)
    if boundary == 'after' then
      return string.format('After the response of turn %d (keep it)', turn)
    end
    return string.format('Before the prompt of turn %d (discard it too)', turn)
  end
end

-- Commands ---------------------------------------------------------------------------

--- Rewind SESSION (nil: the current one) to BOUNDARY ('after'/'before') of
--- TURN; what is not given is picked. ON_DONE(result) runs after a commit.
function M.rewind(turn, boundary, session, on_done)
  local client = client_or_notify()
  if not client then
    return
  end
  with_turn(client, session, turn, false, 'rewind to', function(chosen, sid)
    local function go(b)
      transaction(
        client,
        'mevedel/rewind/prepare',
        'mevedel/rewind/commit',
        scoped(sid, { turn = chosen, boundary = b }),
        M.describe_rewind,
        in_place_done('rewound', on_done)
      )
    end
    if boundary then
      return go(boundary)
    end
    vim.ui.select(BOUNDARIES, { prompt = 'mevedel: rewind to', format_item = M.format_boundary(chosen), kind = 'mevedel.boundary' }, function(b)
      if b then
        go(b)
      end
    end)
  end)
end

--- Return SESSION to one of the states the server lists (picked).
function M.redo(session, on_done)
  local client = client_or_notify()
  local listing = client and call(client, 'mevedel/redo/list', scoped(session))
  if not listing then
    return
  end
  if #listing.states == 0 then
    mevedel.notify(listing.sessionId .. ' has no earlier state to return to', levels.INFO)
    return
  end
  vim.ui.select(listing.states, { prompt = 'mevedel: redo to', format_item = M.format_state, kind = 'mevedel.redo' }, function(state)
    if state then
      transaction(
        client,
        'mevedel/redo/prepare',
        'mevedel/redo/commit',
        scoped(listing.sessionId, { publicationId = state.publicationId }),
        M.describe_redo,
        in_place_done('redone', on_done)
      )
    end
  end)
end

--- Fork SESSION after the response of TURN (picked when nil). OPTS.show(child)
--- shows the new session (default: its transcript).
function M.fork(turn, session, on_done, opts)
  local client = client_or_notify()
  if not client then
    return
  end
  with_turn(client, session, turn, true, 'fork after', function(chosen, sid)
    transaction(
      client,
      'mevedel/fork/prepare',
      'mevedel/fork/commit',
      scoped(sid, { turn = chosen }),
      M.describe_fork,
      child_done(client, 'forked', on_done, opts)
    )
  end)
end

--- One line of the variants picker: the current session is marked `*`.
function M.format_variant(variant)
  return string.format(
    '%s%s  %s (%s)  %s',
    variant.isCurrent and '* ' or '  ',
    variant.role,
    variant.displayName,
    variant.sessionId,
    present(variant.latestPreview) and variant.latestPreview or ''
  )
end

--- The sessions sharing the fork point at TURN (picked when nil) of
--- SESSION: the source first, then its direct forks oldest to newest. The
--- picked one is opened and its transcript shown at TURN; ON_DONE(opened)
--- runs after.
function M.variants(turn, session, on_done)
  local client = client_or_notify()
  if not client then
    return
  end
  with_turn(client, session, turn, true, 'list the variants of', function(chosen, sid)
    local group = call(client, 'mevedel/fork/variants', scoped(sid, { turn = chosen }))
    if not group then
      return
    end
    local items = {}
    if group.source then
      table.insert(items, group.source)
    end
    vim.list_extend(items, group.forks)
    vim.ui.select(items, {
      prompt = string.format('mevedel: variant at turn %d', group.turn),
      format_item = M.format_variant,
      kind = 'mevedel.variant',
    }, function(variant)
      if not variant then
        return
      end
      local sessions = require('mevedel.sessions')
      sessions.open(variant.sessionId, 'auto', function(opened)
        sessions.goto_turn(group.turn, variant.sessionId)
        if on_done then
          on_done(opened)
        end
      end, client)
    end)
  end)
end

--- Worktree Fork of SESSION after TURN into worktree NAME (nil or empty:
--- the server allocates one). OPTS as for fork.
function M.worktree_fork(turn, name, session, on_done, opts)
  local client = client_or_notify()
  if not client then
    return
  end
  with_turn(client, session, turn, true, 'fork after', function(chosen, sid)
    local params = scoped(sid, { turn = chosen })
    if name and vim.trim(name) ~= '' then
      params.name = vim.trim(name)
    end
    transaction(client, 'mevedel/worktreeFork/prepare', 'mevedel/worktreeFork/commit', params, function(impact)
      return M.describe_fork(impact, true)
    end, child_done(client, 'forked', function(result)
      local left = {}
      for _, file in ipairs(list(result.unrestored)) do
        table.insert(left, string.format('%s (%s)', file.path, file.reason))
      end
      mevedel.notify(
        string.format(
          "the fork's worktree is %s on branch %s%s",
          result.worktree.directory,
          result.worktree.branch,
          #left > 0 and '; left at HEAD: ' .. table.concat(left, ', ') or ''
        ),
        levels.INFO
      )
      if on_done then
        on_done(result)
      end
    end, opts))
  end)
end

--- Copy SESSION into a new session called NAME (asked when nil).
function M.save_as(name, session, on_done)
  local client = client_or_notify()
  if not client then
    return
  end
  local function go(given)
    transaction(
      client,
      'mevedel/saveAs/prepare',
      'mevedel/saveAs/commit',
      scoped(session, { name = given }),
      M.describe_save_as,
      child_done(client, 'saved', on_done)
    )
  end
  if name and name ~= '' then
    return go(name)
  end
  vim.ui.input({ prompt = 'Save session as: ' }, function(given)
    if given then
      go(given)
    end
  end)
end

-- Recovery ---------------------------------------------------------------------------

local RESOLUTIONS = {
  ['rolled-back'] = 'the files have their content from before the interrupted transaction',
  completed = 'the interrupted transaction was finished',
  abandoned = 'the files were left as they are',
}

local function resolve(client, method, session)
  local result, err = mevedel.request(client, method, scoped(session))
  if not result then
    mevedel.notify(err)
    return nil
  end
  local written = #list(result.written) > 0 and '; wrote ' .. table.concat(result.written, ', ') or ''
  -- A file edited since the interruption is the user's: the server keeps it,
  -- and the user has to know which it did not put back (the server's
  -- sentence, the one the CLI and every client say).
  local kept = type(result.leftNote) == 'string' and '; ' .. result.leftNote or ''
  mevedel.notify(
    string.format(
      'recovery %s of %s: %s%s%s',
      result.recoveryId,
      result.sessionId,
      RESOLUTIONS[result.resolution] or result.resolution,
      written,
      kept
    ),
    kept ~= '' and levels.WARN or levels.INFO
  )
  return result
end

--- Finish or roll back SESSION's interrupted Rewind or Redo.
function M.retry_recovery(session)
  local client = client_or_notify()
  return client and resolve(client, 'mevedel/session/retryRecovery', session)
end

--- Drop SESSION's recovery, leaving the files as they are (asks first).
function M.abandon_recovery(session, on_done)
  local client = client_or_notify()
  if not client then
    return
  end
  vim.ui.select(
    { 'Abandon', 'Cancel' },
    { prompt = 'Abandon the recovery? The project files stay as the interrupted transaction left them.', kind = 'mevedel.confirm' },
    function(choice)
      if choice == 'Abandon' then
        local result = resolve(client, 'mevedel/session/abandonRecovery', session)
        if result and on_done then
          on_done(result)
        end
      end
    end
  )
end

--- Say WHY SESSION is blocked and offer Retry, Abandon or Leave it.
function M.offer_recovery(client, session, why)
  vim.ui.select({ 'Retry', 'Abandon', 'Leave it' }, { prompt = 'mevedel: ' .. why, kind = 'mevedel.recovery' }, function(choice)
    if choice == 'Retry' then
      resolve(client, 'mevedel/session/retryRecovery', session)
    elseif choice == 'Abandon' then
      resolve(client, 'mevedel/session/abandonRecovery', session)
    else
      mevedel.notify(
        (session or 'the session') .. ' stays in recovery; :MevedelRecoveryRetry or :MevedelRecoveryAbandon resolves it',
        levels.WARN
      )
    end
  end)
end

return M
