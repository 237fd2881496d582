-- Interactive Neovim in tmux (tests/clients/test_neovim.py drives the
-- keys and reads the screen): the server and the scripted agent are
-- configured, a session is created and a prompt sent; from then on the
-- test answers the permission question, opens the chat, rewinds from it
-- and reads the screen at each step, as a user would.
--
-- Environment: MEVEDEL_LSP_COMMAND, MEVEDEL_TEST_DOCUMENT,
-- MEVEDEL_TEST_SCREEN_AGENT (the agent's command, a JSON array),
-- MEVEDEL_TEST_SCREEN_SETTINGS (more server settings, a JSON object),
-- MEVEDEL_TEST_SCREEN_LOG (where messages go: a hit-enter prompt would
-- stall the keys the test sends).

local command = vim.json.decode(vim.env.MEVEDEL_LSP_COMMAND)
local agent = vim.json.decode(vim.env.MEVEDEL_TEST_SCREEN_AGENT)
local log = assert(io.open(vim.env.MEVEDEL_TEST_SCREEN_LOG, 'a'))

-- Neovim's own, for the steps where a hit-enter prompt is what is tested.
_G.mevedel_real_notify = vim.notify
vim.notify = function(message)
  log:write(tostring(message) .. '\n')
  log:flush()
end

vim.cmd('filetype on')
vim.cmd('syntax on')
vim.o.hidden = true
vim.o.laststatus = 2
vim.o.shortmess = vim.o.shortmess .. 'F'
vim.cmd('runtime plugin/mevedel.lua')
local mevedel = require('mevedel')
local settings = vim.tbl_extend('force', { agents = { scripted = { command = agent } }, defaultAgent = 'scripted' },
  vim.json.decode(vim.env.MEVEDEL_TEST_SCREEN_SETTINGS or '{}'))
if vim.fn.has('nvim-0.11') == 1 then
  vim.lsp.config('mevedel', { cmd = command, settings = { mevedel = settings } })
  vim.lsp.enable('mevedel')
else
  mevedel.setup({ cmd = command, settings = settings })
end

vim.cmd('edit ' .. vim.fn.fnameescape(vim.env.MEVEDEL_TEST_DOCUMENT))
vim.wait(30000, function()
  local client = mevedel.client()
  return client ~= nil
end, 20)
local state = require('mevedel.sessions').create('Screen demo')
vim.cmd('edit ' .. vim.fn.fnameescape(vim.env.MEVEDEL_TEST_DOCUMENT))
require('mevedel.chat').send({ text = 'Please edit chat.txt', session = state.sessionId })
log:write('prompt sent\n')
log:flush()
