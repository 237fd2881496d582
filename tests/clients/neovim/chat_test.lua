-- Headless Neovim tests of the agent chat (clients/neovim/lua/mevedel/chat.lua)
-- against the real server driving the scripted ACP agent
-- (tests/agents/scripted_agent.py).
--
-- Run by tests/clients/test_neovim.py with MEVEDEL_TEST_WORKSPACE,
-- MEVEDEL_TEST_DOCUMENT, MEVEDEL_LSP_COMMAND and MEVEDEL_TEST_AGENT_COMMAND
-- (JSON arrays) and MEVEDEL_TEST_SCRATCH (where the agent scripts go). On
-- Neovim 0.11+ the server is started the 0.11 way (lsp/mevedel.lua and
-- vim.lsp.enable), on older versions with require('mevedel').setup().
-- Prints one PASS/FAIL line per test; exits non-zero when any failed.

local H = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'agent_harness.lua')
local root, document, command, agent_command, scratch, TIMEOUT = H.root, H.document, H.command, H.agent_command, H.scratch, H.TIMEOUT
local native, out, test, wait_for, expect, read_file = H.native, H.out, H.test, H.wait_for, H.expect, H.read_file
local write_file, notifications, notified, mevedel, sessions, lifecycle = H.write_file, H.notifications, H.notified, H.mevedel, H.sessions, H.lifecycle
local chat, mevedel_client, open_document, server_call, buffer_text = H.chat, H.mevedel_client, H.open_document, H.server_call, H.buffer_text
local agent, configure, real_select, asked, answering, selected = H.agent, H.configure, H.real_select, H.asked, H.answering, H.selected
local chat_buffer, chat_text, line_of, turns_of, cursor_on, press = H.chat_buffer, H.chat_text, H.line_of, H.turns_of, H.cursor_on, H.press
local new_session = H.new_session

-- Tests ------------------------------------------------------------------------------

