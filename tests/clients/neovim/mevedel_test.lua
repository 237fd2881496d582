-- Headless Neovim tests of clients/neovim against the real server.
--
-- Run by tests/clients/test_neovim.py:
--   nvim --headless -u NONE --cmd 'set rtp^=clients/neovim' \
--        -c 'luafile tests/clients/neovim/mevedel_test.lua'
-- with MEVEDEL_TEST_WORKSPACE, MEVEDEL_TEST_DOCUMENT and MEVEDEL_LSP_COMMAND
-- (a JSON array) set. Prints one PASS/FAIL line per test and exits non-zero
-- when any failed.

local R = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'runner.lua')
local root, document, command, TIMEOUT, out, test = R.root, R.document, R.command, R.TIMEOUT, R.out, R.test
local wait_for, expect, read_file, write_file, notifications, clear_notifications = R.wait_for, R.expect, R.read_file, R.write_file, R.notifications, R.clear_notifications
local notified, mevedel_client, open_document, server_call, buffer_text = R.notified, R.mevedel_client, R.open_document, R.server_call, R.buffer_text
local asked, answer_selects, answering, selected = R.asked, R.answer_selects, R.answering, R.selected
local create_session = R.create_session

local function completion_texts(line)
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, { line })
  local row = vim.api.nvim_buf_line_count(bufnr) - 1
  local responses = vim.lsp.buf_request_sync(bufnr, 'textDocument/completion', {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = #line },
  }, TIMEOUT)
  vim.api.nvim_buf_set_lines(bufnr, row, row + 1, false, {})
  local texts = {}
  for _, response in pairs(responses or {}) do
    local items = response.result and (response.result.items or response.result) or {}
    for _, item in ipairs(items) do
      table.insert(texts, item.textEdit and item.textEdit.newText or item.insertText or item.label)
    end
  end
  return texts
end

local function any(list, pattern)
  for _, value in ipairs(list) do
    if value:find(pattern) then
      return true
    end
  end
  return false
end

local function put_cursor_on(text, offset)
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  for row, line in ipairs(lines) do
    local col = line:find(text, 1, true)
    if col then
      vim.api.nvim_win_set_cursor(0, { row, col - 1 + (offset or 0) })
      return
    end
  end
  error('no ' .. text .. ' in the buffer')
end

-- Progress reaches Neovim's own progress events (User LspProgressUpdate on
-- 0.7-0.9, LspProgress from 0.10).
local progress_events = 0
vim.api.nvim_create_autocmd('User', {
  pattern = 'LspProgressUpdate',
  callback = function()
    progress_events = progress_events + 1
  end,
})
pcall(vim.api.nvim_create_autocmd, 'LspProgress', {
  callback = function()
    progress_events = progress_events + 1
  end,
})

vim.cmd('filetype on')
-- Tests edit the document and move on, as a user with 'hidden' does.
vim.o.hidden = true
vim.cmd('runtime plugin/mevedel.lua')
local mevedel = require('mevedel')
mevedel.setup({ cmd = command })

test('the server starts for a text buffer, with omnifunc completion', function()
  open_document()
  expect(vim.bo.filetype == 'text', 'filetype is %s', vim.bo.filetype)
  expect(vim.bo.omnifunc == 'v:lua.vim.lsp.omnifunc', 'omnifunc is %s', vim.bo.omnifunc)
  local client = mevedel_client(0)
  expect(client.config.root_dir == root, 'root_dir %s, expected %s', client.config.root_dir, root)
end)

test('the server starts for a Markdown buffer of the same workspace', function()
  local markdown = root .. '/readme.md'
  vim.fn.writefile({ 'Read mevedel://architecture.md first.' }, markdown)
  vim.cmd('edit ' .. vim.fn.fnameescape(markdown))
  expect(vim.bo.filetype == 'markdown', 'filetype is %s', vim.bo.filetype)
  wait_for('the server to attach', function()
    return mevedel_client(0) ~= nil
  end)
  local text_client = mevedel_client(vim.fn.bufnr(document))
  expect(mevedel_client(0).id == text_client.id, 'a second server was started for the same workspace')
  open_document()
end)

test('completion offers the entries of a real directory', function()
  local texts = completion_texts('Next: work://shared/')
  out('candidates: ' .. vim.inspect(texts))
  expect(any(texts, 'notes%.md$'), 'no notes.md among %s', vim.inspect(texts))
  expect(any(texts, 'plans/?$'), 'no plans among %s', vim.inspect(texts))
end)

test('completion offers scheme prefixes', function()
  local texts = completion_texts('Start: wo')
  expect(vim.tbl_contains(texts, 'work://'), 'no work:// among %s', vim.inspect(texts))
end)

test('hover shows the canonical form of a non-canonical spelling', function()
  vim.api.nvim_buf_set_lines(0, -1, -1, false, { 'Odd: work://shared/%6Eotes.md here' })
  put_cursor_on('work://shared/%6E', 3)
  local responses = vim.lsp.buf_request_sync(0, 'textDocument/hover', vim.lsp.util.make_position_params(), TIMEOUT)
  local text = ''
  for _, response in pairs(responses or {}) do
    if response.result then
      text = text .. table.concat(vim.lsp.util.convert_input_to_markdown_lines(response.result.contents), '\n')
    end
  end
  out('hover: ' .. text)
  expect(text:find('work://shared/notes.md', 1, true), 'hover text lacks the canonical form: %s', text)
  expect(not text:find(root, 1, true), 'hover text shows the backing path: %s', text)
  vim.api.nvim_buf_set_lines(0, -2, -1, false, {})
end)

