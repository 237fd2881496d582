-- Headless Neovim tests of a sub-agent's activity in the chat
-- (clients/neovim/lua/mevedel/nested.lua and chat.lua) against the real
-- server and two scripted ACP agents (tests/agents/scripted_agent.py): the
-- parent calls the `Agent` tool through the official MCP client, which
-- runs the helper as a sub-agent in the same turn.
--
-- Run by tests/clients/test_neovim.py like chat_test.lua. Prints one
-- PASS/FAIL line per test; exits non-zero when any failed.

local H = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'agent_harness.lua')
local root, scratch, out, test, wait_for, expect = H.root, H.scratch, H.out, H.test, H.wait_for, H.expect
local read_file, write_file, chat, agent, configure = H.read_file, H.write_file, H.chat, H.agent, H.configure
local chat_buffer, chat_text, line_of, cursor_on, press, new_session = H.chat_buffer, H.chat_text, H.line_of, H.cursor_on, H.press, H.new_session
local answering, lifecycle, buffer_text = H.answering, H.lifecycle, H.buffer_text

-- The fold state of line ROW of the chat of SESSION: its first line when
-- closed, else -1.
local function closed_at(session, row)
  local win = vim.fn.bufwinid(chat_buffer(session))
  return vim.api.nvim_win_call(win, function()
    return vim.fn.foldclosed(row)
  end)
end

-- The text of buffer BUFNR as its window shows it: a closed fold as its
-- first line, a sub-agent's heading counting its fold's lines as `N lines`
-- once checked (read back, the fold holds the task's recorded
-- conversation, not the live activity).
local function as_shown(bufnr)
  return vim.api.nvim_win_call(vim.fn.bufwinid(bufnr), function()
    local shown, row, last = {}, 1, vim.api.nvim_buf_line_count(bufnr)
    while row <= last do
      local line = vim.fn.getline(row)
      local fold_end = vim.fn.foldclosedend(row)
      if fold_end ~= -1 then
        local count = line:match(', (%d+) lines? %(zo shows')
        expect(not count or tonumber(count) == fold_end - row, 'the heading does not count its fold (%d lines): %s', fold_end - row, line)
        line = line:gsub(', %d+ lines? %(zo shows', ', N lines (zo shows')
        row = fold_end + 1
      else
        row = row + 1
      end
      table.insert(shown, line)
    end
    return table.concat(shown, '\n')
  end)
end

-- Runs READ(fresh) with FRESH a chat module that did not watch the turns
-- (as in a Neovim started afresh), then gives the other tests back the
-- chat that watched, whether READ failed or not.
local function reading_afresh(read)
  local watched = {
    chat = package.loaded['mevedel.chat'],
    nested = package.loaded['mevedel.nested'],
    foldexpr = _G.mevedel_chat_foldexpr,
    foldtext = _G.mevedel_chat_foldtext,
  }
  package.loaded['mevedel.chat'] = nil
  package.loaded['mevedel.nested'] = nil
  local ok, err = pcall(read, require('mevedel.chat'))
  package.loaded['mevedel.chat'], package.loaded['mevedel.nested'] = watched.chat, watched.nested
  _G.mevedel_chat_foldexpr, _G.mevedel_chat_foldtext = watched.foldexpr, watched.foldtext
  if not ok then
    error(err, 0)
  end
end

-- How many times TEXT holds NEEDLE.
local function count(text, needle)
  local n, at = 0, 1
  while true do
    local found = text:find(needle, at, true)
    if not found then
      return n
    end
    n, at = n + 1, found + #needle
  end
end

