-- Headless Neovim tests of the review of what a turn changed
-- (clients/neovim/lua/mevedel/review.lua) against the real server driving
-- the scripted ACP agent (tests/agents/scripted_agent.py): a turn writes a
-- file through fs/write_text_file and runs a shell command that adds,
-- deletes, renames and chmods; the review lists each change, and a text
-- file opens in a diff split; r restores a path after asking.
--
-- Run by tests/clients/test_neovim.py with MEVEDEL_TEST_WORKSPACE,
-- MEVEDEL_TEST_DOCUMENT, MEVEDEL_LSP_COMMAND and MEVEDEL_TEST_AGENT_COMMAND
-- (JSON arrays) and MEVEDEL_TEST_SCRATCH (where the agent scripts go). On
-- Neovim 0.11+ the server is started the 0.11 way (lsp/mevedel.lua and
-- vim.lsp.enable), on older versions with require('mevedel').setup().
-- Prints one PASS/FAIL line per test; exits non-zero when any failed.

local root = vim.env.MEVEDEL_TEST_WORKSPACE
local document = vim.env.MEVEDEL_TEST_DOCUMENT
local command = vim.json.decode(vim.env.MEVEDEL_LSP_COMMAND)
local agent_command = vim.json.decode(vim.env.MEVEDEL_TEST_AGENT_COMMAND)
local scratch = vim.env.MEVEDEL_TEST_SCRATCH
local TIMEOUT = 30000
local native = vim.fn.has('nvim-0.11') == 1

local function out(text)
  io.stdout:write(text .. '\n')
end

local failures, ran = 0, 0
local function test(name, body)
  ran = ran + 1
  local ok, err = xpcall(body, debug.traceback)
  if ok then
    out('PASS ' .. name)
  else
    failures = failures + 1
    out('FAIL ' .. name .. '\n' .. tostring(err))
  end
end

local function wait_for(what, predicate)
  if not vim.wait(TIMEOUT, predicate, 20) then
    error('timed out waiting for ' .. what, 2)
  end
end

local function expect(condition, message, ...)
  if not condition then
    error(string.format(message, ...), 2)
  end
end

local function read_file(path)
  local handle = assert(io.open(path, 'rb'))
  local text = handle:read('*a')
  handle:close()
  return text
end

local function write_file(path, text)
  local handle = assert(io.open(path, 'wb'))
  handle:write(text)
  handle:close()
end

local notifications = {}
vim.notify = function(message, level)
  table.insert(notifications, { message = message, level = level })
  out('notify: ' .. tostring(message))
end

local function notified(text)
  for _, n in ipairs(notifications) do
    if tostring(n.message):find(text, 1, true) then
      return n
    end
  end
end

vim.cmd('filetype on')
vim.o.hidden = true
vim.cmd('runtime plugin/mevedel.lua')
local mevedel = require('mevedel')
if native then
  -- The one line a 0.11 user writes (lsp/mevedel.lua is on 'runtimepath'),
  -- with the server command of the test installation.
  vim.lsp.config('mevedel', { cmd = command })
  vim.lsp.enable('mevedel')
else
  mevedel.setup({ cmd = command })
end
local sessions = require('mevedel.sessions')
local lifecycle = require('mevedel.lifecycle')
local chat = require('mevedel.chat')

local function mevedel_client(bufnr)
  local found = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr or 0, name = 'mevedel' })
    or vim.tbl_filter(function(c)
      return c.name == 'mevedel'
    end, vim.lsp.buf_get_clients(bufnr or 0))
  return found[1]
end

local function open_document()
  local bufnr = vim.fn.bufnr(document)
  if bufnr > 0 and vim.api.nvim_buf_is_loaded(bufnr) then
    vim.api.nvim_set_current_buf(bufnr)
  else
    vim.cmd('edit ' .. vim.fn.fnameescape(document))
  end
  wait_for('the server to attach', function()
    local client = mevedel_client(0)
    return client ~= nil and client.initialized == true
  end)
