-- User commands of the mevedel client; `require('mevedel').setup{}` starts
-- the server for Markdown and text buffers.
if vim.g.loaded_mevedel then
  return
end
vim.g.loaded_mevedel = true

local function command(name, run, opts)
  vim.api.nvim_create_user_command(name, run, opts)
end

local function sessions()
  return require('mevedel.sessions')
end

-- Session commands act on the session of the current buffer (a transcript
-- or turn view), else on the server's current session.
local function here()
  return sessions().session_here()
end

command('MevedelRead', function(c)
  require('mevedel').read_address(c.args)
end, { nargs = 1, desc = 'Open what a mevedel resource address names (read-only when it is not a file)' })

command('MevedelAttach', function()
  require('mevedel').attach(0)
end, { nargs = 0, desc = 'Attach the mevedel language server to the current buffer' })

command('MevedelSessions', function()
  sessions().pick()
end, { nargs = 0, desc = 'Pick a mevedel session (Switch, Resume, Join, Take over) and show its transcript' })

command('MevedelSessionNew', function(c)
  sessions().create(c.args)
end, { nargs = '?', desc = 'Start a mevedel session, optionally named' })

command('MevedelSessionRename', function(c)
  sessions().rename(c.args, here())
end, { nargs = 1, desc = 'Rename the mevedel session' })

command('MevedelSessionSave', function()
  sessions().save(here())
end, { nargs = 0, desc = 'Publish the mevedel session now' })

command('MevedelSessionClose', function()
  sessions().close(here())
end, { nargs = 0, desc = 'Save and close the mevedel session' })

command('MevedelSessionRetry', function()
  sessions().retry_publication(here())
end, { nargs = 0, desc = "Publish again the mevedel session's failed save" })

command('MevedelSessionAbandon', function()
  sessions().abandon_publication(here())
end, { nargs = 0, desc = "Drop the mevedel session's failed save (the next save carries its content)" })

command('MevedelTurnAbort', function(c)
  sessions().abort_turn(c.args, here())
end, { nargs = '?', desc = 'Interrupt the turn in flight and save it' })

command('MevedelTranscript', function()
  sessions().transcript(here())
end, { nargs = 0, desc = "Show the mevedel session's transcript (history://root)" })

command('MevedelTurns', function()
  sessions().pick_turn(here())
end, { nargs = 0, desc = "Pick a turn of the mevedel session and go to it in the transcript" })

command('MevedelTurn', function(c)
  local turn = tonumber(c.args)
  if not turn then
    require('mevedel').notify('give a turn number, like :MevedelTurn 3')
    return
  end
  sessions().show_turn(turn, here())
end, { nargs = 1, desc = 'Show one turn of the mevedel session alone' })

-- What turns changed in the tree: a list of paths, and a diff split of a
-- text file's two sides (mevedel.review).
command('MevedelReview', function(c)
  require('mevedel.review').command(c.args, here())
end, { nargs = '?', desc = 'Review what a turn (N), a range (N..M) or every turn (all) changed; no argument: the turn under the cursor of a chat, else picked' })

local function lifecycle()
  return require('mevedel.lifecycle')
end

-- Rewind, Redo, Fork, Worktree Fork, Save As: what is not given is picked,
-- the impact is shown, and only choosing the action commits.
command('MevedelRewind', function(c)
  local turn, boundary = c.fargs[1] and tonumber(c.fargs[1]), c.fargs[2]
  if (c.fargs[1] and not turn) or (boundary and boundary ~= 'after' and boundary ~= 'before') then
    require('mevedel').notify('usage: :MevedelRewind [TURN [after|before]]')
    return
  end
  lifecycle().rewind(turn, boundary, here())
end, { nargs = '*', desc = 'Rewind the mevedel session to after a response or before a prompt' })

command('MevedelRedo', function()
  lifecycle().redo(here())
end, { nargs = 0, desc = 'Return the mevedel session to an earlier committed state' })

command('MevedelFork', function(c)
  local turn = c.args ~= '' and tonumber(c.args) or nil
  if c.args ~= '' and not turn then
    require('mevedel').notify('usage: :MevedelFork [TURN]')
    return
  end
  lifecycle().fork(turn, here())
end, { nargs = '?', desc = 'Fork the mevedel session after a response into a new session' })

command('MevedelForkVariants', function(c)
  local turn = c.args ~= '' and tonumber(c.args) or nil
  if c.args ~= '' and not turn then
    require('mevedel').notify('usage: :MevedelForkVariants [TURN]')
    return
  end
  lifecycle().variants(turn, here())
end, { nargs = '?', desc = 'Pick the source or a fork at a mevedel fork point and open it there' })

command('MevedelWorktreeFork', function(c)
  local turn = c.fargs[1] and tonumber(c.fargs[1])
  if c.fargs[1] and not turn then
    require('mevedel').notify('usage: :MevedelWorktreeFork [TURN [NAME]]')
    return
  end
  lifecycle().worktree_fork(turn, c.fargs[2], here())
end, { nargs = '*', desc = 'Fork the mevedel session after a response into a new Git worktree' })

command('MevedelSaveAs', function(c)
  lifecycle().save_as(c.args, here())
end, { nargs = '?', desc = 'Copy the mevedel session into a new session with a name' })

command('MevedelRecoveryRetry', function()
  lifecycle().retry_recovery(here())
end, { nargs = 0, desc = "Finish or roll back the mevedel session's interrupted Rewind or Redo" })

