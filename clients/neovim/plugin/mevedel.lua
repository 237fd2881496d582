-- User commands of the mevedel client; `require('mevedel').setup{}` starts
-- the server for Markdown and text buffers.
if vim.g.loaded_mevedel then
  return
end
vim.g.loaded_mevedel = true

vim.api.nvim_create_user_command('MevedelRead', function(command)
  require('mevedel').read_address(command.args)
end, { nargs = 1, desc = 'Open what a mevedel resource address names (read-only when it is not a file)' })

vim.api.nvim_create_user_command('MevedelAttach', function()
  require('mevedel').attach(0)
end, { nargs = 0, desc = 'Attach the mevedel language server to the current buffer' })