end

local function server_call(method, params)
  local result, err = mevedel.request(mevedel_client(vim.fn.bufnr(document)), method, params or vim.empty_dict())
  expect(result, '%s failed: %s', method, tostring(err))
  return result
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr or 0, 0, -1, false), '\n')
end

-- Writes an agent script; returns the agent's command.
local scripts = 0
local function agent(turns, extra)
  scripts = scripts + 1
  local path = string.format('%s/script-%d.json', scratch, scripts)
  local script = vim.tbl_extend('force', { turns = turns }, extra or {})
  write_file(path, vim.json.encode(script))
  local argv = vim.deepcopy(agent_command)
  table.insert(argv, path)
  return { command = argv }
end

local function configure(agents, default)
  mevedel.set_settings({ agents = agents, defaultAgent = default })
end

-- Stands in for the user at vim.ui.select: BY_KIND maps a select's kind to
-- a Lua pattern its chosen line must match, or to a function of (items,
-- formatted, on_choice) that answers (now or later).
local real_select = vim.ui.select
local asked = {}
local function answering(by_kind)
  asked = {}
  vim.ui.select = function(items, opts, on_choice)
    local formatted = {}
    for i, item in ipairs(items) do
      formatted[i] = opts.format_item and opts.format_item(item) or tostring(item)
    end
    table.insert(asked, { kind = opts.kind, prompt = opts.prompt, formatted = formatted, opts = opts })
    local answer = by_kind[opts.kind]
    if answer == nil then
      error(string.format('an unexpected %s question: %s %s', tostring(opts.kind), tostring(opts.prompt), vim.inspect(formatted)))
    end
    if type(answer) == 'function' then
      return answer(items, formatted, on_choice)
    end
    for i, text in ipairs(formatted) do
      if text:find(answer) then
        return on_choice(items[i])
      end
    end
    error(string.format('%s offers nothing matching %s: %s', tostring(opts.prompt), answer, vim.inspect(formatted)))
  end
end

local function selected(kind)
  for i = #asked, 1, -1 do
    if asked[i].kind == kind then
      return asked[i]
    end
  end
end

local function chat_buffer(session)
  local c = chat.get(session)
  return c and c.bufnr
end

local function chat_text(session)
  local bufnr = chat_buffer(session)
  return bufnr and buffer_text(bufnr) or ''
end

local function line_of(bufnr, pattern)
  for row, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if line:find(pattern) then
      return row
    end
  end
end

local function turns_of(session)
  return server_call('mevedel/turn/list', { sessionId = session }).turns
end

-- Goes to the chat window of SESSION and puts the cursor on PATTERN.
local function cursor_on(session, pattern)
  local bufnr = chat_buffer(session)
  local win = vim.fn.bufwinid(bufnr)
  expect(win >= 0, 'the chat of %s is not in a window', session)
  vim.api.nvim_set_current_win(win)
  local row = line_of(bufnr, pattern)
  expect(row, 'no %s in the chat: %s', pattern, buffer_text(bufnr))
  vim.api.nvim_win_set_cursor(win, { row, 0 })
end

local function press(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'x', false)
end

local function new_session(name)
  open_document()
  local session = sessions.create(name).sessionId
  open_document()
  return session
end

-- Tests ------------------------------------------------------------------------------

local SHELL = "set -e; chmod 755 run.sh; mv old.txt renamed.txt; rm gone.txt; mkdir built; "
  .. "ln -s app.py link.py; printf 'new\\n' > added.txt; printf '\\000\\001\\002binary' > blob.bin; rmdir emptydir"

local review = require('mevedel.review')

local function window_of(name_pattern)
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win))
    if name:find(name_pattern) then
      return win
    end
  end
end