test('subagents: the activity streams nested under the call, folds once settled (zo shows it) while the root goes on; read back as it showed live; the rewind impact names it', function()
  local session = new_session('Nvim sub-agent')
  write_file(root .. '/notes.txt', 'original notes\n')
  local child_release = scratch .. '/child-release'
  local root_release = scratch .. '/root-release'
  configure({
    scripted = agent({ {
      { say = 'Asking the helper. ' },
      { mcp_call = { id = 'call-reviewer', tool = 'Agent', arguments = { name = 'reviewer', agent = 'helper', prompt = 'Review the notes' } } },
      { say = 'Thanks, helper. ' },
      { wait_file = root_release },
      { say = 'All done.' },
    } }),
    helper = agent({ {
      { think = 'Reading the notes.' },
      { say = 'Reviewing. ' },
      { tool_call = { id = 't1', title = 'Check the notes', kind = 'read', status = 'completed' } },
      { write = { path = 'notes.txt', content = 'reviewed notes\n' } },
      { wait_file = child_release },
      { say = 'Review done.' },
    } }),
  }, 'scripted')
  chat.send({ text = 'Get a review', session = session, agent = 'scripted' })

  -- While the helper runs: streamed, indented under the parent's call, open.
  wait_for("the helper's words and tool call", function()
    local text = chat_text(session)
    return text:find('Reviewing.', 1, true) ~= nil and text:find('Check the notes', 1, true) ~= nil
  end)
  local text = chat_text(session)
  out('chat while the helper runs:\n' .. text)
  expect(text:find('\n[tool] mcp Agent: in_progress\n    [agent] reviewer (helper): running\n', 1, true), 'not nested under the call: %s', text)
  expect(text:find('\n        [reasoning] 1 line (zo shows, zc hides)\n          Reading the notes.\n        Reviewing. \n        [tool] Check the notes (read): completed\n', 1, true), 'the activity: %s', text)
  expect(text:find('Asking the helper.', 1, true) < text:find('[agent] reviewer', 1, true), 'the order: %s', text)
  local bufnr = chat_buffer(session)
  local heading = line_of(bufnr, '%[agent%] reviewer')
  local reasoning = line_of(bufnr, '%[reasoning%] 1 line')
  expect(closed_at(session, heading) == -1, 'the running activity is folded')
  expect(closed_at(session, line_of(bufnr, '^        Reviewing')) == -1, 'the running words are folded')
  expect(closed_at(session, reasoning) == reasoning, "the helper's reasoning is not folded")
  expect(chat.status(session) == 'running turn 1', 'status %s', chat.status(session))

  -- The helper settles: folded under its heading; the root goes on.
  write_file(child_release, 'go')
  wait_for("the root's words after the helper", function()
    return chat_text(session):find('Thanks, helper.', 1, true) ~= nil
  end)
  text = chat_text(session)
  out('chat after the helper settled:\n' .. text)
  heading = line_of(bufnr, '%[agent%] reviewer')
  expect(text:find('\n    [agent] reviewer (helper): completed, 5 lines (zo shows, zc hides)\n', 1, true), 'the settled heading: %s', text)
  expect(text:find('[agent] reviewer', 1, true) < text:find('Thanks, helper.', 1, true), 'the order: %s', text)
  expect(closed_at(session, heading) == heading, 'the settled activity is not folded')
  expect(closed_at(session, line_of(bufnr, '^        wrote notes')) == heading, 'its last words are not in the fold')
  expect(closed_at(session, line_of(bufnr, 'Thanks, helper')) == -1, "the root's words are folded")
  -- The helper's settling did not end the root's turn.
  expect(chat.status(session) == 'running turn 1', 'status %s', chat.status(session))
  expect(text:find('## Turn 1 (running) · scripted', 1, true), 'the turn heading: %s', text)

  -- zo on the heading shows it (its reasoning stays folded), zc hides it.
  cursor_on(session, '%[agent%] reviewer')
  press('zo')
  expect(closed_at(session, heading) == -1, 'zo did not open the activity')
  expect(closed_at(session, line_of(bufnr, '^        wrote notes')) == -1, 'the words are still hidden')
  reasoning = line_of(bufnr, '%[reasoning%] 1 line')
  expect(closed_at(session, reasoning) == reasoning, "the helper's reasoning opened too")
  press('zc')
  expect(closed_at(session, heading) == heading, 'zc did not close the activity')

  -- The root settles.
  write_file(root_release, 'go')
  wait_for('the root turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  expect(chat_text(session):find('All done.', 1, true), 'the root: %s', chat_text(session))
  expect(read_file(root .. '/notes.txt') == 'reviewed notes\n', 'the helper did not write')

  -- A chat that did not watch the turn (Neovim started afresh) reads it
  -- from the server: as it showed live, the task folded under its call;
  -- in the fold, its conversation as the record keeps it.
  local live = as_shown(bufnr)
  out('chat live, as it shows:\n' .. live)
  reading_afresh(function(fresh)
    bufnr = fresh.open(session, 'current')
    text = buffer_text(bufnr)
    out('chat read again:\n' .. text)
    local again = as_shown(bufnr)
    expect(again == live, 'read back, the turn shows otherwise:\n%s', again)
    expect(text:find('\n        > Review the notes\n', 1, true), 'no task text: %s', text)
    expect(text:find('\n        Reviewing. \n', 1, true), "no conversation: %s", text)
    heading = line_of(bufnr, '%[agent%] reviewer')
    expect(vim.fn.foldclosed(heading) == heading, 'the task is not folded')
    vim.api.nvim_win_set_cursor(0, { heading, 0 })
    press('zo')
    expect(vim.fn.foldclosed(line_of(bufnr, '> Review the notes')) == -1, 'zo did not show the task')

    -- Rewind to before the turn, cancelled: the impact names the sub-agent
    -- beside the file it wrote.
    local impact_shown
    answering({
      ['mevedel.boundary'] = '^Before the prompt of turn 1',
      ['mevedel.confirm'] = function(_, _, on_choice)
        impact_shown = buffer_text(vim.fn.bufnr(lifecycle.impact_buffer_name))
        on_choice(nil)
      end,
    })
    vim.api.nvim_win_set_cursor(0, { line_of(bufnr, '^## Turn 1 '), 0 })
    fresh.rewind_here()
    out('impact:\n' .. tostring(impact_shown))
    expect(impact_shown and impact_shown:find('\n  notes.txt (pre-turn of turn 1: 15 bytes), changed by sub-agent reviewer\n', 1, true), 'impact %s', tostring(impact_shown))
    expect(read_file(root .. '/notes.txt') == 'reviewed notes\n', 'the cancelled rewind changed the file')
  end)
end)

-- The part of the text SHOWN from the root's Agent call to the heading of
-- the task outer under it, or nil.
local function outer_call(shown)
  local from = shown:find('\n[tool] mcp Agent: ', 1, true)
  local heading = '\n    [agent] outer (helper): completed, N lines (zo shows, zc hides)\n'
  local to = from and shown:find(heading, from, true)
  return to and shown:sub(from, to + #heading - 1)
end

test("subagents: a sub-agent's own sub-agent nests under its call, folded inside it; one called through no reported call shows after the turn's text under its name; read back, the call shows as live, the inner task in the outer's fold", function()
  local session = new_session('Nvim nested sub-agents')
  configure({
    scripted = agent({ {
      { say = 'Asking. ' },
      { mcp_call = { id = 'call-outer', tool = 'Agent', arguments = { name = 'outer', agent = 'helper', prompt = 'Delegate further' } } },
      -- Called without reporting an ACP tool call: no call to nest under.
      { mcp_call = { tool = 'Agent', arguments = { name = 'quiet', agent = 'searcher', prompt = 'Say little' } } },
      { say = 'All answered.' },
    } }),
    helper = agent({ {
      { tool_call = { id = 'look', title = 'Look around', kind = 'read', status = 'completed' } },
      { say = 'Outer at work. ' },
      { mcp_call = { id = 'call-inner', tool = 'Agent', arguments = { name = 'inner', agent = 'searcher', prompt = 'Go deeper' } } },
      { say = 'Outer done.' },
    } }),
    searcher = agent({ { { say = 'Inner found it.' } }, { { say = 'Inner found it.' } } }),
  }, 'scripted')
  chat.send({ text = 'Delegate twice', session = session, agent = 'scripted' })
  wait_for('the turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  local text = chat_text(session)
  out('chat:\n' .. text)
  expect(text:find('\n[tool] mcp Agent: completed\n    mcp Agent: mcp Agent: Inner found it.Outer done.\n    [agent] outer (helper): completed, 7 lines (zo shows, zc hides)\n'
    .. '        [tool] Look around (read): completed\n        Outer at work. \n        [tool] mcp Agent: completed\n            mcp Agent: Inner found it.\n'
    .. '            [agent] outer/inner (searcher): completed, 1 line (zo shows, zc hides)\n                Inner found it.\n        mcp Agent: Inner found it.Outer done.\n', 1, true),
    'outer/inner is not nested in outer under its call: %s', text)
  expect(text:find('Outer done.\n[agent] quiet (searcher): completed, 1 line (zo shows, zc hides)\n    Inner found it.\nmcp Agent: Inner found it.All answered.', 1, true),
    'quiet is not after the text so far: %s', text)
  local bufnr = chat_buffer(session)
  local outer = line_of(bufnr, '^    %[agent%] outer ')
  local inner = line_of(bufnr, '%[agent%] outer/inner')
  local quiet = line_of(bufnr, '^%[agent%] quiet')
  expect(closed_at(session, inner) == outer and closed_at(session, inner + 1) == outer, 'outer/inner is not folded in outer')
  expect(closed_at(session, quiet) == quiet and closed_at(session, quiet + 1) == quiet, 'quiet is not folded')
  local live = as_shown(bufnr)
  expect(outer_call(live), 'no outer under the call: %s', live)
  -- zo on outer: its activity shows, outer/inner stays folded; zo on it.
  cursor_on(session, '^    %[agent%] outer ')
  press('zo')
  expect(closed_at(session, outer) == -1 and closed_at(session, line_of(bufnr, 'Look around')) == -1, 'zo did not open outer')
  expect(closed_at(session, inner) == inner and closed_at(session, inner + 1) == inner, 'outer/inner opened with outer')
  cursor_on(session, '%[agent%] outer/inner')
  press('zo')
  expect(closed_at(session, inner + 1) == -1, 'zo did not open outer/inner')

  -- Read back from the server by a chat that did not watch the turn: the
  -- call as it showed live. (Not quiet's place: the turn records the
  -- root's words around it as one response after its task.)
  reading_afresh(function(fresh)
    bufnr = fresh.open(session, 'current')
    text = buffer_text(bufnr)
    out('chat read again:\n' .. text)
    local again = as_shown(bufnr)
    expect(outer_call(again) == outer_call(live), 'read back, the call shows otherwise:\n%s', again)
    -- In outer's fold, after its conversation, outer/inner's task, folded.
    local at = {
      text:find('\n    [agent] outer (helper): completed, ', 1, true),
      text:find('\n        > Delegate further\n', 1, true),
      text:find('\n        [agent] outer/inner (searcher): completed, ', 1, true),
      text:find('\n            > Go deeper\n', 1, true),
    }
    expect(at[1] and at[2] and at[3] and at[4] and at[1] < at[2] and at[2] < at[3] and at[3] < at[4],
      'outer/inner is not in outer after its conversation: %s', text)
    outer = line_of(bufnr, '^    %[agent%] outer ')
    inner = line_of(bufnr, '%[agent%] outer/inner')
    expect(vim.fn.foldclosed(inner) == outer, 'outer/inner is not folded in outer')
    vim.api.nvim_win_set_cursor(0, { outer, 0 })
    press('zo')
    expect(vim.fn.foldclosed(inner) == inner, 'outer/inner opened with outer')
  end)
end)

test("subagents: a task cancelled with its caller's turn says why under its closed fold, read back as live", function()
  local session = new_session('Nvim interrupted sub-agent')
  configure({
    scripted = agent({ {
      { mcp_call = { id = 'call-slow', tool = 'Agent', arguments = { name = 'slow', agent = 'helper', prompt = 'Take your time' } } },
      { wait_cancel = 60 },
      { say = 'never said' },
    } }),
    helper = agent({ { { say = 'Started. ' }, { wait_cancel = 60 }, { say = 'never said either' } } }),
  }, 'scripted')
  chat.send({ text = 'Delegate something slow', session = session, agent = 'scripted' })
  wait_for("the helper's words", function()
    return chat_text(session):find('        Started.', 1, true) ~= nil
  end)
  chat.cancel(session)
  wait_for('the turn to settle interrupted', function()
    return chat.status(session) == 'idle (turn 1 interrupted)'
  end)
  local text = chat_text(session)
  out('chat after the cancel:\n' .. text)
  expect(text:find("\n    [agent] slow (helper): interrupted, 1 line (zo shows, zc hides)\n        Started. \n        Interrupted: cancelled with its caller's turn.\n", 1, true),
    'no reason under the sub-agent: %s', text)
  expect(text:find('\nInterrupted: cancelled by the user.\n', 1, true), "the turn's reason: %s", text)
  expect(not text:find('never said', 1, true), 'the cancelled turn went on: %s', text)
  local bufnr = chat_buffer(session)
  local heading = line_of(bufnr, '%[agent%] slow')
  expect(closed_at(session, heading) == heading, 'the settled activity is not folded')
  expect(closed_at(session, line_of(bufnr, "^        Interrupted: cancelled with its caller's turn")) == -1, 'the reason is folded away')

  -- Read back by a chat that did not watch the turn: as it showed live,
  -- why said as often.
  local live, why = as_shown(bufnr), "cancelled with its caller's turn"
  reading_afresh(function(fresh)
    local again_bufnr = fresh.open(session, 'current')
    local again_text = buffer_text(again_bufnr)
    out('chat read again:\n' .. again_text)
    local again = as_shown(again_bufnr)
    expect(again == live, 'read back, the turn shows otherwise:\n%s', again)
    expect(count(again_text, why) == count(text, why), 'why is said %d times, live %d: %s', count(again_text, why), count(text, why), again_text)
  end)
end)

test('subagents: a failed task says why under its closed fold, live and read back from the server as it showed live, once', function()
  local session = new_session('Nvim failed sub-agent')
  configure({
    scripted = agent({ {
      { mcp_call = { id = 'call-broken', tool = 'Agent', arguments = { name = 'broken', agent = 'helper', prompt = 'Try this' } } },
      { say = 'Carried on.' },
    } }),
    helper = agent({ { { say = 'Trying. ' }, { error = { code = -32603, message = 'the model is overloaded' } } } }),
  }, 'scripted')
  chat.send({ text = 'Delegate to a failing helper', session = session, agent = 'scripted' })
  wait_for('the turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  -- Under its call the heading says how it ended; after its fold, why.
  local reason = 'failed the prompt: the model is overloaded'
  local why = '[errored] ' .. reason
  local function said(text)
    local call = text:find('\n[tool] mcp Agent: failed\n', 1, true)
    local heading = text:find('\n    [agent] broken (helper): errored, ', 1, true)
    local after = text:find('\n        ' .. why .. '\n', 1, true)
    return call and heading and after and call < heading and heading < after
  end
  local text = chat_text(session)
  out('chat live:\n' .. text)
  expect(said(text), 'no reason under the failed sub-agent: %s', text)
  local bufnr = chat_buffer(session)
  local heading = line_of(bufnr, '%[agent%] broken')
  expect(closed_at(session, heading) == heading, 'the settled activity is not folded')
  expect(closed_at(session, line_of(bufnr, vim.pesc(why))) == -1, 'the reason is folded away')
  local live, live_text = as_shown(bufnr), text

  -- A chat that did not watch the turn (Neovim started afresh) reads it
  -- from the server: as it showed live, the activity folded.
  reading_afresh(function(fresh)
    bufnr = fresh.open(session, 'current')
    text = buffer_text(bufnr)
    out('chat read again:\n' .. text)
    local again = as_shown(bufnr)
    expect(again == live, 'read back, the turn shows otherwise:\n%s', again)
    expect(said(text), 'no reason under the task read back: %s', text)
    expect(not text:find('did not complete', 1, true), 'the outcome is not named: %s', text)
    -- Unfolded, the reason is said as often as live (once for the task; the
    -- call's answer and the root's words say it too).
    expect(count(text, reason) == count(live_text, reason), 'the reason is said %d times, live %d: %s',
      count(text, reason), count(live_text, reason), text)
    expect(text:find('\n        > Try this\n', 1, true), 'no conversation: %s', text)
    heading = line_of(bufnr, '%[agent%] broken')
    expect(vim.fn.foldclosed(heading) == heading, 'the task is not folded')
    expect(vim.fn.foldclosed(line_of(bufnr, vim.pesc(why))) == -1, 'the reason is folded away')
  end)
end)

-- The parent calls Agent twice at once. The first task ends once the
-- second one started (its call matched, so recorded), the second after
-- the first one's answer: the first task is recorded while both calls
-- wait for theirs (the newest such call is the second one).
test('subagents: two Agent calls made at once each show their own task under them, live and read back', function()
  local session = new_session('Nvim parallel sub-agents')
  local answered = 'first-answered-' .. vim.fn.getpid()
  local started = 'second-started-' .. vim.fn.getpid()
  configure({
    scripted = agent({ {
      { say = 'Asking both. ' },
      { together = {
        {
          { mcp_call = { id = 'call-first', tool = 'Agent', arguments = { name = 'first', agent = 'helper', prompt = 'First task' } } },
          { write = { path = answered, content = 'yes\n' } },
        },
        { { mcp_call = { id = 'call-second', tool = 'Agent', arguments = { name = 'second', agent = 'searcher', prompt = 'Second task' } } } },
      } },
      { say = 'Both answered.' },
    } }),
    helper = agent({ { { wait_file = started }, { say = 'First done.' } } }),
    searcher = agent({ { { write = { path = started, content = 'yes\n' } }, { wait_file = answered }, { say = 'Second done.' } } }),
  }, 'scripted')
  chat.send({ text = 'Delegate two at once', session = session, agent = 'scripted' })
  wait_for('the turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  -- A call whose answer is ANSWER, with the task AGENT folded under it.
  local function under(shown, answer, label)
    return shown:find('\n[tool] mcp Agent: completed\n    mcp Agent: ' .. answer .. '\n    [agent] ' .. label .. ': completed, ', 1, true)
  end
  local text = chat_text(session)
  out('chat live:\n' .. text)
  local live = as_shown(chat_buffer(session))
  expect(under(live, 'First done.', 'first (helper)'), 'first is not under its call: %s', live)
  expect(under(live, 'wrote ' .. started .. 'Second done.', 'second (searcher)'), 'second is not under its call: %s', live)
  reading_afresh(function(fresh)
    local bufnr = fresh.open(session, 'current')
    out('chat read again:\n' .. buffer_text(bufnr))
    local again = as_shown(bufnr)
    expect(under(again, 'First done.', 'first (helper)'), 'read back, first is not under its call: %s', again)
    expect(under(again, 'wrote ' .. started .. 'Second done.', 'second (searcher)'), 'read back, second is not under its call: %s', again)
    expect(again == live, 'read back, the turn shows otherwise:\n%s', again)
  end)
end)

H.finish()
