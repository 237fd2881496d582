-- mevedel.review: see what a turn (or a range of turns) changed in the tree.
--
-- `mevedel/turn/diff` names every path the turns changed -- fs writes,
-- ApplyPatch and shell commands alike, from the session's checkpoints --
-- with its kind of change and, asked with `contents`, the whole text of both
-- sides of every text file. The review buffer lists the paths, each with
-- the server's one-line description (a mode change, a rename, a link, a
-- directory, a binary file, a capture gap); <CR> on a text file opens a
-- diff split in a new tab: two read-only scratch buffers holding the text
-- before and after, under `:diffthis`. What the split compares is what the
-- review listed (both come from one answer); R reads the diff again. r
-- restores the path under the cursor to its state before the review's
-- first turn that changed it (`mevedel/turn/restoreFile`): what that does
-- is shown in the impact window and asked first, and a yes records it as
-- a turn of its own, which Rewind undoes.

local mevedel = require('mevedel')
local client_or_notify, present, scoped = mevedel.client_or_notify, mevedel.present, mevedel.scoped

local M = {}

local levels = vim.log.levels

--- Buffer-local keys of the review buffer.
M.keys = { open = '<CR>', restore = 'r', refresh = 'R', close = 'q' }

-- The review of each buffer: { client_id, session, first, last, result }.
local reviews = {}

local function plural(count, word)
  return string.format('%d %s%s', count, word, count == 1 and '' or 's')
end

local function span(result)
  if result.first == result.last then
    return string.format('turn %d', result.first)
  end
  return string.format('turns %d..%d', result.first, result.last)
end

--- (first, last) of TEXT: N, N..M, N.., ..M, all, or empty (the latest
--- turn: nil, nil); nil and the reason when it is none of these.
function M.parse_range(text)
  text = vim.trim(text or '')
  if text == '' then
    return nil, nil
  end
  if text == 'all' then
    return 1, nil
  end
  local n = text:match('^(%d+)$')
  if n then
    return tonumber(n), tonumber(n)
  end
  local first, last = text:match('^(%d*)%.%.(%d*)$')
  if first then
    return first == '' and 1 or tonumber(first), last ~= '' and tonumber(last) or nil
  end
  return false, string.format('%q is not a turn or a range (N, N..M, N.., ..M or all)', text)
end

-- The one line of a path in the list.
local function path_line(file, ranged)
  local line = file.description
  if ranged then
    if file.firstTurn == file.lastTurn then
      line = line .. string.format('  [turn %d]', file.firstTurn)
    else
      line = line .. string.format('  [turns %d..%d]', file.firstTurn, file.lastTurn)
    end
  end
  if file.binary == true then
    line = line .. string.format('  (binary: %d -> %d bytes)', present(file.before.size) and file.before.size or 0,
      present(file.after.size) and file.after.size or 0)
  elseif present(file.noText) then
    line = line .. '  (no line diff: ' .. file.noText .. ')'
  elseif present(file.diff) and file.diff ~= '' then
    line = line .. string.format('  +%d -%d', file.insertions or 0, file.deletions or 0)
  end
  return line
end