test('go to definition on a file-backed address visits the backing file', function()
  open_document()
  put_cursor_on('work://shared/notes.md', 5)
  vim.lsp.buf.definition()
  local expected = root .. '/.mevedel/shared/notes.md'
  wait_for('the jump to ' .. expected, function()
    return vim.api.nvim_buf_get_name(0) == expected
  end)
  expect(vim.api.nvim_get_current_line() == '# Shared notes', 'cursor line is %s', vim.api.nvim_get_current_line())
end)

test('go to definition on a directory opens a read-only virtual buffer', function()
  open_document()
  put_cursor_on('work://shared/plans/', 5)
  vim.lsp.buf.definition()
  wait_for('a virtual buffer', function()
    return mevedel.is_virtual_uri(vim.api.nvim_buf_get_name(0))
  end)
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local text = table.concat(lines, '\n')
  expect(text:find('first.md', 1, true) and text:find('second.md', 1, true), 'listing is %s', text)
  expect(vim.bo.readonly and not vim.bo.modifiable, 'the buffer is writable')
  expect(vim.bo.buftype == 'nofile', 'buftype is %s', vim.bo.buftype)
  -- The text is exactly the server's plain projection.
  local client = mevedel_client(vim.fn.bufnr('#'))
  local page, err = mevedel.request(client, 'mevedel/resource/read', { uri = vim.b.mevedel_uri, view = 'plain' })
  expect(page and page.text == text, 'buffer %q, server %s', text, vim.inspect(page or err))
  expect(progress_events > 0, 'no progress event for the read')
end)

test('a virtual buffer has the address features too', function()
  -- The definition test above left the listing of work://shared/plans open.
  expect(mevedel.is_virtual_uri(vim.api.nvim_buf_get_name(0)), 'not in the virtual buffer')
  wait_for('the server to attach to the virtual buffer', function()
    return mevedel_client(0) ~= nil
  end)
  put_cursor_on('work://shared/plans/first.md', 5)
  local responses = vim.lsp.buf_request_sync(0, 'textDocument/hover', vim.lsp.util.make_position_params(), TIMEOUT)
  local text = ''
  for _, response in pairs(responses or {}) do
    if response.result then
      text = text .. table.concat(vim.lsp.util.convert_input_to_markdown_lines(response.result.contents), '\n')
    end
  end
  expect(text:find('work://shared/plans/first.md', 1, true), 'hover in the virtual buffer: %s', text)
end)

test(':MevedelRead opens a file-backed address as its file and a listing as a virtual buffer', function()
  open_document()
  vim.cmd('MevedelRead work://shared/long.txt')
  expect(vim.api.nvim_buf_get_name(0) == root .. '/.mevedel/shared/long.txt', 'opened %s', vim.api.nvim_buf_get_name(0))
  vim.cmd('MevedelRead mevedel://')
  expect(mevedel.is_virtual_uri(vim.api.nvim_buf_get_name(0)), 'opened %s', vim.api.nvim_buf_get_name(0))
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  expect(text:find('mevedel://architecture.md', 1, true), 'listing is %s', text)
end)

test('a whole read joins pages and continues lines cut at the page width', function()
  open_document()
  local read, err = mevedel.read_document(mevedel_client(0), { address = 'work://shared/long.txt' })
  expect(read, 'read failed: %s', tostring(err))
  local expected = read_file(root .. '/.mevedel/shared/long.txt')
  local got = table.concat(read.lines, '\n') .. '\n'
  expect(#got == #expected, 'read %d characters, the file has %d', #got, #expected)
  expect(got == expected, 'the text differs from the file')
end)

test(':MevedelRead reports the authored address and the server reason', function()
  open_document()
  clear_notifications()
  vim.cmd('MevedelRead wrok://shared/x')
  local message = notifications[1] and notifications[1].message or ''
  expect(message:find('wrok://shared/x', 1, true), 'message was %q', message)
  expect(not message:find(root, 1, true), 'message shows the backing path: %s', message)
end)

test('settings reach the server and a change applies', function()
  open_document()
  local bufnr = vim.api.nvim_get_current_buf()
  local function flagged()
    for _, diagnostic in ipairs(vim.diagnostic.get(bufnr)) do
      if diagnostic.message:find('foo://', 1, true) then
        return true
      end
    end
    return false
  end
  mevedel.set_settings({ diagnostics = { unknownSchemes = 'all' } })
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, { 'Elsewhere: foo://bar' })
  wait_for('a diagnostic on foo://', flagged)
  mevedel.set_settings({ diagnostics = { unknownSchemes = 'off' } })
  wait_for('the foo:// diagnostic to go away', function()
    return not flagged()
  end)
  mevedel.set_settings({})
  vim.api.nvim_buf_set_lines(bufnr, -2, -1, false, {})
end)

-- Sessions ----------------------------------------------------------------------

local sessions = require('mevedel.sessions')
local expired_session = vim.env.MEVEDEL_TEST_EXPIRED_SESSION
local also_expired_session = vim.env.MEVEDEL_TEST_ALSO_EXPIRED_SESSION
local held_session = vim.env.MEVEDEL_TEST_HELD_SESSION
local other_host = vim.env.MEVEDEL_TEST_OTHER_HOST
local not_a_session = vim.env.MEVEDEL_TEST_NOT_A_SESSION

local function settle_turn(session, prompt)
  server_call('mevedel/turn/begin', { sessionId = session, prompt = prompt })
  server_call('mevedel/turn/append', { sessionId = session, kind = 'response', text = 'answer to ' .. prompt })
  return server_call('mevedel/turn/settle', { sessionId = session })
end

local function listed(session)
  for _, row in ipairs(server_call('mevedel/session/list').sessions) do
    if row.sessionId == session then
      return row
    end
  end
end

