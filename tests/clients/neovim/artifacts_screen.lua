-- Interactive Neovim in tmux for the artifact store's prompts
-- (tests/clients/test_neovim.py types the answers and reads the screen):
-- the server is configured and the document opened; the test then runs
-- :MevedelArtifactNew and answers Neovim's own input() prompt.
--
-- Environment: MEVEDEL_LSP_COMMAND, MEVEDEL_TEST_DOCUMENT.

local command = vim.json.decode(vim.env.MEVEDEL_LSP_COMMAND)
vim.o.hidden = true
vim.o.laststatus = 2
vim.o.shortmess = vim.o.shortmess .. 'F'
vim.cmd('runtime plugin/mevedel.lua')
local mevedel = require('mevedel')
mevedel.setup({ cmd = command })
vim.cmd('edit ' .. vim.fn.fnameescape(vim.env.MEVEDEL_TEST_DOCUMENT))
vim.wait(60000, function()
  local client = mevedel.client()
  return client ~= nil and client.initialized == true
end, 20)
vim.cmd('redraw')
vim.api.nvim_echo({ { 'mevedel ready' } }, false, {})
