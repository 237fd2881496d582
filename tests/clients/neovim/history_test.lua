-- Headless Neovim test of the prompt buffer's input history
-- (clients/neovim/lua/mevedel/input_history.lua) against the real server
-- and the scripted ACP agent: <Up> and <Down> pressed in the prompt buffer
-- step through the prompts sent in the workspace, whose history file
-- started corrupt (renamed aside by the server, told once).
--
-- Run by tests/clients/test_neovim.py like review_test.lua. Prints one
-- PASS/FAIL line per test; exits non-zero when any failed.

local H = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'agent_harness.lua')
local out, test, wait_for, expect, notifications = H.out, H.test, H.wait_for, H.expect, H.notifications
local chat, agent, configure, answering, new_session, press = H.chat, H.agent, H.configure, H.answering, H.new_session, H.press

local function told(text)
  local count = 0
  for _, n in ipairs(notifications) do
    if tostring(n.message):find(text, 1, true) then
      count = count + 1
    end
  end
  return count
end

local function prompt_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
end

test('history: <Up> and <Down> in the prompt buffer step through the prompts sent', function()
  local session = new_session('Nvim history')
  configure({ scripted = agent({ { { say = 'one' } }, { { say = 'two' } } }) }, nil)
  answering({})
  -- Nothing sent yet: the corrupt history was renamed aside, and said once.
  local empty = chat.compose({ session = session })
  vim.cmd('stopinsert')
  press('<Up>')
  expect(told('renamed to .mevedel/input-history.corrupt-') == 1, 'the corrupt history was not told once')
  expect(told('no prompt was sent in this workspace yet') == 1, 'an empty history was not said')
  vim.api.nvim_buf_set_lines(empty, 0, -1, false, { 'the first prompt' })
  vim.cmd('write')
  wait_for('the first turn', function()
    return chat.status(session) == 'idle (turn 1 completed)'
  end)
  local second = chat.compose({ session = session })
  vim.api.nvim_buf_set_lines(second, 0, -1, false, { 'the second', 'prompt' })
  vim.cmd('stopinsert')
  vim.cmd('write')
  wait_for('the second turn', function()
    return chat.status(session) == 'idle (turn 2 completed)'
  end)
  -- In Insert mode, as one types: the draft, then back through the history.
  local third = chat.compose({ session = session })
  vim.api.nvim_buf_set_lines(third, 0, -1, false, { 'my draft' })
  press('A<Up>')
  expect(prompt_text(third) == 'the second\nprompt', 'first <Up>: %q', prompt_text(third))
  press('<Up>')
  expect(prompt_text(third) == 'the first prompt', 'second <Up>: %q', prompt_text(third))
  press('<Up>')
  expect(prompt_text(third) == 'the first prompt' and told('no earlier prompt') == 1, 'past the oldest: %q', prompt_text(third))
  press('<Down>')
  expect(prompt_text(third) == 'the second\nprompt', 'first <Down>: %q', prompt_text(third))
  -- On its first line <Down> moves down a line; on the last it goes on.
  expect(vim.api.nvim_win_get_cursor(0)[1] == 2, 'the cursor is on line %d', vim.api.nvim_win_get_cursor(0)[1])
  press('<Up>')
  expect(prompt_text(third) == 'the second\nprompt' and vim.api.nvim_win_get_cursor(0)[1] == 1, 'an <Up> off the first line changed the text')
  press('<Down><Down>')
  expect(prompt_text(third) == 'my draft', 'back to the draft: %q', prompt_text(third))
  expect(told('renamed to .mevedel/input-history.corrupt-') == 1, 'the corrupt history was told again')
  out('history steps done')
  vim.cmd('stopinsert')
  press('q')
end)

H.finish()