local function pick_session(session, question_answer)
  local result
  answer_selects(function(items, opts, _, on_choice)
    if opts.kind == 'mevedel.session' then
      for _, item in ipairs(items) do
        if item.kind == 'session' and item.row.sessionId == session then
          return on_choice(item)
        end
      end
      error('the picker does not offer ' .. session)
    end
    if type(question_answer) == 'function' then
      return question_answer(items, on_choice)
    end
    on_choice(question_answer)
  end)
  sessions.pick(function(opened)
    result = opened
  end)
  return function()
    return result
  end
end

local function formatted_in(kind)
  for _, call in ipairs(asked) do
    if call.kind == kind then
      return call
    end
  end
end

test('sessions: create, pick with its action, transcript, rename, didChange refresh, turns', function()
  open_document()
  clear_notifications()
  local state = create_session('Neovim session')
  local session = state.sessionId
  expect(state.displayName == 'Neovim session', 'created %s', vim.inspect(state))
  expect(vim.b.mevedel_session == session, 'create did not show the transcript')
  settle_turn(session, 'First prompt from Neovim')
  wait_for('the transcript to show the first turn', function()
    return buffer_text():find('First prompt from Neovim', 1, true) ~= nil
  end)
  vim.cmd('bwipeout')
  open_document()

  local opened = pick_session(session, nil)
  wait_for('the picked session to open', opened)
  expect(opened().action == 'switch', 'opened %s', vim.inspect(opened()))
  local picker = formatted_in('mevedel.session').formatted
  out('picker: ' .. vim.inspect(picker))
  local mine = string.format('Neovim session  [Switch]  1 turn  host %s  (current)  %s', listed(session).holderHost, session)
  expect(vim.tbl_contains(picker, mine), 'no %q in %s', mine, vim.inspect(picker))
  expect(any(picker, '%[Take over%]  1 turn  host ' .. vim.pesc(other_host)), 'no Take over row in %s', vim.inspect(picker))
  expect(any(picker, '^' .. vim.pesc(not_a_session) .. '  %[Inspect%]  .*is not a session ID'), 'no Inspect row in %s', vim.inspect(picker))
  local transcript = vim.api.nvim_get_current_buf()
  expect(vim.b.mevedel_session == session, 'the transcript of %s is not shown', session)
  expect(vim.bo.readonly and not vim.bo.modifiable, 'the transcript is writable')
  expect(buffer_text():find('> First prompt from Neovim', 1, true), 'transcript is %s', buffer_text())

  vim.cmd('MevedelSessionRename Renamed by Neovim')
  expect(listed(session).displayName == 'Renamed by Neovim', 'listed as %s', listed(session).displayName)
  local items = sessions.picker_items(server_call('mevedel/session/list'))
  local names = vim.tbl_map(sessions.format_item, items)
  expect(any(names, '^Renamed by Neovim  %[Switch%]'), 'picker lines %s', vim.inspect(names))

  -- Another settled turn: the open transcript is read again; the cursor
  -- stays on the line the reader was on.
  put_cursor_on('First prompt from Neovim')
  settle_turn(session, 'Second prompt from Neovim')
  wait_for('the transcript to show the second turn', function()
    return buffer_text(transcript):find('Second prompt from Neovim', 1, true) ~= nil
  end)
  expect(vim.api.nvim_get_current_line():find('First prompt from Neovim', 1, true), 'cursor moved to %q', vim.api.nvim_get_current_line())
  local read = mevedel.read_document(mevedel_client(vim.fn.bufnr(document)), { uri = vim.b.mevedel_uri })
  expect(table.concat(read.lines, '\n') == buffer_text(transcript), 'the view differs from the server')

  -- The turns picker jumps to the turn; :MevedelTurn shows one alone.
  answer_selects(function(turns, _, formatted, on_choice)
    expect(#turns == 2 and formatted[2]:find('Second prompt from Neovim', 1, true), 'turns offered %s', vim.inspect(formatted))
    on_choice(turns[1])
  end)
  vim.cmd('MevedelTurns')
  expect(vim.api.nvim_get_current_buf() == transcript, 'not in the transcript')
  expect(vim.api.nvim_get_current_line():find('^## Turn 1 '), 'cursor line is %q', vim.api.nvim_get_current_line())
  vim.cmd('MevedelTurn 2')
  expect(buffer_text():find('> Second prompt from Neovim', 1, true), 'turn view is %s', buffer_text())
  expect(buffer_text():find('answer to Second prompt from Neovim', 1, true), 'turn view is %s', buffer_text())
  expect(not vim.bo.modifiable, 'the turn view is writable')

  vim.cmd('MevedelSessionSave')
  expect(notified('saved ' .. session .. ': published'), 'no save message in %s', vim.inspect(notifications))
  vim.cmd('MevedelSessionClose')
  expect(notified('closed ' .. session), 'no close message')
  wait_for('the closed notice', function()
    return notified('session ' .. session .. ' was closed') ~= nil
  end)
  expect(listed(session).action == 'Resume', 'after close the action is %s', listed(session).action)
end)

test('sessions: the takeover question reaches vim.ui.select and the server follows the answer', function()
  open_document()
  clear_notifications()
  expect(listed(expired_session).action == 'Take over', 'action %s', listed(expired_session).action)
  local opened = pick_session(expired_session, 'Cancel')
  wait_for('the declined takeover to be reported', function()
    return notified(expired_session .. ' was not taken over') ~= nil
  end)
  local question = formatted_in('mevedel.question')
  expect(question and question.prompt:find(other_host, 1, true), 'question %s', vim.inspect(question))
  expect(vim.deep_equal(question.formatted, { 'Take over', 'Cancel' }), 'actions %s', vim.inspect(question))
  -- Cancel is an answer, not a failure: no error, no request named.
  local told = notified(expired_session .. ' was not taken over')
  expect(told.level == vim.log.levels.INFO, 'the declined takeover was told as %s', vim.inspect(told))
  expect(not notified('session/open'), 'the request was named: %s', vim.inspect(notifications))
  expect(opened() == nil and listed(expired_session).action == 'Take over', 'the session was opened')

  opened = pick_session(expired_session, 'Take over')
  wait_for('the takeover', opened)
  expect(opened().action == 'takeover' and opened().session.access == 'writable', 'opened %s', vim.inspect(opened()))
  expect(buffer_text():find('expired prompt', 1, true), 'transcript %s', buffer_text())
  local row = listed(expired_session)
  expect(row.action == 'Switch' and row.current == true, 'row %s', vim.inspect(row))
end)

test('sessions: a vim.ui.select that answers later still takes over', function()
  open_document()
  clear_notifications()
  local opened = pick_session(also_expired_session, function(items, on_choice)
    vim.defer_fn(function()
      on_choice(items[1])
    end, 100)
  end)
  wait_for('the late takeover', opened)
  expect(opened().action == 'takeover', 'opened %s', vim.inspect(opened()))
  expect(not notified('was not taken over'), 'the first, unanswered open was reported: %s', vim.inspect(notifications))
  expect(buffer_text():find('also expired prompt', 1, true), 'transcript %s', buffer_text())
end)

test('sessions: a live foreign lease joins read-only; an Inspect row says why and does not open', function()
  open_document()
  clear_notifications()
  answer_selects(function(items, _, _, on_choice)
    for _, item in ipairs(items) do
      if item.kind == 'inspect' then
        return on_choice(item)
      end
    end
  end)
  vim.cmd('MevedelSessions')
  expect(notified(not_a_session .. ' can only be inspected: '), 'notifications %s', vim.inspect(notifications))
  expect(listed(held_session).action == 'Join', 'action %s', listed(held_session).action)
  local opened = pick_session(held_session, nil)
  wait_for('the join', opened)
  expect(opened().action == 'join' and opened().session.access == 'read-only', 'opened %s', vim.inspect(opened()))
  expect(buffer_text():find('held prompt', 1, true), 'transcript %s', buffer_text())
  clear_notifications()
  vim.cmd('MevedelSessionRename Mine now')
  local refusal = notifications[1] and notifications[1].message or ''
  expect(refusal:find(held_session, 1, true) and refusal:find('read-only', 1, true), 'refusal %q', refusal)
end)

test('sessions: refusals reach the user with the server wording', function()
  open_document()
  local session = create_session('').sessionId
  open_document()
  local function refusal(cmd)
    clear_notifications()
    if type(cmd) == 'function' then
      cmd()
    else
      vim.cmd(cmd)
    end
    return notifications[1] and tostring(notifications[1].message) or ''
  end
  expect(refusal(function()
    sessions.rename('   ')
  end):find('name "   ": is blank', 1, true), 'rename blank')
  local retried = refusal('MevedelSessionRetry')
  expect(retried:find(session .. ': ', 1, true) and retried:find('no pending publication', 1, true), 'retry: %q', retried)
  expect(refusal('MevedelSessionAbandon'):find('no failed save was pending', 1, true), 'abandon')
  expect(refusal('MevedelTurnAbort'):find(session .. ': has no turn in flight', 1, true), 'abort without a turn')
  server_call('mevedel/turn/begin', { sessionId = session, prompt = 'to be stopped' })
  vim.cmd('MevedelTurnAbort stopped by Neovim')
  local turns = server_call('mevedel/turn/list', { sessionId = session }).turns
  expect(#turns == 1 and turns[1].state == 'interrupted' and turns[1].reason == 'stopped by Neovim', 'turns %s', vim.inspect(turns))
end)

-- Rewind, Redo, Fork, Worktree Fork, Save As --------------------------------------

local lifecycle = require('mevedel.lifecycle')
local TRACKED = 'lifecycle.txt'

local function tracked()
  return read_file(root .. '/' .. TRACKED)
end

local function edit_turn(session, prompt, content)
  server_call('mevedel/turn/begin', { sessionId = session, prompt = prompt })
  server_call('mevedel/turn/capture', { sessionId = session, path = TRACKED })
  write_file(root .. '/' .. TRACKED, content)
  server_call('mevedel/turn/append', { sessionId = session, kind = 'response', text = 'answer to ' .. prompt })
  server_call('mevedel/turn/settle', { sessionId = session })
end

local function three_turns(name)
  open_document()
  local session = create_session(name).sessionId
  for n = 1, 3 do
    edit_turn(session, string.format('%s step %d', name, n), string.format('%s v%d\n', name, n))
  end
  return session
end

local function turn_count(session)
  return #server_call('mevedel/turn/list', { sessionId = session }).turns
end

local function session_ids()
  local ids = {}
  for _, row in ipairs(server_call('mevedel/session/list').sessions) do
    table.insert(ids, row.sessionId)
  end
  table.sort(ids)
  return ids
end

local function impact_text()
  return buffer_text(vim.fn.bufnr(lifecycle.impact_buffer_name))
end

test('lifecycle: rewind and redo show their impact; declining changes nothing, confirming changes the session', function()
  local session = three_turns('Nvim rewind')
  local transcript = vim.api.nvim_get_current_buf()
  expect(vim.b.mevedel_session == session, 'the transcript of %s is not shown', session)
  local done

  -- Picked turn and boundary, then declined.
  answering({ ['mevedel.turn'] = '^1  completed', ['mevedel.boundary'] = '^After the response of turn 1', ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelRewind')
  local impact = impact_text()
  out('impact:\n' .. impact)
  expect(vim.startswith(impact, string.format('Rewind %s to after the response of turn 1: 1 turn kept.\n', session)), 'impact %s', impact)
  expect(impact:find('\nDiscards 2 prompts:\n  turn 2: Nvim rewind step 2\n  turn 3: Nvim rewind step 3\n', 1, true), 'impact %s', impact)
  expect(impact:find('\n  lifecycle.txt (post-turn of turn 1: 15 bytes)\n', 1, true), 'impact %s', impact)
  expect(impact:find('\nGit index will differ from the restored files:\n  lifecycle.txt', 1, true), 'impact %s', impact)
  expect(vim.deep_equal(selected('mevedel.confirm').formatted, { 'Rewind', 'Cancel' }), 'confirm %s', vim.inspect(selected('mevedel.confirm')))
  expect(selected('mevedel.confirm').prompt == lifecycle.last_impact.summary, 'the question is %s', selected('mevedel.confirm').prompt)
  expect(turn_count(session) == 3 and tracked() == 'Nvim rewind v3\n', 'declining changed the session')
  expect(notified('rewind cancelled; nothing changed'), 'no cancel notice')

  -- Changed outside the session: named in the impact; confirmed.
  write_file(root .. '/' .. TRACKED, 'edited outside\n')
  answering({ ['mevedel.confirm'] = '^Rewind$' })
  lifecycle.rewind(1, 'after', session, function(result)
    done = result
  end)
  expect(impact_text():find('\nChanged outside the session since recorded (the commit overwrites them):\n  lifecycle.txt (recorded by turn 3)', 1, true), 'impact %s', impact_text())
  expect(done and done.settledTurns == 1, 'rewound %s', vim.inspect(done))
  expect(turn_count(session) == 1 and tracked() == 'Nvim rewind v1\n', 'the rewind did not change the session')
  expect(notified(string.format('rewound %s: now 1 settled turn; wrote lifecycle.txt', session)), 'no rewound notice')
  wait_for('the transcript to drop the rewound turns', function()
    return not buffer_text(transcript):find('Nvim rewind step 2', 1, true)
  end)

  -- Nothing left to rewind: the impact says so.
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  lifecycle.rewind(1, 'after', session)
  expect(vim.deep_equal(lifecycle.last_impact.details, { 'Nothing changes.' }), 'impact %s', vim.inspect(lifecycle.last_impact))

  -- Redo: the picker offers the replaced state; declined, then confirmed.
  answering({ ['mevedel.redo'] = '^3 turns · ends at turn 3: Nvim rewind step 3$', ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelRedo')
  expect(impact_text():find('\nBrings back 2 turns:\n  turn 2: Nvim rewind step 2\n  turn 3: Nvim rewind step 3\n', 1, true), 'impact %s', impact_text())
  expect(turn_count(session) == 1, 'declining the redo changed the session')
  done = nil
  answering({ ['mevedel.redo'] = '^3 turns', ['mevedel.confirm'] = '^Redo$' })
  lifecycle.redo(session, function(result)
    done = result
  end)
  expect(done and done.settledTurns == 3, 'redone %s', vim.inspect(done))
  expect(turn_count(session) == 3 and tracked() == 'Nvim rewind v3\n', 'the redo did not bring the turns back')
  wait_for('the transcript to show the redone turns', function()
    return buffer_text(transcript):find('Nvim rewind step 3', 1, true) ~= nil
  end)

  -- The before boundary of the first prompt would empty the session.
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelRewind 1 before')
  expect(vim.startswith(impact_text(), string.format('Rewind %s to before the prompt of turn 1: 0 turns kept.\n\nDiscards 3 prompts:', session)), 'impact %s', impact_text())
  expect(turn_count(session) == 3, 'declining changed the session')
end)

test('lifecycle: a commit after the session moved is refused with the server wording', function()
  local session = three_turns('Nvim moved')
  clear_notifications()
  answering({
    ['mevedel.confirm'] = function(items, _, on_choice)
      edit_turn(session, 'Nvim moved step 4', 'Nvim moved v4\n')
      on_choice(items[1])
    end,
  })
  lifecycle.rewind(1, 'before', session)
  local refusal = notifications[#notifications] and tostring(notifications[#notifications].message) or ''
  expect(refusal:find(session .. ': ', 1, true) and refusal:lower():find('prepare', 1, true), 'refusal %q', refusal)
  expect(turn_count(session) == 4 and tracked() == 'Nvim moved v4\n', 'the stale commit changed the session')
end)

test('lifecycle: fork, worktree fork and save as create a session only when confirmed', function()
  local session = three_turns('Nvim forked')
  local before = session_ids()
  answering({ ['mevedel.turn'] = '^2  completed', ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelFork')
  expect(vim.startswith(impact_text(), string.format('Fork %s after the response of turn 2 (Nvim forked step 2): a new session with 2 turns.', session)), 'impact %s', impact_text())
  expect(vim.deep_equal(session_ids(), before), 'declining the fork created a session')

  local forked
  answering({ ['mevedel.confirm'] = '^Fork$' })
  lifecycle.fork(2, session, function(result)
    forked = result
  end)
  local child = forked and forked.session.sessionId
  expect(child and child ~= session and forked.sourceId == session, 'forked %s', vim.inspect(forked))
  expect(#session_ids() == #before + 1 and turn_count(child) == 2 and turn_count(session) == 3, 'the fork is not a new two-turn session')
  expect(vim.b.mevedel_session == child and buffer_text():find('Nvim forked step 2', 1, true) and not buffer_text():find('Nvim forked step 3', 1, true), 'the child transcript is not shown: %s', buffer_text())

  local worktree = root .. '/.worktrees/from-neovim'
  -- From the source's transcript, the command acts on the source.
  sessions.transcript(session)
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelWorktreeFork 2 from-neovim')
  expect(impact_text():find('\nCreates the Git worktree %.worktrees/from%-neovim on the new branch %S+ at %x+ %(HEAD of %.%)'), 'impact %s', impact_text())
  expect(vim.loop.fs_stat(worktree) == nil, 'declining created the worktree')
  local made
  answering({ ['mevedel.confirm'] = '^Create Worktree Fork$' })
  lifecycle.worktree_fork(2, 'from-neovim', session, function(result)
    made = result
  end)
  expect(made and made.worktree.directory == '.worktrees/from-neovim', 'made %s', vim.inspect(made))
  expect(read_file(worktree .. '/' .. TRACKED) == 'Nvim forked v2\n' and tracked() == 'Nvim forked v3\n', 'the worktree does not hold the turn content')

  local count = #session_ids()
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  lifecycle.save_as('Nvim   copy', session)
  expect(vim.startswith(impact_text(), string.format('Save %s as "Nvim copy": a new session with 3 turns.', session)), 'impact %s', impact_text())
  expect(#session_ids() == count, 'declining save as created a session')
  local saved
  answering({ ['mevedel.confirm'] = '^Save As$' })
  lifecycle.save_as('Nvim copy', session, function(result)
    saved = result
  end)
  local row = saved and listed(saved.session.sessionId)
  expect(row and row.displayName == 'Nvim copy' and row.turns == 3 and #session_ids() == count + 1, 'saved %s', vim.inspect(row))
end)

test('lifecycle: the fork variants picker lists the source, then the forks oldest first, and opens the chosen one at the turn', function()
  local session = three_turns('Nvim variants')
  local forks = {}
  for n = 1, 2 do
    answering({ ['mevedel.confirm'] = '^Fork$' })
    lifecycle.fork(2, session, function(result)
      forks[n] = result.session.sessionId
    end)
    expect(forks[n], 'fork %d was not made', n)
    if n == 1 then
      vim.wait(1100) -- creation times are whole seconds; same-second forks order by ID
    end
  end
  local older, newer = forks[1], forks[2]
  local opened
  answering({
    ['mevedel.turn'] = '^2  completed',
    ['mevedel.variant'] = vim.pesc(newer),
  })
  sessions.transcript(older)
  vim.cmd('MevedelForkVariants')
  local offered = selected('mevedel.variant')
  expect(offered and offered.prompt == 'mevedel: variant at turn 2', 'no variants picker: %s', vim.inspect(offered))
  local lines = offered.formatted
  expect(#lines == 3, 'offered %s', vim.inspect(lines))
  expect(lines[1] == string.format('  source  Nvim variants (%s)  Nvim variants step 3', session), 'first %s', lines[1])
  expect(vim.startswith(lines[2], '* conversation  ') and lines[2]:find(older, 1, true), 'second %s', lines[2])
  expect(vim.startswith(lines[3], '  conversation  ') and lines[3]:find(newer, 1, true), 'third %s', lines[3])
  wait_for('the chosen fork to open', function()
    return vim.b.mevedel_session == newer and vim.api.nvim_get_current_line():find('^## Turn 2 ') ~= nil
  end)
  expect(listed(newer).current == true, 'the chosen fork is not current')
  expect(buffer_text():find('Nvim variants step 2', 1, true), 'the transcript %s', buffer_text())
end)

local recovery_retry = vim.env.MEVEDEL_TEST_RECOVERY_RETRY
local recovery_retry_file = vim.env.MEVEDEL_TEST_RECOVERY_RETRY_FILE
local recovery_abandon = vim.env.MEVEDEL_TEST_RECOVERY_ABANDON
local recovery_edited = vim.env.MEVEDEL_TEST_RECOVERY_EDITED
local recovery_edited_file = vim.env.MEVEDEL_TEST_RECOVERY_EDITED_FILE

test('lifecycle: a session in recovery is announced, refuses a rewind and offers retry or abandon', function()
  open_document()
  clear_notifications()
  local opened
  answering({ ['mevedel.recovery'] = '^Leave it$' })
  sessions.open(recovery_retry, 'resume', function(result)
    opened = result
  end)
  wait_for('the session in recovery to open', function()
    return opened ~= nil
  end)
  expect(selected('mevedel.recovery').prompt:find('is in recovery', 1, true), 'asked %s', vim.inspect(asked))
  expect(notified(recovery_retry .. ' stays in recovery'), 'no stays-in-recovery notice')

  clear_notifications()
  answering({ ['mevedel.recovery'] = '^Retry$' })
  lifecycle.rewind(1, 'after', recovery_retry)
  expect(notified('retry or abandon'), 'the refusal %s', vim.inspect(notifications))
  expect(notified('the files have their content from before the interrupted transaction'), 'no retry notice %s', vim.inspect(notifications))
  expect(read_file(root .. '/' .. recovery_retry_file) == 'Crashed retry v2\n', 'retry left %q', read_file(root .. '/' .. recovery_retry_file))
  local rewound
  answering({ ['mevedel.confirm'] = '^Rewind$' })
  lifecycle.rewind(1, 'after', recovery_retry, function(result)
    rewound = result
  end)
  expect(rewound and rewound.settledTurns == 1, 'rewound %s', vim.inspect(rewound))

  opened = nil
  answering({ ['mevedel.recovery'] = '^Leave it$' })
  sessions.open(recovery_abandon, 'resume', function(result)
    opened = result
  end)
  wait_for('the other session in recovery to open', function()
    return opened ~= nil
  end)
  local abandoned
  answering({ ['mevedel.confirm'] = '^Cancel$' })
  lifecycle.abandon_recovery(recovery_abandon, function(result)
    abandoned = result
  end)
  expect(abandoned == nil, 'declining abandoned the recovery')
  answering({ ['mevedel.confirm'] = '^Abandon$' })
  lifecycle.abandon_recovery(recovery_abandon, function(result)
    abandoned = result
  end)
  expect(abandoned and abandoned.resolution == 'abandoned', 'abandoned %s', vim.inspect(abandoned))
  local forked
  answering({ ['mevedel.confirm'] = '^Fork$' })
  lifecycle.fork(1, recovery_abandon, function(result)
    forked = result
  end)
  expect(forked and forked.sourceId == recovery_abandon, 'after abandoning, the fork %s', vim.inspect(forked))
end)

test('lifecycle: a retried recovery names the file edited outside the session and leaves it', function()
  open_document()
  local edited_text = read_file(root .. '/' .. recovery_edited_file)
  local opened
  answering({ ['mevedel.recovery'] = '^Leave it$' })
  sessions.open(recovery_edited, 'resume', function(result)
    opened = result
  end)
  wait_for('the edited session in recovery to open', function()
    return opened ~= nil
  end)
  clear_notifications()
  local retried = lifecycle.retry_recovery(recovery_edited)
  expect(retried and retried.resolution == 'rolled-back', 'retried %s', vim.inspect(retried))
  local told = notified('left as it is, changed outside the session since the transaction was interrupted: ' .. recovery_edited_file)
  expect(told and told.level == vim.log.levels.WARN, 'the retry notice %s', vim.inspect(notifications))
  expect(read_file(root .. '/' .. recovery_edited_file) == edited_text, 'the retry overwrote the edit: %q', read_file(root .. '/' .. recovery_edited_file))
end)

-- Control transfer --------------------------------------------------------------------

local control = require('mevedel.control')
local cli_command = vim.json.decode(vim.env.MEVEDEL_CLI_COMMAND)

-- Runs the mevedel CLI (another client of the workspace) with ARGS and
-- --json, processing events meanwhile (the server may ask a question).
-- Returns its exit status and decoded output.
local function cli(...)
  local argv = vim.list_extend(vim.deepcopy(cli_command), { ... })
  table.insert(argv, '--json')
  local output, status = {}, nil
  local job = vim.fn.jobstart(argv, {
    cwd = root,
    stdout_buffered = true,
    on_stdout = function(_, data)
      output = data
    end,
    on_exit = function(_, code)
      status = code
    end,
  })
  expect(job > 0, 'could not start %s', vim.inspect(argv))
  wait_for('the CLI to finish', function()
    return status ~= nil and output ~= nil
  end)
  local text = table.concat(output, '\n')
  out('cli ' .. table.concat({ ... }, ' ') .. ' -> ' .. text)
  return status, vim.json.decode(text)
end

test('control: the Grant/Keep question reaches vim.ui.select; Keep refuses, Grant hands over; take and release', function()
  open_document()
  local session = create_session('Nvim control').sessionId
  local transcript = vim.api.nvim_get_current_buf()
  settle_turn(session, 'Owned by Neovim')
  -- A granted release stays reserved for the requester this long.
  mevedel.set_settings({ controlTransfer = { promptTimeoutSeconds = 60, fenceSeconds = 1 } })
  local phases = {}
  local group = vim.api.nvim_create_augroup('mevedel-test-control', { clear = true })
  vim.api.nvim_create_autocmd('User', {
    group = group,
    pattern = 'MevedelControlChanged',
    callback = function()
      table.insert(phases, control.last_change.phase)
    end,
  })

  -- Esc (no choice) is a person at this machine: Keep, at once (not
  -- granted when the 60 s prompt timeout ends).
  answering({ ['mevedel.question'] = function(_, _, on_choice)
    on_choice(nil)
  end })
  local status, result = cli('session', 'take-control', session, '--wait', '30')
  expect(status == 1 and result.error.kind == 'rejected', 'Esc: %d %s', status, vim.inspect(result))

  answering({ ['mevedel.question'] = '^Keep$' })
  status, result = cli('session', 'take-control', session, '--wait', '60')
  expect(status == 1 and result.error.kind == 'rejected', 'keep: %d %s', status, vim.inspect(result))
  local question = selected('mevedel.question')
  expect(question and question.prompt:find('asks for control of session ' .. session, 1, true), 'asked %s', vim.inspect(asked))
  expect(vim.deep_equal(question.formatted, { 'Grant', 'Keep' }), 'actions %s', vim.inspect(question))
  expect(vim.tbl_contains(phases, 'asking') and vim.tbl_contains(phases, 'kept'), 'phases %s', vim.inspect(phases))
  expect(listed(session).action == 'Switch', 'after Keep the action is %s', listed(session).action)

  answering({ ['mevedel.question'] = '^Grant$' })
  status, result = cli('session', 'take-control', session, '--wait', '60')
  expect(status == 0 and result.outcome == 'acquired', 'grant: %d %s', status, vim.inspect(result))
  wait_for('the hand-over on the owner side', function()
    return vim.tbl_contains(phases, 'released')
  end)
  clear_notifications()
  sessions.rename('Mine again', session)
  expect(notified('read-only'), 'a rename after the hand-over: %s', vim.inspect(notifications))

  status = cli('session', 'release-control', '--session', session)
  expect(status == 0, 'the CLI did not release')
  -- Taking control back acquires at once: the grant's reservation was the
  -- CLI's, and the CLI took it.
  local taken
  control.take(session, function(result)
    taken = result
  end)
  wait_for('taking control back', function()
    return taken ~= nil or notified('alone may take it') ~= nil
  end)
  expect(taken.outcome == 'acquired' and taken.state.access == 'writable', 'taken %s', vim.inspect(taken))
  expect(sessions.rename('Mine again', session).displayName == 'Mine again', 'not writable after taking control')
  vim.cmd('MevedelReleaseControl')
  expect(listed(session).action == 'Resume', 'after release the action is %s', listed(session).action)
  taken = nil
  control.take(session, function(result)
    taken = result
  end)
  wait_for('taking it back', function()
    return taken ~= nil
  end)
  expect(taken.outcome == 'acquired', 'taken %s', vim.inspect(taken))
  expect(vim.api.nvim_buf_is_valid(transcript), 'the transcript went away')
  mevedel.set_settings({})
end)

-- Following a session owned elsewhere -------------------------------------------------

local function cli_turn(session, prompt)
  expect(cli('turn', 'begin', '--session', session, prompt) == 0, 'the CLI did not begin %s', prompt)
  expect(cli('turn', 'append', 'response', '--text', 'cli answer to ' .. prompt, '--session', session) == 0, 'append')
  expect(cli('turn', 'settle', '--session', session) == 0, 'the CLI did not settle %s', prompt)
end

test('following: a joined transcript follows the owner; off, only a refresh advances it; compact and clear', function()
  open_document()
  -- Beside the sessions this Neovim holds: the script accepts sharing the files.
  local _, created = cli('turn', 'begin', '--new', '--beside-held', '--name', 'Owned by the CLI', 'CLI prompt 1')
  local session = created.session_id
  expect(cli('turn', 'settle', '--session', session) == 0, 'the CLI did not settle')
  expect(listed(session).action == 'Join', 'action %s', listed(session).action)
  local published = {}
  local group = vim.api.nvim_create_augroup('mevedel-test-publish', { clear = true })
  vim.api.nvim_create_autocmd('User', {
    group = group,
    pattern = 'MevedelSessionPublished',
    callback = function()
      table.insert(published, sessions.last_publish)
    end,
  })
  local opened
  sessions.open(session, 'join', function(result)
    opened = result
  end)
  wait_for('the join', function()
    return opened ~= nil
  end)
  local transcript = vim.api.nvim_get_current_buf()
  expect(opened.session.access == 'read-only' and buffer_text(transcript):find('CLI prompt 1', 1, true), 'joined %s', vim.inspect(opened))

  cli_turn(session, 'CLI prompt 2')
  wait_for('the followed transcript to show the new turn', function()
    return buffer_text(transcript):find('cli answer to CLI prompt 2', 1, true) ~= nil
  end)
  local change
  for _, p in ipairs(published) do
    if p.settledTurns == 2 then
      change = p
    end
  end
  expect(change and #change.turns == 1 and change.turns[1].turn == 2 and change.turns[1].change == 'new', 'published %s', vim.inspect(published))

  vim.api.nvim_set_current_buf(transcript)
  clear_notifications()
  vim.cmd('MevedelFollowToggle')
  expect(notified(session .. ': not following'), 'toggle: %s', vim.inspect(notifications))
  cli_turn(session, 'CLI prompt 3')
  local refreshed = sessions.refresh(session)
  expect(refreshed.status == 'advanced' and refreshed.publication.settledTurns == 3, 'refresh %s', vim.inspect(refreshed))
  wait_for('the refreshed transcript to show turn 3', function()
    return buffer_text(transcript):find('CLI prompt 3', 1, true) ~= nil
  end)
  expect(sessions.refresh(session).status == 'unchanged', 'a second refresh advanced')
  local state = sessions.toggle_follow(session)
  expect(state.enabled == true and state.following == true, 'follow again %s', vim.inspect(state))
  cli_turn(session, 'CLI prompt 4')
  wait_for('the transcript, followed again, to show turn 4', function()
    return buffer_text(transcript):find('cli answer to CLI prompt 4', 1, true) ~= nil
  end)

  -- Compaction and /clear of an own session.
  open_document()
  local own = create_session('Nvim compacted').sessionId
  local own_transcript = vim.api.nvim_get_current_buf()
  settle_turn(own, 'Before the compaction')
  local compacted = sessions.compact('The summary written by Neovim', own)
  expect(compacted and compacted.segment == compacted.previousSegment + 1, 'compact %s', vim.inspect(compacted))
  wait_for('the transcript to start with the summary', function()
    return buffer_text(own_transcript):find('The summary written by Neovim', 1, true) ~= nil
  end)
  settle_turn(own, 'After the compaction')
  local cleared = sessions.clear(own)
  expect(cleared and type(cleared.chapter) == 'number', 'clear %s', vim.inspect(cleared))
  wait_for('the transcript to start the new chat', function()
    return buffer_text(own_transcript):find('After the compaction', 1, true) == nil
  end)
end)

test('settings: remoteWorkspaces makes an ssh:// address a workspace folder of the server', function()
  open_document()
  local client = mevedel_client(vim.fn.bufnr(document))
  local remote = 'ssh://127.0.0.1:1/srv/project'
  local _, _, data = mevedel.request(client, 'mevedel/session/list', { workspaceFolder = remote })
  expect(data and data.kind == 'invalid-params', 'before the setting: %s', vim.inspect(data))
  mevedel.set_settings({ remoteWorkspaces = { remote } })
  local result, err
  result, err, data = mevedel.request(client, 'mevedel/session/list', { workspaceFolder = remote })
  out('remote: ' .. tostring(err))
  expect(not result and data and data.kind == 'unavailable' and err:find('127.0.0.1', 1, true), 'with the setting: %s %s', tostring(err), vim.inspect(data))
  mevedel.set_settings({})
end)

R.finish()