test('setup: the server starts for a text buffer (' .. (native and 'vim.lsp.enable' or 'setup()') .. ')', function()
  open_document()
  local client = mevedel_client(0)
  expect(client.config.root_dir == root, 'root_dir %s, expected %s', tostring(client.config.root_dir), root)
  if native then
    expect(vim.lsp.config.mevedel ~= nil, 'no vim.lsp.config entry')
    expect(client.config.handlers['mevedel/turn/didUpdate'] ~= nil, 'the entry has no didUpdate handler')
  end
  -- Virtual documents open, through the same server.
  vim.cmd('MevedelRead mevedel://')
  expect(mevedel.is_virtual_uri(vim.api.nvim_buf_get_name(0)), 'opened %s', vim.api.nvim_buf_get_name(0))
  expect(buffer_text():find('mevedel://architecture.md', 1, true), 'listing is %s', buffer_text())
  local all = vim.lsp.get_clients and vim.lsp.get_clients({ name = 'mevedel' }) or vim.lsp.get_active_clients()
  expect(#all == 1, '%d servers run', #all)
end)

local streaming, chatty
test('chat: two agents are offered, the pick is remembered; text streams into the chat while the turn runs; cancel', function()
  streaming = new_session('Nvim streaming')
  configure({
    scripted = agent({
      { { say = 'Streaming one.' }, { wait_cancel = 60 }, { say = 'never said' } },
      { { say = 'Second answer.' } },
    }),
    other = agent({ { { say = 'the wrong agent' } } }),
  }, 'other')
  answering({ ['mevedel.agent'] = '^scripted' })
  vim.cmd('MevedelPrompt Tell me slowly')
  local offered = selected('mevedel.agent')
  expect(offered and #offered.formatted == 2, 'agents offered: %s', vim.inspect(asked))
  expect(offered.formatted[1]:find('^other %(default%)'), 'the default first: %s', vim.inspect(offered.formatted))
  local bufnr = chat_buffer(streaming)
  expect(bufnr and vim.fn.bufwinid(bufnr) >= 0, 'the chat did not open')
  wait_for('the first words while the turn runs', function()
    return chat_text(streaming):find('Streaming one.', 1, true) ~= nil and chat.status(streaming) == 'running turn 1'
  end)
  -- Observed mid-turn: the server still has the turn in flight.
  expect(turns_of(streaming)[1].state == 'in-flight', 'the turn is not in flight')
  local text = chat_text(streaming)
  out('chat while running:\n' .. text)
  expect(text:find('\n> Tell me slowly\n', 1, true), 'the prompt is not shown: %s', text)
  expect(text:find('## Turn 1 (running) · scripted', 1, true), 'no running turn heading: %s', text)
  expect(text:find('agent: scripted | running turn 1 |', 1, true), 'no status line: %s', text)
  expect(vim.b[bufnr].mevedel_chat_status == 'running turn 1', 'b:mevedel_chat_status is %s', tostring(vim.b[bufnr].mevedel_chat_status))

  vim.api.nvim_set_current_win(vim.fn.bufwinid(bufnr))
  expect(vim.fn.maparg(mevedel.options().chat.keys.cancel, 'n') ~= '', 'no cancel key in the chat')
  vim.cmd('MevedelCancel')
  wait_for('the turn to settle interrupted', function()
    return chat.status(streaming) == 'idle (turn 1 interrupted)'
  end)
  text = chat_text(streaming)
  expect(text:find('## Turn 1 (interrupted)', 1, true), 'chat %s', text)
  -- Why, in the server's words.
  expect(text:find('\nInterrupted: cancelled by the user.\n', 1, true), 'chat %s', text)
  expect(not text:find('never said', 1, true), 'the cancelled turn went on: %s', text)
  expect(turns_of(streaming)[1].state == 'interrupted', 'the server has %s', turns_of(streaming)[1].state)

  -- The same session, from the chat's prompt key: the agent is not asked
  -- again.
  answering({})
  vim.api.nvim_set_current_win(vim.fn.bufwinid(bufnr))
  press(mevedel.options().chat.keys.prompt)
  expect(vim.api.nvim_buf_get_name(0):find('mevedel prompt$'), 'the prompt key opened %s', vim.api.nvim_buf_get_name(0))
  expect(vim.wo.statusline:find('mevedel prompt to ' .. streaming, 1, true), 'the prompt buffer says %s', vim.wo.statusline)
  vim.cmd('stopinsert')
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'And now?' })
  press('<CR>')
  wait_for('the second answer in the chat', function()
    return chat_text(streaming):find('Second answer.', 1, true) ~= nil and chat.status(streaming) == 'idle (turn 2 completed)'
  end)
  expect(chat_text(streaming):find('## Turn 2 (completed) · scripted\n> And now?\n', 1, true), 'chat %s', chat_text(streaming))
  expect(vim.b.mevedel_chat_session == streaming, 'after sending, the cursor is in %s', vim.api.nvim_buf_get_name(0))
  expect(#asked == 0, 'asked again: %s', vim.inspect(asked))
end)

test('chat: a permission question offers the agent options; the decision, tool call, diff, plan and folded reasoning show', function()
  chatty = new_session('Nvim permission')
  write_file(root .. '/chat.txt', 'original\n')
  local options = { { id = 'allow', name = 'Allow once', kind = 'allow_once' }, { id = 'reject', name = 'Reject', kind = 'reject_once' } }
  configure({
    scripted = agent({ {
      { think = 'Let me look.\nThen edit.' },
      { say = 'Before asking. ' },
      { plan = { { content = 'edit chat.txt', status = 'in_progress', priority = 'high' } } },
      { tool_call = { id = 'c1', title = 'Write chat.txt', kind = 'edit', status = 'pending' } },
      { permission = { tool_call_id = 'c1', title = 'Write chat.txt', options = options } },
      { write = { path = 'chat.txt', content = 'agent v1\n' } },
      { tool_update = { id = 'c1', status = 'completed', text = 'written', diff = { path = 'chat.txt', old = 'original\n', new = 'agent v1\n' } } },
      { terminal = { command = 'sh', args = { '-c', 'ln -s doc.txt link.txt' } } },
      { say = ' Done.' },
    } }),
  }, nil)
  local during
  answering({
    ['mevedel.permission'] = function(items, formatted, on_choice)
      -- The server may send the question before the live batch holding the
      -- text before it: the chat shows that text while the question waits.
      wait_for('the text before the question, while it waits', function()
        return chat_text(chatty):find('Before asking.', 1, true) ~= nil
      end)
      during = chat_text(chatty)
      on_choice(items[1])
    end,
  })
  -- A prompt of two lines, written in the prompt buffer and sent with :w.
  vim.cmd('MevedelPrompt')
  expect(vim.api.nvim_buf_get_name(0):find('mevedel prompt$'), 'not in the prompt buffer: %s', vim.api.nvim_buf_get_name(0))
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'Please edit', 'chat.txt' })
  vim.cmd('write')
  wait_for('the turn to settle', function()
    return chat.status(chatty) == 'idle (turn 1 completed)'
  end)
  expect(selected('mevedel.agent') == nil, 'one agent, yet asked: %s', vim.inspect(asked))
  local question = selected('mevedel.permission')
  expect(question and vim.deep_equal(question.formatted, { 'Allow once', 'Reject' }), 'question %s', vim.inspect(question))
  expect(question.prompt:find('scripted asks permission: Write chat.txt', 1, true), 'question %s', question.prompt)
  expect(during and during:find('Before asking.', 1, true), 'the text before the question was not shown: %s', tostring(during))
  expect(during:find('(waiting for your answer)', 1, true), 'the question was not shown as pending: %s', during)
  expect(during:find('## Turn 1 (waiting for your answer) · scripted', 1, true), 'the turn is not shown waiting: %s', during)
  expect(read_file(root .. '/chat.txt') == 'agent v1\n', 'the agent did not write')

  local bufnr = chat_buffer(chatty)
  local text = buffer_text(bufnr)
  out('chat after the turn:\n' .. text)
  expect(text:find('\n> Please edit\n> chat.txt\n', 1, true), 'the prompt: %s', text)
  expect(text:find('[permission] Write chat.txt -> Allow once (allowed)', 1, true), 'no decision: %s', text)
  expect(text:find('[tool] Write chat.txt (edit): completed\n    written\n    --- chat.txt\n    +++ chat.txt\n', 1, true), 'tool call: %s', text)
  expect(text:find('\n    -original\n    +agent v1\n', 1, true), 'no diff: %s', text)
  expect(text:find('[plan]\n    - [~] edit chat.txt', 1, true), 'no plan: %s', text)
  expect(text:find('Before asking.', 1, true) and text:find('Done.', 1, true), 'no response: %s', text)
  local win = vim.fn.bufwinid(bufnr)
  vim.api.nvim_set_current_win(win)
  local reasoning = line_of(bufnr, '^%[reasoning%] 2 lines')
  expect(reasoning, 'no reasoning: %s', text)
  expect(vim.fn.foldclosed(reasoning) == reasoning and vim.fn.foldclosedend(reasoning) == reasoning + 2, 'the reasoning is not folded: %d..%d', vim.fn.foldclosed(reasoning), vim.fn.foldclosedend(reasoning))
  expect(vim.fn.foldclosed(reasoning + 3) == -1, 'the response is folded too')

  -- Read again from the server (as after a restart): the recorded turn.
  chat.reload(chatty)
  wait_for('the reloaded chat', function()
    return buffer_text(bufnr):find('[permission] Write chat.txt -> Allow once (allowed)', 1, true) ~= nil
  end)