--- The lines of the review buffer for RESULT, and for each line the path
--- change it lists (or nil).
function M.lines(result)
  local lines, files = {}, {}
  local changed = result.files or {}
  table.insert(lines, string.format('%s of %s: %s, %d insertion%s(+), %d deletion%s(-)', span(result):gsub('^%l', string.upper),
    result.sessionId, plural(#changed, 'path'), result.insertions, result.insertions == 1 and '' or 's', result.deletions,
    result.deletions == 1 and '' or 's'))
  table.insert(lines, string.format('%s: diff split of a text file   %s: restore the file   %s: read again   %s: close', M.keys.open,
    M.keys.restore, M.keys.refresh, M.keys.close))
  table.insert(lines, '')
  if #changed == 0 then
    table.insert(lines, span(result) .. ' changed nothing in the tree')
  end
  local ranged = result.first ~= result.last
  for _, file in ipairs(changed) do
    table.insert(lines, path_line(file, ranged))
    files[#lines] = file
  end
  return lines, files
end

local function render(bufnr)
  local review = reviews[bufnr]
  local lines, files = M.lines(review.result)
  review.files = files
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'modified', false)
end

local function fetch(client, session, first, last)
  local params = scoped(session, { contents = true })
  params.first, params.last = first, last
  local result, err = mevedel.request(client, 'mevedel/turn/diff', params)
  if not result then
    mevedel.notify(err)
  end
  return result
end

-- A named scratch buffer, emptied (a buffer of that name is reused).
local function scratch(name)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.b[b].mevedel_review_name == name then
      return b
    end
  end
  local bufnr = vim.api.nvim_create_buf(true, true)
  vim.api.nvim_buf_set_name(bufnr, name)
  vim.b[bufnr].mevedel_review_name = name
  vim.api.nvim_buf_set_option(bufnr, 'buftype', 'nofile')
  vim.api.nvim_buf_set_option(bufnr, 'swapfile', false)
  return bufnr
end

local function map(bufnr, key, run, desc)
  vim.keymap.set('n', key, run, { buffer = bufnr, silent = true, nowait = true, desc = desc })
end

--- Show what turns FIRST..LAST of SESSION changed (both nil: the latest
--- turn; LAST nil: up to the latest) in the review buffer, in the current
--- window. Returns the buffer, or nil when the server refused (told).
function M.open(first, last, session)
  local client = client_or_notify()
  local result = client and fetch(client, session, first, last)
  if not result then
    return nil
  end
  local bufnr = scratch(string.format('mevedel review %s %s', result.sessionId, span(result)))
  vim.api.nvim_buf_set_option(bufnr, 'bufhidden', 'hide')
  vim.api.nvim_buf_set_option(bufnr, 'filetype', 'mevedel-review')
  vim.b[bufnr].mevedel_session = result.sessionId
  reviews[bufnr] = { client_id = client.id, session = result.sessionId, first = first, last = last, result = result }
  render(bufnr)
  map(bufnr, M.keys.open, function()
    M.open_at_cursor()
  end, 'mevedel: diff split of the path under the cursor')
  map(bufnr, M.keys.restore, function()
    M.restore_at_cursor()
  end, 'mevedel: restore the path under the cursor to its state before the review')
  map(bufnr, M.keys.refresh, function()
    M.refresh(bufnr)
  end, 'mevedel: read the review again')
  map(bufnr, M.keys.close, function()
    if #vim.api.nvim_list_wins() > 1 then
      pcall(vim.cmd, 'close')
    else
      pcall(vim.cmd, 'bprevious')
    end
  end, 'mevedel: close the review')
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_win_set_cursor(0, { math.min(4, vim.api.nvim_buf_line_count(bufnr)), 0 })
  return bufnr
end

--- Read the review in BUFNR again (the same range, so "the latest turn"
--- follows new turns).
function M.refresh(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local review = reviews[bufnr]
  if not review then
    return nil
  end
  local client = vim.lsp.get_client_by_id(review.client_id) or client_or_notify()
  local result = client and fetch(client, review.session, review.first, review.last)
  if not result then
    return nil
  end
  review.result = result
  pcall(vim.api.nvim_buf_set_name, bufnr, string.format('mevedel review %s %s', result.sessionId, span(result)))
  vim.b[bufnr].mevedel_review_name = vim.api.nvim_buf_get_name(bufnr)
  render(bufnr)
  return bufnr
end

--- The path change under the cursor of a review buffer, or nil.
function M.file_at_cursor()
  local review = reviews[vim.api.nvim_get_current_buf()]
  return review and review.files and review.files[vim.api.nvim_win_get_cursor(0)[1]]
end

local function set_filetype(bufnr, path)
  local ok, found = pcall(vim.filetype.match, { filename = path, buf = bufnr })
  if ok and type(found) == 'string' then
    vim.api.nvim_buf_set_option(bufnr, 'filetype', found)
  elseif not ok then
    -- Neovim 0.7: match(name, bufnr) sets the filetype itself.
    pcall(vim.filetype.match, path, bufnr)
  end
end

local function side_buffer(side, turn, path, text)
  local bufnr = scratch(string.format('mevedel %s turn %d: %s', side, turn, path))
  vim.api.nvim_buf_set_option(bufnr, 'bufhidden', 'wipe')
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  local lines = vim.split(text, '\n', { plain = true })
  if lines[#lines] == '' then
    table.remove(lines)
  end
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'modified', false)
  set_filetype(bufnr, path)
  return bufnr
end

--- Open the diff split of FILE (a PathChange with both sides' text): a new
--- tab, before on the left and after on the right, under :diffthis.
--- Returns the two buffers, or nil when FILE has no text to compare (its
--- description is told instead).
function M.diff_split(file)
  local before, after = file.before.text, file.after.text
  if not present(before) or not present(after) then
    local why = file.binary == true and ' (a binary file)' or present(file.noText) and ' (' .. file.noText .. ')' or ''
    mevedel.notify(file.description .. ': no text to compare' .. why, levels.INFO)
    return nil
  end
  local old = side_buffer('before', file.firstTurn, present(file.renamedFrom) and file.renamedFrom or file.path, before)
  local new = side_buffer('after', file.lastTurn, file.path, after)
  vim.cmd('tabnew')
  local scratch_tab_buffer = vim.api.nvim_get_current_buf()
  vim.api.nvim_set_current_buf(old)
  vim.cmd('diffthis')
  vim.cmd('rightbelow vsplit')
  vim.api.nvim_set_current_buf(new)
  vim.cmd('diffthis')
  if vim.api.nvim_buf_is_valid(scratch_tab_buffer) and scratch_tab_buffer ~= old and scratch_tab_buffer ~= new then
    pcall(vim.api.nvim_buf_delete, scratch_tab_buffer, {})
  end
  return old, new
end

--- <CR> in a review buffer: the diff split of the path under the cursor.
function M.open_at_cursor()
  local file = M.file_at_cursor()
  if not file then
    mevedel.notify('put the cursor on a changed path', levels.WARN)
    return nil
  end
  return M.diff_split(file)
end

local function restore_request(client, session, path, before, commit)
  local params = scoped(session, { path = path, beforeTurn = before })
  if commit then
    params.commit = true
  end
  local result, err = mevedel.request(client, 'mevedel/turn/restoreFile', params)
  if not result then
    mevedel.notify(err)
  end
  return result
end

--- What a restore does, for the impact window: CHANGE (a PathChange from
--- the file now to the wanted state) as a header and its unified diff.
function M.restore_details(change)
  local details = { '=== ' .. change.description }
  if change.binary == true then
    table.insert(details, string.format('binary file: %d -> %d bytes', present(change.before.size) and change.before.size or 0,
      present(change.after.size) and change.after.size or 0))
  elseif present(change.noText) then
    table.insert(details, 'no line diff: ' .. change.noText)
  end
  if present(change.diff) and change.diff ~= '' then
    local lines = vim.split(change.diff, '\n', { plain = true })
    if lines[#lines] == '' then
      table.remove(lines)
    end
    vim.list_extend(details, lines)
  end
  return details
end

--- Restore FILE, a path change of the review in BUFNR, to its state before
--- the review's first turn that changed it: show what that does, ask, and
--- only on Restore do it (a new turn of the session) and read the review
--- again. ON_DONE(turn) runs after a restore; nothing runs otherwise.
function M.restore(bufnr, file, on_done)
  local review = reviews[bufnr]
  local client = review and (vim.lsp.get_client_by_id(review.client_id) or client_or_notify())
  if not client then
    return nil
  end
  local path, before = file.path, file.firstTurn
  local preview = restore_request(client, review.session, path, before, false)
  if not preview then
    return nil
  end
  if not present(preview.change) then
    mevedel.notify(string.format('%s is already as it was before turn %d; nothing to do', path, before), levels.INFO)
    return nil
  end
  local lifecycle = require('mevedel.lifecycle')
  local summary = string.format('Restore %s to its state before turn %d (%s)?', path, before, preview.change.description)
  lifecycle.confirm({ summary = summary, details = M.restore_details(preview.change), action = 'Restore' }, function(confirmed)
    lifecycle.hide_impact()
    if not confirmed then
      mevedel.notify(string.format('restore of %s cancelled; nothing changed', path), levels.INFO)
      return
    end
    local done = restore_request(client, review.session, path, before, true)
    if not done then
      return
    end
    mevedel.notify(string.format('restored %s to its state before turn %d as turn %d (Rewind to before turn %d undoes it)', path, before,
      done.turn, done.turn), levels.INFO)
    -- Unmodified buffers of the file read it again ('autoread').
    pcall(vim.cmd, 'checktime')
    if vim.api.nvim_buf_is_valid(bufnr) then
      -- A review of the latest turn stays on the turn it showed, not the
      -- restore's own turn.
      if review.first == nil then
        review.first, review.last = review.result.first, review.result.first
      end
      M.refresh(bufnr)
    end
    if on_done then
      on_done(done.turn)
    end
  end)
end

--- r in a review buffer: restore the path under the cursor.
function M.restore_at_cursor(on_done)
  local file = M.file_at_cursor()
  if not file then
    mevedel.notify('put the cursor on a changed path', levels.WARN)
    return nil
  end
  return M.restore(vim.api.nvim_get_current_buf(), file, on_done)
end

--- :MevedelReview [N | N..M | N.. | ..M | all]: ARGS, else the turn
--- under the cursor of a chat, else a turn picked (or every turn).
function M.command(args, session)
  if vim.trim(args or '') ~= '' then
    local first, last = M.parse_range(args)
    if first == false then
      mevedel.notify('usage: :MevedelReview [N | N..M | N.. | ..M | all]: ' .. last, levels.WARN)
      return nil
    end
    return M.open(first, last, session)
  end
  if vim.b.mevedel_chat_session then
    local turn = require('mevedel.chat').turn_at_cursor()
    if turn then
      return M.open(turn, turn, vim.b.mevedel_chat_session)
    end
  end
  return M.pick(session)
end

--- Pick a turn of SESSION (newest first), or every turn, and review it.
function M.pick(session)
  local client = client_or_notify()
  local listing = client and mevedel.request(client, 'mevedel/turn/list', scoped(session))
  if not listing then
    return nil
  end
  if #listing.turns == 0 then
    mevedel.notify(listing.sessionId .. ' has no turns yet', levels.INFO)
    return nil
  end
  local choices = { { all = true } }
  for i = #listing.turns, 1, -1 do
    table.insert(choices, listing.turns[i])
  end
  vim.ui.select(choices, {
    prompt = 'mevedel: review the changes of',
    format_item = function(item)
      if item.all then
        return string.format('All turns (1..%d)', listing.turns[#listing.turns].turn)
      end
      return require('mevedel.sessions').format_turn(item)
    end,
    kind = 'mevedel.review',
  }, function(item)
    if item and item.all then
      M.open(1, nil, listing.sessionId)
    elseif item then
      M.open(item.turn, item.turn, listing.sessionId)
    end
  end)
end

return M
