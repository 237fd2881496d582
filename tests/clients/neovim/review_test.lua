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

local H = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'agent_harness.lua')
local root, document, command, agent_command, scratch, TIMEOUT = H.root, H.document, H.command, H.agent_command, H.scratch, H.TIMEOUT
local native, out, test, wait_for, expect, read_file = H.native, H.out, H.test, H.wait_for, H.expect, H.read_file
local write_file, notifications, notified, mevedel, sessions, lifecycle = H.write_file, H.notifications, H.notified, H.mevedel, H.sessions, H.lifecycle
local chat, mevedel_client, open_document, server_call, buffer_text = H.chat, H.mevedel_client, H.open_document, H.server_call, H.buffer_text
local agent, configure, real_select, asked, answering, selected = H.agent, H.configure, H.real_select, H.asked, H.answering, H.selected
local chat_buffer, chat_text, line_of, turns_of, cursor_on, press = H.chat_buffer, H.chat_text, H.line_of, H.turns_of, H.cursor_on, H.press
local new_session = H.new_session

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

H.finish()