local session
test('review: a turn from the chat lists every change of its fs write and its shell command', function()
  vim.fn.mkdir(root .. '/emptydir', 'p')
  write_file(root .. '/app.py', "print('one')\nprint('two')\n")
  write_file(root .. '/run.sh', '#!/bin/sh\necho run\n')
  vim.loop.fs_chmod(root .. '/run.sh', tonumber('644', 8))
  write_file(root .. '/old.txt', 'the same bytes move\n')
  write_file(root .. '/gone.txt', 'bye\n')
  session = new_session('Nvim review')
  configure({
    scripted = agent({
      {
        { write = { path = 'app.py', content = "print('one')\nprint('TWO')\nprint('three')\n" } },
        { terminal = { command = 'sh', args = { '-c', SHELL } } },
        { say = 'changed things' },
      },
      { { write = { path = 'added.txt', content = 'new\nand more\n' } }, { say = 'added more' } },
    }),
  }, nil)
  answering({})
  vim.cmd('MevedelPrompt Change things')
  wait_for('the turn to settle', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  expect(chat_text(session):find('ran: exit 0', 1, true), 'the shell command failed: %s', chat_text(session))
  -- The chat's review key on turn 1.
  cursor_on(session, 'changed things')
  press(mevedel.options().chat.keys.review)
  local bufnr = vim.api.nvim_get_current_buf()
  local name = vim.api.nvim_buf_get_name(bufnr)
  expect(name:find('mevedel review ' .. session .. ' turn 1', 1, true), 'the review key opened %s', name)
  local text = buffer_text(bufnr)
  out('review:\n' .. text)
  expect(vim.bo[bufnr].modifiable == false, 'the review is modifiable')
  expect(text:find('Turn 1 of ' .. session .. ': 9 paths, 3 insertions(+), 2 deletions(-)', 1, true), 'no summary: %s', text)
  for _, line in ipairs({
    'added.txt: added',
    "app.py: modified  +2 -1",
    'blob.bin: added (mode 644)  (binary: 0 -> 9 bytes)',
    'built: directory created',
    'emptydir: directory removed',
    'gone.txt: deleted  +0 -1',
    'link.py: link created -> app.py',
    'old.txt -> renamed.txt: renamed',
    'run.sh: mode changed (644 -> 755)',
  }) do
    expect(text:find('\n' .. line, 1, true), 'no line %q in the review: %s', line, text)
  end
  -- <CR> on app.py: a diff split of its two sides.
  local row = line_of(bufnr, '^app%.py: modified')
  vim.api.nvim_win_set_cursor(0, { row, 0 })
  local tab = vim.api.nvim_get_current_tabpage()
  press(review.keys.open)
  expect(vim.api.nvim_get_current_tabpage() ~= tab, 'no new tab for the diff split')
  local wins = vim.api.nvim_tabpage_list_wins(0)
  expect(#wins == 2, '%d windows in the diff tab', #wins)
  local before, after = window_of('mevedel before turn 1: app%.py$'), window_of('mevedel after turn 1: app%.py$')
  expect(before and after, 'the split shows %s', vim.inspect(vim.tbl_map(function(w)
    return vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w))
  end, wins)))
  expect(vim.wo[before].diff and vim.wo[after].diff, 'the windows are not in diff mode')
  local old_buf, new_buf = vim.api.nvim_win_get_buf(before), vim.api.nvim_win_get_buf(after)
  expect(buffer_text(old_buf) == "print('one')\nprint('two')", 'before: %s', buffer_text(old_buf))
  expect(buffer_text(new_buf) == "print('one')\nprint('TWO')\nprint('three')", 'after: %s', buffer_text(new_buf))
  expect(vim.bo[old_buf].modifiable == false and vim.bo[new_buf].modifiable == false, 'the sides are modifiable')
  expect(vim.bo[new_buf].filetype == 'python', 'the after side has filetype %q', vim.bo[new_buf].filetype)
  -- Line 2 differs: the diff highlight says so, line 1 is the same.
  vim.api.nvim_set_current_win(after)
  expect(vim.fn.diff_hlID(2, 1) ~= 0 and vim.fn.diff_hlID(1, 1) == 0, 'diff highlights: line 1 %d, line 2 %d', vim.fn.diff_hlID(1, 1), vim.fn.diff_hlID(2, 1))
  vim.cmd('tabclose')
  -- A rename compares the old name with the new; a binary file tells why not.
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_win_set_cursor(0, { line_of(bufnr, '^old%.txt %-> renamed%.txt'), 0 })
  press(review.keys.open)
  expect(window_of('mevedel before turn 1: old%.txt$') and window_of('mevedel after turn 1: renamed%.txt$'), 'the rename split: %s',
    vim.inspect(vim.tbl_map(vim.api.nvim_buf_get_name, vim.api.nvim_list_bufs())))
  vim.cmd('tabclose')
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_win_set_cursor(0, { line_of(bufnr, '^blob%.bin'), 0 })
  local tabs = #vim.api.nvim_list_tabpages()
  press(review.keys.open)
  expect(#vim.api.nvim_list_tabpages() == tabs, 'a binary file opened a split')
  expect(notified('blob.bin: added (mode 644): no text to compare (a binary file)'), 'the binary file was not told')
end)

test('review: the latest turn read again with R, a range and :MevedelReview', function()
  -- The latest turn (turn 1 now), then turn 2 runs and R reads it.
  local latest = review.open(nil, nil, session)
  expect(buffer_text(latest):find('\napp.py: modified', 1, true), 'latest: %s', buffer_text(latest))
  chat.send({ text = 'Add more', session = session })
  wait_for('the second turn to settle', function()
    return chat.status(session) == 'idle (turn 2 completed)'
  end)
  vim.api.nvim_set_current_buf(latest)
  press(review.keys.refresh)
  local text = buffer_text(latest)
  out('after R:\n' .. text)
  expect(text:find('Turn 2 of ' .. session, 1, true) and text:find('\nadded.txt: modified  +1 -0', 1, true), 'after R: %s', text)
  expect(not text:find('app.py', 1, true), 'turn 1 is still shown: %s', text)
  expect(vim.api.nvim_buf_get_name(latest):find('turn 2$'), 'the buffer is called %s', vim.api.nvim_buf_get_name(latest))
  -- A range: each path says which turns touched it.
  vim.cmd('MevedelReview 1..2')
  text = buffer_text(0)
  expect(text:find('Turns 1..2 of ' .. session, 1, true), 'range: %s', text)
  expect(text:find('\nadded.txt: added (mode 644)  [turns 1..2]  +2 -0', 1, true), 'range: %s', text)
  expect(text:find('\napp.py: modified  [turn 1]  +2 -1', 1, true), 'range: %s', text)
  -- Picked: every turn.
  answering({ ['mevedel.review'] = '^All turns' })
  vim.cmd('MevedelReview')
  expect(selected('mevedel.review').formatted[2]:find('^2 '), 'turns offered: %s', vim.inspect(selected('mevedel.review').formatted))
  expect(vim.api.nvim_buf_get_name(0):find('turns 1..2$'), 'the pick opened %s', vim.api.nvim_buf_get_name(0))
  -- A typo is told, with what was expected.
  vim.cmd('MevedelReview two')
  expect(notified('usage: :MevedelReview'), 'the typo was not told')
  -- A turn that does not exist: the server's words.
  vim.cmd('MevedelReview 9')
  expect(notified('no turn 9'), 'the missing turn was not told')
end)

local function mode_of(path)
  return bit.band(vim.loop.fs_stat(root .. '/' .. path).mode, tonumber('777', 8))
end

test('review: r restores a path to its state before the range after showing it; Esc, an empty answer and Cancel change nothing', function()
  -- Neovim's own confirmation (inputlist), answered with keys.
  vim.ui.select = real_select
  vim.cmd('MevedelReview 1..')
  local bufnr = vim.api.nvim_get_current_buf()
  local text = buffer_text(bufnr)
  expect(text:find('r: restore the file', 1, true), 'the review does not name r: %s', text)
  local app_before, added = "print('one')\nprint('two')\n", read_file(root .. '/added.txt')
  local function on(pattern)
    vim.api.nvim_set_current_buf(bufnr)
    vim.api.nvim_win_set_cursor(0, { line_of(bufnr, pattern), 0 })
  end
  -- Esc: nothing; the impact window showed the restore's diff.
  on('^app%.py: modified')
  press(review.keys.restore .. '<Esc>')
  local shown = lifecycle.last_impact
  out('shown: ' .. vim.inspect(shown))
  expect(shown.summary == 'Restore app.py to its state before turn 1 (app.py: modified)?', 'summary %s', shown.summary)
  local details = table.concat(shown.details, '\n')
  expect(details:find("=== app.py: modified\n--- a/app.py\n+++ b/app.py\n", 1, true), 'details %s', details)
  expect(details:find("-print('TWO')\n-print('three')\n+print('two')", 1, true), 'details %s', details)
  expect(notified('restore of app.py cancelled; nothing changed'), 'the Esc was not told')
  expect(read_file(root .. '/app.py') == "print('one')\nprint('TWO')\nprint('three')\n", 'Esc changed app.py')
  expect(vim.fn.bufwinid(vim.fn.bufnr(lifecycle.impact_buffer_name)) < 0, 'the impact window stayed open')
  -- An empty answer, then Cancel: nothing either.
  on('^run%.sh: mode changed')
  press(review.keys.restore .. '<CR>')
  expect(lifecycle.last_impact.summary == 'Restore run.sh to its state before turn 1 (run.sh: mode changed (755 -> 644))?', 'summary %s',
    lifecycle.last_impact.summary)
  on('^run%.sh: mode changed')
  press(review.keys.restore .. '2<CR>')
  expect(mode_of('run.sh') == tonumber('755', 8), 'run.sh has mode %o', mode_of('run.sh'))
  -- Restore: app.py is back as a new turn; other files stay as they are.
  local turns = #turns_of(session)
  on('^app%.py: modified')
  press(review.keys.restore .. '1<CR>')
  expect(read_file(root .. '/app.py') == app_before, 'app.py is %q', read_file(root .. '/app.py'))
  expect(read_file(root .. '/added.txt') == added, 'added.txt changed')
  expect(mode_of('run.sh') == tonumber('755', 8), 'run.sh has mode %o', mode_of('run.sh'))
  expect(#turns_of(session) == turns + 1, 'the restore is not a turn')
  expect(notified(string.format('restored app.py to its state before turn 1 as turn %d (Rewind to before turn %d undoes it)', turns + 1, turns + 1)),
    'the restore was not told')
  -- The review was read again: turns 1.. no longer change app.py.
  text = buffer_text(bufnr)
  out('after the restore:\n' .. text)
  expect(not text:find('\napp.py', 1, true), 'app.py is still listed: %s', text)
  expect(text:find('\nrun.sh: mode changed (644 -> 755)', 1, true), 'run.sh is gone: %s', text)
  -- run.sh: its mode is back, its content the same.
  on('^run%.sh: mode changed')
  press(review.keys.restore .. '1<CR>')
  expect(mode_of('run.sh') == tonumber('644', 8), 'run.sh has mode %o', mode_of('run.sh'))
  expect(read_file(root .. '/run.sh') == '#!/bin/sh\necho run\n', 'run.sh is %q', read_file(root .. '/run.sh'))
  expect(read_file(root .. '/app.py') == app_before, 'app.py changed again')
end)

vim.ui.select = real_select
out(string.format('%d tests, %d failed', ran, failures))
vim.cmd(failures == 0 and 'qa!' or 'cq!')
