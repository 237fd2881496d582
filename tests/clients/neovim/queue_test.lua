-- Headless Neovim tests of the queue in the chat (clients/neovim/lua/mevedel/
-- queue.lua): a prompt written while the turn runs is queued and shown, `e`
-- edits it and `x` cancels it on its line, it goes when the turn settles;
-- `S` writes steering, which cancels the running turn and goes at once.
-- Against the real server driving the scripted ACP agent; run by
-- tests/clients/test_neovim.py like chat_test.lua.

local H = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'agent_harness.lua')
local root, scratch, out, test, wait_for, expect = H.root, H.scratch, H.out, H.test, H.wait_for, H.expect
local write_file, mevedel, chat, server_call = H.write_file, H.mevedel, H.chat, H.server_call
local agent, configure, answering, chat_buffer, chat_text = H.agent, H.configure, H.answering, H.chat_buffer, H.chat_text
local cursor_on, press, new_session = H.cursor_on, H.press, H.new_session

local keys = function()
  return mevedel.options().chat.keys
end

-- Writes TEXT in the prompt buffer the last key opened and sends it with <CR>.
local function write_and_send(text)
  expect(vim.api.nvim_buf_get_name(0):find('mevedel prompt$'), 'no prompt buffer: %s', vim.api.nvim_buf_get_name(0))
  vim.cmd('stopinsert')
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { text })
  press('<CR>')
end

local function to_chat(session)
  vim.api.nvim_set_current_win(vim.fn.bufwinid(chat_buffer(session)))
end

test('queue: a prompt written while the turn runs is queued, edited with e, cancelled with x, and sent when the turn settles', function()
  local session = new_session('Nvim queue')
  local release = scratch .. '/release-queue'
  configure({
    scripted = agent({
      { { say = 'Working on it.' }, { wait_file = release }, { say = ' Finished.' } },
      { { echo_prompt = true } },
      { { say = 'The wrong way.' }, { wait_cancel = 60 }, { say = 'never said' } },
      { { echo_prompt = true } },
    }),
  }, 'scripted')
  answering({})
  vim.cmd('MevedelPrompt Start the long one')
  wait_for('the turn running', function()
    return chat_text(session):find('Working on it.', 1, true) ~= nil and chat.status(session) == 'running turn 1'
  end)

  to_chat(session)
  press(keys().prompt)
  write_and_send('First follow-up')
  wait_for('the queued prompt in the chat', function()
    return chat_text(session):find('- [queued] First follow-up', 1, true) ~= nil
  end)
  to_chat(session)
  press(keys().prompt)
  write_and_send('Second follow-up')
  wait_for('both queued', function()
    return chat_text(session):find('## Queued (2)', 1, true) ~= nil
  end)
  out('chat with the queue:\n' .. chat_text(session))

  -- e on the first: the prompt buffer holds its text; what is written replaces it.
  cursor_on(session, '%[queued%] First follow%-up')
  press(keys().queue_edit)
  expect(vim.api.nvim_buf_get_lines(0, 0, -1, false)[1] == 'First follow-up', 'the edit buffer holds %s', vim.inspect(vim.api.nvim_buf_get_lines(0, 0, -1, false)))
  expect(vim.wo.statusline:find('editing', 1, true), 'the edit buffer says %s', vim.wo.statusline)
  write_and_send('First follow-up, edited')
  wait_for('the edited entry', function()
    return chat_text(session):find('- [queued] First follow-up, edited', 1, true) ~= nil
  end)
  -- x on the second: gone, here and on the server.
  cursor_on(session, '%[queued%] Second follow%-up')
  press(keys().queue_cancel)
  wait_for('the cancelled entry gone', function()
    return chat_text(session):find('Second follow-up', 1, true) == nil and chat_text(session):find('## Queued (1)', 1, true) ~= nil
  end)
  local listed = server_call('mevedel/queue/list', { sessionId = session })
  expect(#listed.entries == 1 and listed.entries[1].text == 'First follow-up, edited', 'the server queue: %s', vim.inspect(listed))
  -- x off any entry says so and changes nothing.
  cursor_on(session, '## Turn 1')
  press(keys().queue_cancel)
  expect(H.notified('on no queued prompt'), 'x off an entry said nothing')

  -- The turn settles: the queued prompt goes as turn 2, shown with its text.
  write_file(release, '')
  wait_for('the queued prompt sent and answered', function()
    local text = chat_text(session)
    return text:find('## Turn 2 (completed) · scripted\n> First follow-up, edited\n', 1, true) ~= nil and chat.status(session) == 'idle (turn 2 completed)'
  end)
  expect(not chat_text(session):find('## Queued', 1, true), 'the queue still shows: %s', chat_text(session))
  expect(#server_call('mevedel/queue/list', { sessionId = session }).entries == 0, 'the server still queues')

  -- S off an entry writes steering: the running turn is cancelled and the steering goes now.
  vim.cmd('MevedelPrompt Go slowly')
  wait_for('the third turn running', function()
    return chat_text(session):find('The wrong way.', 1, true) ~= nil and chat.status(session) == 'running turn 3'
  end)
  to_chat(session)
  cursor_on(session, '## Turn 3')
  press(keys().steer)
  expect(vim.wo.statusline:find('mevedel steering', 1, true), 'the steering buffer says %s', vim.wo.statusline)
  write_and_send('Turn left instead')
  wait_for('the steered turn', function()
    local text = chat_text(session)
    return text:find('## Turn 3 (interrupted)', 1, true) ~= nil
      and text:find('## Turn 4 (completed) · scripted\n> Turn left instead\n', 1, true) ~= nil
  end)
  expect(not chat_text(session):find('never said', 1, true), 'the steered turn went on: %s', chat_text(session))
  out('chat after steering:\n' .. chat_text(session))
end)

H.finish()
