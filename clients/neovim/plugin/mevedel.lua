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