end)

test('chat: Esc at a permission question refuses it at once and the turn goes on', function()
  local session = new_session('Nvim dismissed')
  local options = { { id = 'allow', name = 'Allow once', kind = 'allow_once' }, { id = 'reject', name = 'Reject', kind = 'reject_once' } }
  mevedel.set_settings({
    agents = { scripted = agent({ { { permission = { tool_call_id = 'c3', title = 'Run rm', options = options } }, { say = 'went on' } } }) },
    permissionTimeoutSeconds = 600,
  })
  answering({ ['mevedel.permission'] = function(_, _, on_choice)
    on_choice(nil)
  end })
  chat.send({ text = 'Remove it', session = session })
  wait_for('the turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  local text = chat_text(session)
  expect(text:find('[permission] Run rm -> refused: declined (refused)', 1, true), 'chat %s', text)
  expect(text:find('permission: selected reject', 1, true), 'the agent was not refused: %s', text)
end)

if vim.fn.has('nvim-0.10') == 1 then
  test('chat: a picker that answers the permission question later still allows the call (0.10+)', function()
    local session = new_session('Nvim late picker')
    local options = { { id = 'allow', name = 'Allow once', kind = 'allow_once' }, { id = 'reject', name = 'Reject', kind = 'reject_once' } }
    configure({ scripted = agent({ { { permission = { tool_call_id = 'c9', title = 'Run make', options = options } } } }) }, nil)
    answering({
      ['mevedel.permission'] = function(items, _, on_choice)
        vim.defer_fn(function()
          on_choice(items[1])
        end, 200)
      end,
    })
    vim.cmd('MevedelPrompt build it')
    wait_for('the turn to settle', function()
      return chat.status(session) == 'idle (turn 1 completed)'
    end)
    local text = chat_text(session)
    expect(text:find('[permission] Run make -> Allow once (allowed)', 1, true), 'chat %s', text)
    expect(text:find('permission: selected allow', 1, true), 'the agent was not allowed: %s', text)
  end)
end

test('chat: rewind from the chat shows the impact (files, gaps) before confirming; the file is back', function()
  local bufnr = chat.open(chatty)
  expect(bufnr == chat_buffer(chatty), 'another chat buffer opened')
  cursor_on(chatty, '^## Turn 1 ')
  -- What the server will report (a prepare changes nothing).
  local expected = server_call('mevedel/rewind/prepare', { sessionId = chatty, turn = 1, boundary = 'before' })
  local impact_shown, impact_window
  answering({
    ['mevedel.boundary'] = '^Before the prompt of turn 1',
    ['mevedel.confirm'] = function(items, _, on_choice)
      impact_shown = buffer_text(vim.fn.bufnr(lifecycle.impact_buffer_name))
      impact_window = vim.fn.bufwinid(vim.fn.bufnr(lifecycle.impact_buffer_name))
      on_choice(items[1])
    end,
  })
  press(mevedel.options().chat.keys.rewind)
  out('impact:\n' .. tostring(impact_shown))
  expect(impact_shown, 'no confirmation: %s', vim.inspect(asked))
  expect(impact_window >= 0, 'the impact was not in a window while asking')
  expect(impact_shown:find(string.format('Rewind %s to before the prompt of turn 1: 0 turns kept.', chatty), 1, true), 'impact %s', impact_shown)
  -- The link the agent's shell command made is deleted, not a gap.
  expect(impact_shown:find('\nRestores 2 files:\n  chat.txt (pre-turn of turn 1: 9 bytes)\n  link.txt (pre-turn of turn 1: delete)', 1, true), 'the restored file is not named: %s', impact_shown)
  for _, gap in ipairs(expected.gaps or {}) do
    expect(impact_shown:find(string.format('\n  %s (turn %d: %s)', gap.path, gap.turn, gap.reason), 1, true), 'gap %s not shown: %s', gap.path, impact_shown)
  end
  if mevedel.present(expected.agentHistory) then
    expect(impact_shown:find('\nAgent: ' .. expected.agentHistory, 1, true), 'agentHistory not shown: %s', impact_shown)
  end
  local impact = lifecycle.last_impact
  expect(vim.deep_equal(selected('mevedel.confirm').opts.impact, vim.list_extend({ impact.summary, '' }, impact.details)), 'the question does not carry the impact')
  wait_for('the file to be back', function()
    return read_file(root .. '/chat.txt') == 'original\n'
  end)
  wait_for('the chat to drop the turn', function()
    return not buffer_text(bufnr):find('## Turn 1', 1, true)
  end)
  expect(#turns_of(chatty) == 0, 'the server kept %d turns', #turns_of(chatty))
  expect(buffer_text(bufnr):find('No turns yet.', 1, true), 'chat %s', buffer_text(bufnr))

  -- Redo from the chat brings it back.
  answering({ ['mevedel.redo'] = '^1 turn', ['mevedel.confirm'] = '^Redo$' })
  cursor_on(chatty, '^# mevedel chat')
  press(mevedel.options().chat.keys.redo)
  wait_for('the turn to come back', function()
    return buffer_text(bufnr):find('## Turn 1 (completed)', 1, true) ~= nil
  end)
  expect(read_file(root .. '/chat.txt') == 'agent v1\n', 'redo did not restore the file')
end)

test('chat: the capture gaps and the agent history of an impact are shown', function()
  -- Capture gaps when the server names them; agentHistory when the
  -- server sends it.
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  lifecycle.rewind(1, 'before', chatty)
  local impact = lifecycle.last_impact
  local text = table.concat(vim.list_extend({ impact.summary, '' }, impact.details), '\n')
  out('impact:\n' .. text)
  local prepared = server_call('mevedel/rewind/prepare', { sessionId = chatty, turn = 1, boundary = 'before' })
  for _, gap in ipairs(prepared.gaps or {}) do
    expect(text:find(string.format('  %s (turn %d: %s)', gap.path, gap.turn, gap.reason), 1, true), 'gap %s not shown: %s', gap.path, text)
  end
  if mevedel.present(prepared.agentHistory) then
    expect(text:find('Agent: ' .. prepared.agentHistory, 1, true), 'agentHistory not shown: %s', text)
  end
  -- Described offline: every part an impact can have.
  local described = lifecycle.describe_rewind({
    sessionId = 's1',
    boundary = 'before',
    turn = 2,
    keptTurns = 1,
    discarded = { { turn = 2, preview = 'Edit it' } },
    restores = {
      { path = 'a.txt', state = 'present', checkpoint = 'pre-turn', turn = 2, changes = true, size = 3, action = 'restore' },
      { path = 'run.sh', state = 'present', checkpoint = 'pre-turn', turn = 2, changes = true, size = 9, action = 'chmod 755' },
    },
    gaps = { { path = 'big.bin', turn = 2, reason = 'larger than the snapshot limit' } },
    externallyModified = {},
    git = { status = 'no-repository' },
    agentHistory = "the agent's own history will be detached; the next prompt continues from an excerpt",
    token = 't',
  })
  local lines = table.concat(described.details, '\n')
  expect(lines:find('Restores 2 files:\n  a.txt (pre-turn of turn 2: 3 bytes)\n  run.sh (pre-turn of turn 2: chmod 755)', 1, true), 'details %s', lines)
  expect(lines:find('Capture gaps (these files may have changed and are NOT restored):\n  big.bin (turn 2: larger than the snapshot limit)', 1, true), 'details %s', lines)
  expect(lines:find("\nAgent: the agent's own history will be detached; the next prompt continues from an excerpt", 1, true), 'details %s', lines)
  local fork = lifecycle.describe_fork({ sessionId = 's1', response = { turn = 1, preview = 'p' }, turns = 1, agentHistory = 'detached', token = 't' })
  expect(vim.tbl_contains(fork.details, lifecycle.fork_files_note), 'fork %s', vim.inspect(fork))
  expect(vim.tbl_contains(fork.details, 'Agent: detached'), 'fork %s', vim.inspect(fork))
  expect(vim.tbl_contains(lifecycle.describe_redo({ sessionId = 's', commonTurns = 0, restored = {}, discarded = {}, agentHistory = 'detached' }).details, 'Agent: detached'), 'redo')
  expect(vim.tbl_contains(lifecycle.describe_save_as({ sessionId = 's', name = 'n', turns = 1, segments = 1, chats = 1, artifacts = 1, size = 1, agentHistory = 'detached' }).details, 'Agent: detached'), 'save as')

  -- With Neovim's own vim.ui.select, the question itself lists the impact.
  vim.ui.select = real_select
  local listed
  local real_inputlist = vim.fn.inputlist
  vim.fn.inputlist = function(lines_)
    listed = lines_
    return 2
  end
  local ok, err = pcall(lifecycle.confirm, described, function() end)
  vim.fn.inputlist = real_inputlist
  expect(ok, 'confirm failed: %s', tostring(err))
  local asked_text = table.concat(listed or {}, '\n')
  expect(asked_text:find('big.bin (turn 2: larger than the snapshot limit)', 1, true), 'the question %s', asked_text)
  expect(asked_text:find("Agent: the agent's own history", 1, true) and asked_text:find('\n1: Rewind\n2: Cancel$'), 'the question %s', asked_text)
end)

test('chat: fork from the chat says the files stay; the fork opens in its own chat with the agent', function()
  vim.api.nvim_set_current_win(vim.fn.bufwinid(chat_buffer(streaming)) >= 0 and vim.fn.bufwinid(chat_buffer(streaming)) or vim.api.nvim_get_current_win())
  chat.open(streaming, 'current')
  cursor_on(streaming, '^## Turn 2 ')
  local forked
  answering({ ['mevedel.confirm'] = '^Fork$' })
  chat.fork_here(false, function(result)
    forked = result
  end)
  expect(forked and forked.sourceId == streaming, 'forked %s', vim.inspect(forked))
  expect(vim.tbl_contains(lifecycle.last_impact.details, lifecycle.fork_files_note), 'impact %s', vim.inspect(lifecycle.last_impact))
  local child = forked.session.sessionId
  expect(vim.b.mevedel_chat_session == child, 'the child chat is not shown: %s', tostring(vim.b.mevedel_chat_session))
  local text = buffer_text(0)
  expect(text:find('Second answer.', 1, true) and text:find('agent: scripted |', 1, true), 'child chat %s', text)
  expect(chat.agent_for(child) == 'scripted', 'the child forgot the agent')
end)

test('chat: a range quotes the lines and attaches the file; --attach attaches it', function()
  local session = new_session('Nvim attachments')
  configure({ scripted = agent({ { { echo_prompt = true } } }) }, nil)
  open_document()
  vim.cmd('1,2MevedelPrompt Explain these')
  wait_for('the first echo', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  local text = chat_text(session)
  out('attachments:\n' .. text)
  expect(text:find('> Explain these\n> \n> Lines 1-2 of doc.txt:\n> ```text\n> See work://shared/notes.md for the notes.\n> Plans live in work://shared/plans/ now.\n> ```\n> [attached doc.txt]', 1, true), 'the prompt %s', text)
  -- The agent got the file as a resource, and the quoted lines.
  expect(text:find('[resource file://' .. document .. ']', 1, true), 'no resource in the echo: %s', text)
  open_document()
  vim.cmd('MevedelPrompt --attach Summarize')
  wait_for('the second echo', function()
    return chat.status(session) == 'idle (turn 2 completed)'
  end)
  text = chat_text(session)
  local second = text:sub((text:find('## Turn 2', 1, true)))
  expect(second:find('> Summarize\n> [attached doc.txt]', 1, true), 'the prompt %s', second)
  expect(second:find('[resource file://' .. document .. ']', 1, true) and not second:find('Lines 1-2', 1, true), 'the echo %s', second)
end)

test('chat: the chat read again while its turn settles keeps the turn as watched', function()
  -- The chat is read again (as on a session/didChange) while a turn runs,
  -- and while its listing waits to be read the turn settles here and the
  -- prompt's answer reads the chat again: the older listing (turn in
  -- flight) must not take the settled turn back, nor put the server's
  -- copy (no agent, no attachments) in place of the one watched.
  local session = new_session('Nvim reload race')
  configure({ scripted = agent({ { { say = 'Watched live.' }, { wait_cancel = 60 } } }) }, nil)
  local answered
  chat.send({ text = 'Run until cancelled', session = session, attachments = { 'doc.txt' }, on_done = function(result)
    answered = result
  end })
  wait_for('the turn to run', function()
    return chat_text(session):find('Watched live.', 1, true) ~= nil and chat.status(session) == 'running turn 1'
  end)
  local real_request = mevedel.request
  local listed
  mevedel.request = function(client, method, params)
    local result, err, data = real_request(client, method, params)
    if listed == nil and method == 'mevedel/turn/list' then
      listed = result and result.turns[1] and result.turns[1].state or tostring(err)
      -- Before this answer is read: the turn is cancelled, settles, and
      -- its prompt is answered (which reads the chat again).
      chat.cancel(session)
      wait_for('the prompt answered while the listing waits', function()
        return answered ~= nil
      end)
    end
    return result, err, data
  end
  local ok, reloaded = pcall(chat.reload, session)
  mevedel.request = real_request
  expect(ok and reloaded == true, 'reload: %s', tostring(reloaded))
  expect(listed == 'in-flight', 'the listing said %s', tostring(listed))
  wait_for('the chat to show the settled turn', function()
    return chat_text(session):find('## Turn 1 (interrupted) · scripted\n> Run until cancelled\n> [attached doc.txt]\n', 1, true) ~= nil
  end)
  vim.wait(100) -- a render still scheduled would show here
  local text = chat_text(session)
  expect(text:find('## Turn 1 (interrupted) · scripted', 1, true) and not text:find('in flight', 1, true), 'chat %s', text)
  expect(chat.status(session) == 'idle (turn 1 interrupted)', 'status %s', chat.status(session))
end)

test('chat: refused prompts and a failed turn show the error and what to do', function()
  local session = new_session('Nvim refusals')
  configure(vim.empty_dict(), nil)
  for key in pairs(notifications) do
    notifications[key] = nil
  end
  local refusal
  chat.send({ text = 'hello', session = session, on_done = function(result, err, data)
    refusal = { result = result, err = err, data = data }
  end })
  wait_for('the refusal', function()
    return refusal ~= nil
  end)
  expect(refusal.data and refusal.data.kind == 'agent-not-configured', 'refusal %s', vim.inspect(refusal))
  wait_for('the refusal in the chat', function()
    return chat_text(session):find('## Prompt refused: agent-not-configured', 1, true) ~= nil
  end)
  expect(chat_text(session):find('what to do: add the agent to the `agents` setting', 1, true), 'chat %s', chat_text(session))
  expect(notified('the prompt was refused (agent-not-configured)'), 'notifications %s', vim.inspect(notifications))

  configure({ ghost = { command = { 'mevedel-no-such-agent-program' } } }, 'ghost')
  refusal = nil
  chat.send({ text = 'hello', session = session, on_done = function(result, err, data)
    refusal = { result = result, err = err, data = data }
  end })
  wait_for('the second refusal', function()
    return refusal ~= nil
  end)
  wait_for('the refusal in the chat', function()
    return chat_text(session):find('## Prompt refused: agent-not-installed', 1, true) ~= nil
  end)
  local text = chat_text(session)
  expect(text:find('mevedel-no-such-agent-program', 1, true) and text:find("what to do: install the agent's program", 1, true), 'chat %s', text)
  expect(not text:find('agent-not-configured', 1, true), 'the old refusal stayed: %s', text)

  local login = new_session('Nvim login')
  configure({ scripted = agent({ { { say = 'hi' } } }, { auth_required = true, auth_methods = { { id = 'login', name = 'Log in', description = 'run `scripted login`' } } }) }, nil)
  refusal = nil
  chat.send({ text = 'hello', session = login, on_done = function(result, err, data)
    refusal = { result = result, err = err, data = data }
  end })
  wait_for('the login refusal', function()
    return refusal ~= nil
  end)
  wait_for('the refusal in the chat', function()
    return chat_text(login):find('## Prompt refused: agent-needs-login', 1, true) ~= nil
  end)
  text = chat_text(login)
  expect(text:find('scripted login', 1, true) and text:find('what to do: log in', 1, true), 'chat %s', text)

  local crash = new_session('Nvim crash')
  configure({ scripted = agent({ { { say = 'About to fall over' }, { stderr = 'out of cheese' }, { crash = 3 } } }) }, nil)
  local result
  chat.send({ text = 'Crash please', session = crash, on_done = function(r)
    result = r
  end })
  wait_for('the failed turn', function()
    return result ~= nil and chat.status(crash) == 'idle (turn 1 errored)'
  end)
  text = chat_text(crash)
  out('failed turn:\n' .. text)
  expect(text:find('## Turn 1 (errored)', 1, true) and text:find('About to fall over', 1, true), 'chat %s', text)
  expect(text:find('[error] ', 1, true) and text:find('status 3', 1, true) and text:find('out of cheese', 1, true), 'no error: %s', text)
  expect(text:find('    what to do: ', 1, true), 'no action: %s', text)
end)

-- The server stops (releasing its sessions) and a new one starts for the
-- document, as after a restart of the editor.
local function restart(agents)
  open_document()
  local old = mevedel_client(0)
  vim.lsp.stop_client(old.id)
  wait_for('the server to stop', function()
    return vim.lsp.get_client_by_id(old.id) == nil
  end)
  vim.cmd('edit! ' .. vim.fn.fnameescape(document))
  wait_for('a new server', function()
    local client = mevedel_client(0)
    return client ~= nil and client.id ~= old.id and client.initialized == true
  end)
  -- The settings the test gave at run time, to the new server too.
  configure(agents, nil)
end

test('chat: after a restart the prompt continues the last session, <C-n> starts afresh, the labels come back', function()
  local session = new_session('Nvim restart')
  local agents = {
    scripted = agent({ { { tool_call = { id = 't1', title = 'Look around', kind = 'read' } }, { tool_update = { id = 't1', status = 'completed' } }, { say = 'looked' } } }),
  }
  configure(agents, nil)
  -- "The most recent session" is judged by the sessions' update times,
  -- which are whole seconds: the earlier tests' sessions were updated
  -- moments ago, so this one's turn must land in a later second to be the
  -- most recent (within one second the order is the session ids').
  local second = os.time()
  wait_for('the next second', function()
    return os.time() > second
  end)
  chat.send({ text = 'Look around', session = session })
  wait_for('the first turn', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  -- A restart: the server goes (releasing its sessions), a new one starts.
  restart(agents)
  local bufnr = chat.compose({})
  local status = vim.api.nvim_win_get_option(0, 'statusline')
  expect(status:find('continue Nvim restart', 1, true) and status:find('<C-n> starts a new session', 1, true), 'statusline %s', status)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { 'Again' })
  vim.cmd('stopinsert')
  vim.cmd('write')
  wait_for('the second turn in the same session', function()
    return chat.status(session) == 'idle (turn 2 completed)'
  end)
  -- Read again from the new server: the first turn keeps its labels.
  chat.reload(session)
  wait_for('the reloaded chat', function()
    local text = chat_text(session)
    return text:find('## Turn 1 (completed) · scripted', 1, true) ~= nil and text:find('[tool] Look around (read): completed', 1, true) ~= nil
  end)
  -- After another restart, <C-n> in the prompt buffer: a new session instead.
  restart(agents)
  local fresh_buf = chat.compose({})
  vim.cmd('stopinsert')
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<C-n>', true, false, true), 'x', false)
  local fresh = vim.api.nvim_win_get_option(0, 'statusline')
  expect(not fresh:find('continue', 1, true) and fresh:find('mevedel prompt to the current session', 1, true), 'statusline %s', fresh)
  vim.api.nvim_buf_set_lines(fresh_buf, 0, -1, false, { 'Elsewhere' })
  vim.cmd('write')
  wait_for('a new session', function()
    local listing = mevedel.request(mevedel.client(), 'mevedel/session/list', vim.empty_dict())
    for _, row in ipairs(listing and listing.sessions or {}) do
      if row.sessionId ~= session and row.turns == 1 and row.displayName == 'Elsewhere' then
        return true
      end
    end
    return false
  end)
end)

test("chat: the header shows the agent's mode and options; o chooses with vim.ui.select; a refusal is told naming it and the agent; Esc sends nothing", function()
  local session = new_session('Nvim options')
  local log = scratch .. '/options-agent.jsonl'
  configure({
    scripted = agent({ { { echo_options = true } } }, {
      log = log,
      modes = { current = 'ask', available = { { id = 'ask', name = 'Ask' }, { id = 'plan', name = 'Plan' } } },
      config_options = {
        { id = 'model', name = 'Model', category = 'model', current = 'small',
          options = { { value = 'small', name = 'Small' }, { value = 'large', name = 'Large' } } },
        { id = 'fast', name = 'Fast', type = 'boolean', current = false },
      },
      refuse = { 'model=large' },
    }),
  }, 'scripted')
  chat.send({ text = 'One', session = session })
  wait_for('the first turn and the header', function()
    local text = chat_text(session)
    return text:find('options: mode=ask model=small fast=false', 1, true) ~= nil
      and text:find('agent: scripted | mode Ask · Model Small · Fast off |', 1, true) ~= nil
      and chat.status(session):find('^idle') ~= nil
  end)
  cursor_on(session, 'options:')
  local key = mevedel.options().chat.keys.options
  expect(vim.fn.maparg(key, 'n') ~= '', 'no options key in the chat')
  -- The mode, then Plan: sent to the running agent at once.
  answering({ ['mevedel.options'] = '^Mode: Ask$', ['mevedel.mode'] = '^Plan$' })
  press(key)
  local offered = selected('mevedel.options')
  expect(vim.deep_equal(offered.formatted, { 'Mode: Ask', 'Model: Small', 'Fast: off' }), 'offered %s', vim.inspect(offered.formatted))
  expect(vim.deep_equal(selected('mevedel.mode').formatted, { 'Ask', 'Plan' }), 'modes %s', vim.inspect(selected('mevedel.mode').formatted))
  wait_for('the header to say mode Plan', function()
    return chat_text(session):find('agent: scripted | mode Plan · Model Small', 1, true) ~= nil
  end)
  expect(read_file(log):find('"modeId": "plan"', 1, true), 'the agent was not told: %s', read_file(log))
  -- A value the agent refuses: told, naming the choice and the agent; not taken.
  answering({ ['mevedel.options'] = '^Model: Small$', ['mevedel.option'] = '^Large$' })
  press(key)
  local refusal = notified('model=large')
  expect(refusal and refusal.level == vim.log.levels.ERROR, 'no refusal told: %s', vim.inspect(notifications))
  expect(tostring(refusal.message):find("agent 'scripted'", 1, true) and tostring(refusal.message):find('not available now', 1, true),
    'the refusal says %s', tostring(refusal.message))
  expect(chat_text(session):find('Model Small', 1, true), 'the header changed: %s', chat_text(session))
  -- Esc at the first question: nothing is sent.
  local before = read_file(log)
  answering({ ['mevedel.options'] = function(_, _, on_choice)
    return on_choice(nil)
  end })
  press(key)
  expect(read_file(log) == before, 'something was sent after Esc')
  -- Fast on, then the next turn runs with all of it.
  answering({ ['mevedel.options'] = '^Fast: off$', ['mevedel.option'] = '^on$' })
  press(key)
  chat.send({ text = 'Two', session = session })
  wait_for('the second turn with the choices', function()
    local text = chat_text(session)
    return text:find('options: mode=plan model=small fast=true', 1, true) ~= nil
      and text:find('mode Plan · Model Small · Fast on', 1, true) ~= nil
  end)
end)

-- The agent's initialize never answers: the abort comes while it starts.
test('chat: a prompt aborted while its agent starts never reaches it; the chat says so', function()
  local session = new_session('Nvim abort while starting')
  local log = scratch .. '/abort-while-starting.jsonl'
  local scripted = agent({ { { say = 'never said' } } }, { log = log, on_initialize = { { wait_file = log .. '.never' } } })
  mevedel.set_settings({ agents = { scripted = scripted }, defaultAgent = 'scripted', cancelTimeoutSeconds = 1 })
  chat.send({ text = 'Never sent', session = session })
  wait_for("the agent's initialize", function()
    return vim.fn.filereadable(log) == 1 and read_file(log):find('"event": "initialize"', 1, true) ~= nil
  end)
  sessions.abort_turn('the user gave up', session)
  wait_for('the aborted prompt to settle', function()
    return chat.status(session) == 'idle' and chat_text(session):find('## Prompt aborted', 1, true) ~= nil
  end)
  local text = chat_text(session)
  out('chat after the abort:\n' .. text)
  expect(text:find('## Prompt aborted\n> Never sent\n\nAborted before it reached the agent: the user gave up.\n', 1, true), 'chat %s', text)
  expect(not text:find('Prompt refused', 1, true), 'shown as a refusal: %s', text)
  expect(not read_file(log):find('"event": "prompt"', 1, true), 'the prompt reached the agent: %s', read_file(log))
  expect(#turns_of(session) == 0, 'the server has %d turns', #turns_of(session))
end)

H.finish()