command('MevedelRecoveryAbandon', function()
  lifecycle().abandon_recovery(here())
end, { nargs = 0, desc = "Drop the mevedel session's recovery, leaving the files as they are" })

-- Control transfer: one client writes a session at a time.
command('MevedelTakeControl', function()
  require('mevedel.control').take(here())
end, { nargs = 0, desc = 'Take control of the mevedel session (asks its owner when another client holds it)' })

command('MevedelReleaseControl', function()
  require('mevedel.control').release(here())
end, { nargs = 0, desc = 'Save, publish and release the mevedel session; it stays open read-only' })

command('MevedelGrantControl', function()
  require('mevedel.control').grant(here())
end, { nargs = 0, desc = 'Grant the waiting request for control of the mevedel session' })

command('MevedelKeepControl', function()
  require('mevedel.control').keep(here())
end, { nargs = 0, desc = 'Refuse the waiting request for control of the mevedel session' })

-- Following a session owned elsewhere, and new transcript segments.
command('MevedelFollowToggle', function()
  sessions().toggle_follow(here())
end, { nargs = 0, desc = "Turn following of the read-only mevedel session's publications on or off" })

command('MevedelRefresh', function()
  sessions().refresh(here())
end, { nargs = 0, desc = "Read the mevedel session's latest committed state now" })

command('MevedelCompact', function(c)
  sessions().compact(c.args, here())
end, { nargs = 1, desc = 'Compact the mevedel session: a new segment starts with the given summary' })

command('MevedelClear', function()
  sessions().clear(here())
end, { nargs = 0, desc = '/clear the mevedel session: close the chat as a chapter, start a new one' })

-- The agent chat: prompts go to an ACP agent as turns of the session; the
-- chat buffer shows the turns and streams the running one.
local function chat()
  return require('mevedel.chat')
end

command('MevedelPrompt', function(c)
  chat().command(c)
end, {
  nargs = '*',
  range = true,
  desc = 'Prompt the agent (no text: write it in a buffer); a range quotes those lines and attaches the file, --attach attaches the file',
})

command('MevedelChat', function(c)
  chat().open(c.args ~= '' and c.args or here())
end, { nargs = '?', desc = "Open the chat of the mevedel session: its turns, and the running one as it streams" })

command('MevedelCancel', function()
  chat().cancel(here())
end, { nargs = 0, desc = "Cancel the agent's running turn" })

command('MevedelAgent', function()
  chat().pick_agent(here())
end, { nargs = 0, desc = 'Pick the agent the mevedel session prompts' })

command('MevedelOptions', function()
  require('mevedel.options').pick(here())
end, { nargs = 0, desc = "Choose the agent's mode, model or another option for the mevedel session" })

-- The workspace artifact store: documents, whiteboards and artifacts, by
-- title; an item opens in a buffer whose :w writes it (mevedel.artifacts).
local function artifacts()
  return require('mevedel.artifacts')
end

artifacts().define_autocommands()

command('MevedelArtifacts', function()
  artifacts().pick()
end, { nargs = 0, desc = "List the workspace's artifacts (attached ones marked *) and act on one" })

command('MevedelArtifactNew', function(c)
  local kind, title = c.fargs[1], c.args
  if kind == 'document' or kind == 'whiteboard' then
    title = vim.trim(c.args:sub(#kind + 1))
  else
    kind = 'document'
  end
  artifacts().create(kind, title)
end, {
  nargs = '*',
  complete = function(lead, line)
    if line:match('^%S+%s+%S*$') then
      return vim.tbl_filter(function(kind)
        return kind:sub(1, #lead) == lead
      end, { 'document', 'whiteboard' })
    end
    return {}
  end,
  desc = 'Make a document (or: whiteboard TITLE) in the artifact store, attached to the session, and open it',
})

command('MevedelArtifactOpen', function(c)
  if c.args ~= '' then
    artifacts().open(vim.trim(c.args))
  else
    artifacts().pick_open()
  end
end, { nargs = '?', desc = 'Open an artifact store item (by id, else picked) in a buffer whose :w writes it' })

command('MevedelArtifactReload', function(c)
  artifacts().reload(0, c.bang)
end, { nargs = 0, bang = true, desc = "Read the item again (!: drop unsaved changes, copied to a buffer first)" })

for name, spec in pairs({
  MevedelArtifactVersions = { 'versions', 0, 'Pick a version of the item and restore it' },
  MevedelArtifactSaveVersion = { 'save_version', 0, "Record the item's current content as a version" },
  MevedelArtifactAttach = { 'attach', 0, 'Attach the item to the mevedel session' },
  MevedelArtifactDetach = { 'detach', 0, 'Detach the item from the mevedel session' },
  MevedelArtifactDuplicate = { 'duplicate', '?', 'Copy the item under a new id (optionally titled)' },
  MevedelArtifactDelete = { 'delete', 0, 'Delete the item (asks first)' },
  MevedelArtifactComment = { 'comment', '?', "Add a comment to the item's discussion" },
  MevedelArtifactComments = { 'comments', 0, "Read the item's comments and whether an agent has read them" },
  MevedelArtifactRequest = { 'request', 0, 'Ask the mevedel server holding the item to hand it over' },
  MevedelArtifactConversation = { 'conversation', 0, "Open the chat of the item's own session" },
}) do
  command(name, function(c)
    artifacts().command(spec[1], c.args)
  end, { nargs = spec[2], desc = spec[3] .. ' (the current buffer\'s item, else one picked)' })
end
