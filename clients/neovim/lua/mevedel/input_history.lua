-- mevedel.input_history: <Up> and <Down> in the prompt buffer step through
-- the prompts sent in the workspace (`mevedel/input/history`, the same
-- history Emacs's M-p/M-n, VS Code's chat input and `mevedel prompt` read).
-- On the first line <Up> goes to the prompt sent before (on any other line
-- it moves up a line); on the last line <Down> goes forward, back to what
-- was written before stepping in. Fetched at the first step of a prompt; a
-- history file the server could not read is renamed aside and told once.

local mevedel = require('mevedel')
local levels = vim.log.levels

local M = {}

-- bufnr -> { entries = newest first (nil: not fetched), index = 0 (the
-- draft) or the entry shown, draft = lines }
local state = {}

local function entries(s)
  if s.entries then
    return s.entries
  end
  s.entries = {}
  local client = mevedel.client()
  if not client then
    return s.entries
  end
  local result, err = mevedel.request(client, 'mevedel/input/history', vim.empty_dict())
  if not result then
    mevedel.notify('the input history could not be read: ' .. tostring(err), levels.WARN)
    return s.entries
  end
  if type(result.warning) == 'string' then
    mevedel.notify(result.warning, levels.WARN)
  end
  local sent = result.entries or {}
  for i = #sent, 1, -1 do
    table.insert(s.entries, sent[i])
  end
  return s.entries
end

--- Show the prompt N entries older (newer when N < 0) in BUFNR.
function M.step(bufnr, n)
  local s = state[bufnr]
  local list = entries(s)
  local index = s.index + n
  if #list == 0 then
    mevedel.notify('no prompt was sent in this workspace yet', levels.INFO)
    return
  elseif index > #list then
    mevedel.notify('no earlier prompt', levels.INFO)
    return
  elseif index < 0 then
    mevedel.notify('no later prompt; this is your draft', levels.INFO)
    return
  end
  if s.index == 0 then
    s.draft = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  end
  s.index = index
  local lines = index == 0 and s.draft or vim.split(list[index], '\n', { plain = true })
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  -- Where the next step in the same direction starts from.
  local row = n > 0 and 1 or #lines
  vim.api.nvim_win_set_cursor(0, { row, #lines[row] })
end

--- Give the prompt buffer BUFNR its <Up> and <Down>.
function M.attach(bufnr)
  state[bufnr] = { index = 0 }
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = bufnr,
    callback = function()
      state[bufnr] = nil
    end,
  })
  local function move(delta)
    return function()
      local row, col = unpack(vim.api.nvim_win_get_cursor(0))
      local last = vim.api.nvim_buf_line_count(bufnr)
      if (delta < 0 and row > 1) or (delta > 0 and row < last) then
        local line = vim.api.nvim_buf_get_lines(bufnr, row + delta - 1, row + delta, false)[1] or ''
        vim.api.nvim_win_set_cursor(0, { row + delta, math.min(col, #line) })
      else
        M.step(bufnr, -delta)
      end
    end
  end
  vim.keymap.set({ 'n', 'i' }, '<Up>', move(-1), { buffer = bufnr, desc = 'mevedel: the prompt sent before (on the first line)' })
  vim.keymap.set({ 'n', 'i' }, '<Down>', move(1), { buffer = bufnr, desc = 'mevedel: the next prompt, or the draft (on the last line)' })
end

return M
