-- What the chat tests share beyond the runner (runner.lua): the scripted
-- agent the Python side gives (tests/clients/test_neovim.py:
-- MEVEDEL_TEST_AGENT_COMMAND, MEVEDEL_TEST_SCRATCH), the server started the
-- way a user of this Neovim does (0.11+: vim.lsp.enable) and the chat
-- helpers. Loaded with dofile by each test file, which binds the names it
-- uses (the runner's among them).

local R = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'runner.lua')
local command, expect, write_file, buffer_text = R.command, R.expect, R.write_file, R.buffer_text
local open_document, server_call = R.open_document, R.server_call
local agent_command = vim.json.decode(vim.env.MEVEDEL_TEST_AGENT_COMMAND)
local scratch = vim.env.MEVEDEL_TEST_SCRATCH
local native = vim.fn.has('nvim-0.11') == 1

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
  local session = R.create_session(name).sessionId
  open_document()
  return session
end

return vim.tbl_extend('error', R, {
  agent_command = agent_command,
  scratch = scratch,
  native = native,
  mevedel = mevedel,
  sessions = sessions,
  lifecycle = lifecycle,
  chat = chat,
  agent = agent,
  configure = configure,
  chat_buffer = chat_buffer,
  chat_text = chat_text,
  line_of = line_of,
  turns_of = turns_of,
  cursor_on = cursor_on,
  press = press,
  new_session = new_session,
})
