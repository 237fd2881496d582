-- mevedel.artifacts: the workspace artifact store in Neovim.
--
-- The server keeps the store (`mevedel/artifact/*`): every document
-- (Markdown), whiteboard (an Excalidraw JSON scene) and artifact (a
-- Markdown, HTML or image file) of the workspace, by id, shown by title;
-- sessions attach to items. `:MevedelArtifacts` lists them (vim.ui.select,
-- the attached ones marked `*`) and offers what to do with one. An item
-- opens in a buffer named `mevedel-artifact://ID/PRIMARY` with
-- buftype=acwrite: `:w` is `mevedel/artifact/write` with the revision the
-- buffer was read at (`b:mevedel_artifact_revision`) as `baseRevision`, so
-- a write over someone else's change is refused (`conflict`) and the
-- buffer keeps its text. An item another server process holds is shown
-- read-only (`b:mevedel_artifact_holder` names the host) until it is
-- handed over (`:MevedelArtifactRequest`). `mevedel/artifact/didChange`
-- reads open, unmodified item buffers again.
--
-- Reads are asynchronous and numbered per buffer: only the answer of the
-- latest read or write started for a buffer is put in it, so a read that
-- was overtaken (a notification arriving while another waits) never puts
-- older text over newer.

local mevedel = require('mevedel')
local present = mevedel.present

local M = {}

local levels = vim.log.levels

M.scheme = 'mevedel-artifact'

--- The last `mevedel/artifact/didChange` params (also announced as the
--- `User MevedelArtifactChanged` autocommand).
M.last_change = nil

-- Per buffer: the number of the latest read or write started (generation)
-- and of the latest one finished (settled); writes waiting for an answer,
-- and the reloads asked for meanwhile.
local generation, settled, writing, reload_after_write = {}, {}, {}, {}
-- Items being deleted from here (their didChange is no news), by id.
local deleting = {}
-- The client an item buffer being opened is read through.
local opening_client = nil

-- Helpers -----------------------------------------------------------------------

local methods_take_self = vim.fn.has('nvim-0.11') == 1

local function is_stopped(client)
  if methods_take_self then
    return client:is_stopped()
  end
  return client.is_stopped()
end

local function live_client(id)
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not is_stopped(client) then
    return client
  end
  return nil
end

-- The client BUFNR's item is read through, else the usual one (told when
-- there is none).
local function client_for(bufnr)
  local client = bufnr and live_client(vim.b[bufnr].mevedel_client)
  return client or mevedel.client_or_notify()
end

-- Sends METHOD and waits; on failure tells the user the server's words.
local function call(client, method, params)
  local result, err, data = mevedel.request(client, method, params)
  if not result then
    mevedel.notify(err)
  end
  return result, err, data
end

local function session_here()
  return require('mevedel.sessions').session_here()
end

-- Neovim's own prompts behind vim.ui (input(), inputlist(); 0.7 and 0.12
-- alike) leave the cursor after the answer, so the next message ran on
-- from it ("Title: Doc onemevedel: created ..."). The screen is redrawn
-- before the answer is acted on, so a message starts a line of its own (a
-- replacement vim.ui loses nothing by it).
local function after_prompt(callback)
  return function(...)
    vim.cmd('redraw')
    return callback(...)
  end
end

local function ask_select(items, opts, on_choice)
  return vim.ui.select(items, opts, after_prompt(on_choice))
end

local function ask_input(opts, on_confirm)
  return vim.ui.input(opts, after_prompt(on_confirm))
end

local function valid(bufnr)
  return bufnr and vim.api.nvim_buf_is_valid(bufnr)
end

--- The buffer name of item ID (PRIMARY: its primary file's name).
function M.buffer_name(id, primary)
  return string.format('%s://%s/%s', M.scheme, id, primary or 'item')
end

--- The item id a buffer name names, or nil.
function M.id_of_name(name)
  return type(name) == 'string' and name:match('^mevedel%-artifact://([A-Za-z0-9][A-Za-z0-9_-]*)') or nil
end

--- The loaded buffers showing item ID through client CLIENT_ID (any client
--- when nil).
function M.buffers_of(id, client_id)
  local found = {}
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.b[bufnr].mevedel_artifact == id then
      if client_id == nil or vim.b[bufnr].mevedel_client == nil or vim.b[bufnr].mevedel_client == client_id then
        table.insert(found, bufnr)
      end
    end
  end
  return found
end

local FILETYPES = {
  md = 'markdown',
  markdown = 'markdown',
  html = 'html',
  htm = 'html',
  svg = 'svg',
  excalidraw = 'json',
}

local function filetype_of(kind, primary)
  if kind == 'document' then
    return 'markdown'
  elseif kind == 'whiteboard' then
    return 'json'
  end
  local ext = (primary or ''):match('%.([^.]+)$')
  return ext and FILETYPES[ext:lower()] or 'text'
end

-- The text of an item buffer as the item's content: lines joined, the
-- final newline when 'eol' (an empty buffer is empty content).
local function buffer_content(bufnr)
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  if #lines == 1 and lines[1] == '' then
    return ''
  end
  return table.concat(lines, '\n') .. (vim.bo[bufnr].eol and '\n' or '')
end

-- The lines of a read item, and whether its text ends with a newline.
local function content_lines(read)
  if read.encoding == 'base64' then
    return { string.format('%s is an image (%s); it cannot be edited as text here.', read.title, read.primary) }, true
  end
  local text = read.content or ''
  local eol = text == '' or text:sub(-1) == '\n'
  if text:sub(-1) == '\n' then
    text = text:sub(1, -2)
  end
  return vim.split(text, '\n', { plain = true }), eol
end

-- Replaces BUFNR's lines from the first one that differs, keeping the
-- cursors of the windows showing it where they were (clamped).
local function set_text(bufnr, lines)
  local old = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local first = 1
  while first <= #old and first <= #lines and old[first] == lines[first] do
    first = first + 1
  end
  if first > #old and first > #lines then
    return
  end
  local cursors = {}
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_buf(win) == bufnr then
      cursors[win] = vim.api.nvim_win_get_cursor(win)
    end
  end
  vim.api.nvim_buf_set_lines(bufnr, first - 1, -1, false, vim.list_slice(lines, first))
  for win, cursor in pairs(cursors) do
    local row = math.min(cursor[1], math.max(1, #lines))
    pcall(vim.api.nvim_win_set_cursor, win, { row, cursor[2] })
  end
end

local function held_text(title, holder)
  return string.format(
    '%s is held by %s: read-only here (:MevedelArtifactRequest asks for it)',
    title,
    present(holder) and holder or 'another mevedel server'
  )
end

-- Sets BUFNR's options from what is known of its item: modifiable only
-- when it is writable here, text, and not deleted.
local function set_access(bufnr)
  local b = vim.b[bufnr]
  local editable = b.mevedel_artifact_writable == true and b.mevedel_artifact_binary ~= true and b.mevedel_artifact_deleted ~= true
  vim.bo[bufnr].modifiable = editable
  vim.bo[bufnr].readonly = not editable
end

-- Puts the read item READ in BUFNR. An unmodified buffer (or FORCE) takes
-- the server's text and revision; a modified one keeps the user's text and
-- the revision it was based on (so :w reports the conflict) and is told.
local function apply(bufnr, read, force)
  local b = vim.b[bufnr]
  local first = b.mevedel_artifact_revision == nil
  local was_writable = b.mevedel_artifact_writable
  local binary = read.encoding == 'base64'
  if force or first or not vim.bo[bufnr].modified then
    if force or first or read.revision ~= b.mevedel_artifact_revision then
      local lines, eol = content_lines(read)
      local undolevels = vim.bo[bufnr].undolevels
      if first then
        -- The first text is not an undoable change.
        vim.bo[bufnr].undolevels = -1
      end
      vim.bo[bufnr].modifiable = true
      vim.bo[bufnr].readonly = false
      set_text(bufnr, lines)
      vim.bo[bufnr].undolevels = undolevels
      vim.bo[bufnr].fixeol = false
      vim.bo[bufnr].eol = eol
    end
    vim.bo[bufnr].modified = false
    b.mevedel_artifact_revision = read.revision
    b.mevedel_artifact_stale = nil
  elseif read.revision ~= b.mevedel_artifact_revision and b.mevedel_artifact_stale ~= read.revision then
    b.mevedel_artifact_stale = read.revision
    mevedel.notify(
      string.format(
        '%s changed on the server; your unsaved changes stay in this buffer (:w reports the conflict, :MevedelArtifactReload takes the server\'s text)',
        read.title
      ),
      levels.WARN
    )
  end
  b.mevedel_artifact_title = read.title
  b.mevedel_artifact_kind = read.kind
  b.mevedel_artifact_primary = read.primary
  b.mevedel_artifact_attached = read.attached == true
  b.mevedel_artifact_comments = present(read.comments) and #read.comments or 0
  b.mevedel_artifact_binary = binary
  b.mevedel_artifact_writable = read.writable ~= false
  b.mevedel_artifact_holder = present(read.holder) and read.holder or present(read.holderHost) and read.holderHost or nil
  b.mevedel_artifact_deleted = nil
  set_access(bufnr)
  if read.writable == false and (first or was_writable == true) then
    mevedel.notify(held_text(read.title, b.mevedel_artifact_holder), levels.WARN)
  elseif read.writable ~= false and was_writable == false then
    mevedel.notify(read.title .. ' is writable here now', levels.INFO)
  end
end

-- Reads BUFNR's item through CLIENT without waiting. Its answer is put in
-- the buffer (apply) only when no later read or write of the buffer
-- started meanwhile; ON_DONE(result, err, data) runs then. Returns the
-- read's number.
local function load(bufnr, client, force, on_done)
  generation[bufnr] = (generation[bufnr] or 0) + 1
  local gen = generation[bufnr]
  local id = vim.b[bufnr].mevedel_artifact
  mevedel.request_async(client, 'mevedel/artifact/read', { id = id }, function(result, err, data)
    if not valid(bufnr) or generation[bufnr] ~= gen then
      -- A later read or write of this buffer decides what it shows.
      return
    end
    settled[bufnr] = gen
    if result then
      apply(bufnr, result, force)
    end
    if on_done then
      on_done(result, err, data)
    end
  end)
  return gen
end

local function mark_deleted(bufnr, why)
  if vim.b[bufnr].mevedel_artifact_deleted then
    return
  end
  vim.b[bufnr].mevedel_artifact_deleted = true
  set_access(bufnr)
  mevedel.notify(
    string.format('%s %s; this buffer keeps its last text', vim.b[bufnr].mevedel_artifact_title or vim.b[bufnr].mevedel_artifact, why),
    levels.WARN
  )
end

-- Reads BUFNR's item again (without waiting) and tells a failure; a
-- modified buffer keeps its text unless FORCE.
local function reload_quietly(bufnr, client, force)
  if writing[bufnr] then
    -- Read after the write's answer, so the read sees it.
    reload_after_write[bufnr] = true
    return
  end
  load(bufnr, client, force, function(result, err, data)
    if result then
      return
    end
    if type(data) == 'table' and data.kind == 'missing-target' then
      mark_deleted(bufnr, 'is no longer in the store')
    else
      mevedel.notify('could not read ' .. vim.api.nvim_buf_get_name(bufnr) .. ' again: ' .. tostring(err))
    end
  end)
end

-- Reads BUFNR's item and waits for it. Returns true, or nil and the error.
local function load_and_wait(bufnr, client, force)
  local outcome
  local gen = load(bufnr, client, force, function(result, err, data)
    outcome = { result = result, err = err, data = data }
  end)
  local timeout = mevedel.options().timeout_ms
  local done = vim.wait(timeout, function()
    return not valid(bufnr) or (settled[bufnr] or 0) >= gen
  end, 10)
  if not done then
    return nil, 'mevedel/artifact/read: no answer in ' .. timeout .. ' ms'
  end
  if outcome and not outcome.result then
    return nil, outcome.err, outcome.data
  end
  return true
end

-- Buffers -----------------------------------------------------------------------

--- BufReadCmd of `mevedel-artifact://ID/...` buffers (`:edit`, `:edit!`):
--- read the item into BUFNR, the server's text replacing the buffer's.
function M.read_cmd(bufnr, name)
  local id = M.id_of_name(name)
  if not id then
    mevedel.notify(name .. ' does not name an artifact store item (mevedel-artifact://ID/FILE)')
    return
  end
  vim.bo[bufnr].buftype = 'acwrite'
  vim.bo[bufnr].swapfile = false
  local client = opening_client or client_for(bufnr)
  opening_client = nil
  if not client then
    return
  end
  vim.b[bufnr].mevedel_artifact = id
  vim.b[bufnr].mevedel_client = client.id
  vim.b[bufnr].mevedel_root = client.config.root_dir
  local ok, err, data = load_and_wait(bufnr, client, true)
  if not ok then
    if type(data) == 'table' and data.kind == 'missing-target' then
      vim.b[bufnr].mevedel_artifact_title = vim.b[bufnr].mevedel_artifact_title or id
      vim.b[bufnr].mevedel_artifact_deleted = true
      set_access(bufnr)
    end
    mevedel.notify(err)
    return
  end
  local filetype = filetype_of(vim.b[bufnr].mevedel_artifact_kind, vim.b[bufnr].mevedel_artifact_primary)
  if vim.bo[bufnr].filetype ~= filetype then
    vim.bo[bufnr].filetype = filetype
  end
end

-- Offers to take the server's text after a refused write; the user's text
-- then goes to a buffer of its own, so nothing is lost.
local function offer_reload(bufnr, why)
  local keep, reload = 'Keep my text here', "Reload the server's text (mine goes to a new buffer)"
  ask_select({ keep, reload }, { prompt = 'mevedel: ' .. why, kind = 'mevedel.artifact.conflict' }, function(choice)
    if choice == reload and valid(bufnr) then
      M.reload(bufnr, true)
    end
  end)
end

--- BufWriteCmd of item buffers (`:w`): `mevedel/artifact/write` of the
--- whole buffer with the revision it was read at. A refused write leaves
--- the buffer as it is (modified) and says why; a conflict or a lost lease
--- offers to reload. Returns true when written.
function M.write(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local b = vim.b[bufnr]
  local id, title = b.mevedel_artifact, b.mevedel_artifact_title or b.mevedel_artifact
  if not id or not b.mevedel_artifact_revision then
    mevedel.notify(vim.api.nvim_buf_get_name(bufnr) .. ' was not read from the server; :edit it first')
    return false
  end
  if b.mevedel_artifact_deleted then
    mevedel.notify(title .. ' was deleted from the store; nothing was written (your text stays in this buffer)', levels.WARN)
    return false
  end
  if b.mevedel_artifact_binary then
    mevedel.notify(title .. ' is an image; it cannot be written from a text buffer', levels.WARN)
    return false
  end
  if b.mevedel_artifact_writable == false then
    mevedel.notify(held_text(title, b.mevedel_artifact_holder) .. '; nothing was written', levels.WARN)
    return false
  end
  local client = client_for(bufnr)
  if not client then
    return false
  end
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  generation[bufnr] = (generation[bufnr] or 0) + 1
  local gen = generation[bufnr]
  writing[bufnr] = true
  local params = { id = id, content = buffer_content(bufnr), baseRevision = b.mevedel_artifact_revision }
  local result, err, data = mevedel.request(client, 'mevedel/artifact/write', params)
  writing[bufnr] = nil
  if generation[bufnr] == gen then
    settled[bufnr] = gen
  end
  if not valid(bufnr) then
    return result ~= nil
  end
  local kind = type(data) == 'table' and data.kind or nil
  if result then
    vim.b[bufnr].mevedel_artifact_revision = result.revision
    vim.b[bufnr].mevedel_artifact_stale = nil
    if vim.api.nvim_buf_get_changedtick(bufnr) == tick then
      vim.bo[bufnr].modified = false
    end
    mevedel.notify('wrote ' .. title, levels.INFO)
  elseif kind == 'conflict' or kind == 'item-lease-lost' then
    local why = kind == 'conflict' and (title .. ' changed on the server since this buffer read it') or (title .. ' was taken over by another mevedel server')
    mevedel.notify(err .. '\nnothing was written; your text stays in this buffer', levels.WARN)
    vim.schedule(function()
      offer_reload(bufnr, why)
    end)
  elseif kind == 'item-held' then
    vim.b[bufnr].mevedel_artifact_writable = false
    set_access(bufnr)
    mevedel.notify(err .. '\nnothing was written; your text stays in this buffer (:MevedelArtifactRequest asks for it)', levels.WARN)
  else
    -- A refusal (a scene that is not one, a bad title...) is the user's to
    -- fix, told as a warning: an error level raised inside BufWriteCmd reads
    -- as a broken autocommand on 0.12.
    mevedel.notify(tostring(err) .. '\nnothing was written; your text stays in this buffer', levels.WARN)
  end
  if reload_after_write[bufnr] then
    reload_after_write[bufnr] = nil
    reload_quietly(bufnr, client, false)
  end
  return result ~= nil
end

--- Read BUFNR's item again (FORCE: dropping unsaved changes, which are
--- first copied to a buffer of their own). Returns true, or nil and the
--- error.
function M.reload(bufnr, force)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not vim.b[bufnr].mevedel_artifact then
    mevedel.notify('not an artifact store buffer')
    return nil
  end
  local client = client_for(bufnr)
  if not client then
    return nil
  end
  if force and vim.bo[bufnr].modified then
    M.keep_copy(bufnr)
  end
  local ok, err = load_and_wait(bufnr, client, force)
  if not ok then
    mevedel.notify(err)
  elseif vim.bo[bufnr].modified then
    mevedel.notify('your unsaved changes stay in this buffer (:MevedelArtifactReload! drops them, keeping a copy)', levels.INFO)
  end
  return ok, err
end

--- Copy BUFNR's text to a new scratch buffer shown in a split (what a
--- reload would drop). Returns the new buffer.
function M.keep_copy(bufnr)
  local b = vim.b[bufnr]
  local base = string.format('mevedel unsaved text of %s (%s)', b.mevedel_artifact_title or '?', b.mevedel_artifact)
  local name, n = base, 1
  while vim.fn.bufnr(name) > 0 do
    n = n + 1
    name = base .. ' ' .. n
  end
  local copy = vim.api.nvim_create_buf(true, true)
  vim.api.nvim_buf_set_name(copy, name)
  vim.api.nvim_buf_set_lines(copy, 0, -1, false, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
  vim.bo[copy].filetype = vim.bo[bufnr].filetype
  local current = vim.api.nvim_get_current_win()
  vim.cmd('belowright split')
  vim.api.nvim_win_set_buf(0, copy)
  vim.api.nvim_set_current_win(current)
  mevedel.notify('your text of ' .. (b.mevedel_artifact_title or b.mevedel_artifact) .. ' is kept in "' .. name .. '"', levels.INFO)
  return copy
end

--- Open item ID in the current window (its buffer when one is open, read
--- again unless modified). OPTS: client, primary. Returns the buffer.
function M.open(id, opts)
  opts = opts or {}
  if type(id) ~= 'string' or not id:match('^[A-Za-z0-9][A-Za-z0-9_-]*$') then
    mevedel.notify(tostring(id) .. ' is not an item id (letters, digits, _ and -); :MevedelArtifacts lists the items')
    return nil
  end
  local client = opts.client or mevedel.client_or_notify()
  if not client then
    return nil
  end
  local existing = M.buffers_of(id, client.id)[1]
  if existing then
    vim.api.nvim_set_current_buf(existing)
    reload_quietly(existing, client, false)
    return existing
  end
  opening_client = client
  local ok, err = pcall(vim.cmd, 'edit ' .. vim.fn.fnameescape(M.buffer_name(id, opts.primary)))
  opening_client = nil
  if not ok then
    mevedel.notify(tostring(err))
    return nil
  end
  return vim.api.nvim_get_current_buf()
end

--- What a statusline may show for BUFNR's item ('' for other buffers):
--- read-only and who holds it, deleted, attached.
function M.status(bufnr)
  local b = vim.b[bufnr or 0]
  if not b.mevedel_artifact then
    return ''
  end
  local parts = { b.mevedel_artifact_title or b.mevedel_artifact }
  if b.mevedel_artifact_deleted then
    table.insert(parts, 'deleted')
  elseif b.mevedel_artifact_writable == false then
    table.insert(parts, 'held by ' .. (b.mevedel_artifact_holder or 'another server') .. ', read-only')
  end
  if b.mevedel_artifact_attached then
    table.insert(parts, 'attached')
  end
  return table.concat(parts, ' · ')
end

-- Listing -------------------------------------------------------------------------

local function plural(n, word)
  return string.format('%d %s%s', n, word, n == 1 and '' or 's')
end

--- One line of the listing: `*` for an item attached to the session, the
--- title, then kind, attached, versions, holder (and the id when two items
--- share the title).
function M.format_entry(row, show_id)
  local facts = { row.kind }
  if row.attached == true then
    table.insert(facts, 'attached')
  end
  table.insert(facts, plural(row.versions or 0, 'version'))
  if present(row.holder) or present(row.holderHost) then
    table.insert(facts, 'held by ' .. (present(row.holder) and row.holder or row.holderHost))
  end
  if show_id then
    table.insert(facts, row.id)
  end
  return string.format('%s %s  (%s)', row.attached == true and '*' or ' ', row.title, table.concat(facts, ', '))
end

--- The rows the picker offers for a `mevedel/artifact/list` result: every
--- item, then (WITH_NEW) creating a document or a whiteboard.
function M.picker_items(listing, with_new)
  local count = {}
  for _, row in ipairs(listing.items or {}) do
    count[row.title] = (count[row.title] or 0) + 1
  end
  local items = {}
  for _, row in ipairs(listing.items or {}) do
    table.insert(items, { kind = 'item', row = row, show_id = count[row.title] > 1 })
  end
  if with_new then
    table.insert(items, { kind = 'new', what = 'document' })
    table.insert(items, { kind = 'new', what = 'whiteboard' })
  end
  return items
end

function M.format_item(item)
  if item.kind == 'new' then
    return '+ New ' .. item.what .. '...'
  end
  return M.format_entry(item.row, item.show_id)
end

local function list(client)
  return call(client, 'mevedel/artifact/list', mevedel.scoped(session_here()))
end

-- RUN(item, client) for the current buffer's item, else for one picked
-- from the listing (PROMPT says what for).
local function with_item(prompt, run)
  local bufnr = vim.api.nvim_get_current_buf()
  local b = vim.b[bufnr]
  if b.mevedel_artifact then
    local client = client_for(bufnr)
    if client then
      run({ id = b.mevedel_artifact, title = b.mevedel_artifact_title or b.mevedel_artifact, attached = b.mevedel_artifact_attached, primary = b.mevedel_artifact_primary }, client)
    end
    return
  end
  local client = mevedel.client_or_notify()
  local listing = client and list(client)
  if not listing then
    return
  end
  if #listing.items == 0 then
    mevedel.notify('the workspace has no artifacts yet; :MevedelArtifactNew makes a document or a whiteboard', levels.INFO)
    return
  end
  ask_select(M.picker_items(listing, false), { prompt = 'mevedel: ' .. prompt, format_item = M.format_item, kind = 'mevedel.artifact' }, function(item)
    if item then
      run(item.row, client)
    end
  end)
end

--- The actions offered for one item of the listing, in order.
function M.actions_for(row)
  local actions = { 'Open', row.attached == true and 'Detach' or 'Attach', 'Versions', 'Save a version', 'Comment', 'Duplicate' }
  if present(row.holder) or present(row.holderHost) then
    table.insert(actions, 'Ask ' .. (present(row.holder) and row.holder or row.holderHost) .. ' for it')
  end
  table.insert(actions, 'Comments')
  table.insert(actions, 'Conversation')
  table.insert(actions, 'Delete')
  return actions
end

--- Ask what to do with ROW (an `ArtifactEntry`) and do it.
function M.act(row, client)
  ask_select(M.actions_for(row), { prompt = 'mevedel: ' .. row.title, kind = 'mevedel.artifact.action' }, function(action)
    if not action then
      return
    elseif action == 'Open' then
      M.open(row.id, { client = client, primary = row.primary })
    elseif action == 'Attach' or action == 'Detach' then
      M.set_attached(row, action == 'Attach', client)
    elseif action == 'Versions' then
      M.versions(row, client)
    elseif action == 'Save a version' then
      M.save_version(row, client)
    elseif action == 'Comment' then
      M.comment(row, nil, client)
    elseif action == 'Duplicate' then
      M.duplicate(row, nil, client)
    elseif action == 'Conversation' then
      M.conversation(row, client)
    elseif action == 'Comments' then
      M.comments(row, client)
    elseif action == 'Delete' then
      M.delete(row, client)
    else
      M.request_handover(row, client)
    end
  end)
end

--- `:MevedelArtifacts`: pick an item of the workspace (or a new document
--- or whiteboard) and what to do with it.
function M.pick()
  local client = mevedel.client_or_notify()
  local listing = client and list(client)
  if not listing then
    return
  end
  ask_select(M.picker_items(listing, true), { prompt = 'mevedel artifacts', format_item = M.format_item, kind = 'mevedel.artifact' }, function(item)
    if not item then
      return
    elseif item.kind == 'new' then
      M.create(item.what, nil, client)
    else
      M.act(item.row, client)
    end
  end)
end

--- Pick an item and open it (`:MevedelArtifactOpen` without an id).
function M.pick_open()
  local client = mevedel.client_or_notify()
  local listing = client and list(client)
  if not listing then
    return
  end
  if #listing.items == 0 then
    mevedel.notify('the workspace has no artifacts yet; :MevedelArtifactNew makes a document or a whiteboard', levels.INFO)
    return
  end
  ask_select(M.picker_items(listing, false), { prompt = 'mevedel: open', format_item = M.format_item, kind = 'mevedel.artifact' }, function(item)
    if item then
      M.open(item.row.id, { client = client, primary = item.row.primary })
    end
  end)
end

-- Actions -------------------------------------------------------------------------

-- Reads the open buffers of item ID again (not waiting; modified ones keep
-- their text).
local function refresh_buffers(id, client)
  for _, bufnr in ipairs(M.buffers_of(id, client.id)) do
    reload_quietly(bufnr, client, false)
  end
end

--- Create a KIND ('document' or 'whiteboard') titled TITLE (asked when
--- nil or empty), attached to the session, and open it.
function M.create(kind, title, client)
  if kind ~= 'document' and kind ~= 'whiteboard' then
    mevedel.notify('make a document or a whiteboard (got ' .. tostring(kind) .. ')')
    return nil
  end
  client = client or mevedel.client_or_notify()
  if not client then
    return nil
  end
  title = title and vim.trim(title) or ''
  if title == '' then
    ask_input({ prompt = 'Title of the new ' .. kind .. ': ' }, function(given)
      if given and vim.trim(given) ~= '' then
        M.create(kind, given, client)
      else
        mevedel.notify('no title given: no ' .. kind .. ' was created', levels.WARN)
      end
    end)
    return nil
  end
  local entry = call(client, 'mevedel/artifact/create', mevedel.scoped(session_here(), { kind = kind, title = title }))
  if not entry then
    return nil
  end
  mevedel.notify(
    string.format(
      'created %s %s%s',
      kind,
      entry.title,
      entry.attached == true and ' (attached to the session)' or ' (attached to no session: none is current here; :MevedelArtifactAttach attaches it once one is)'
    ),
    levels.INFO
  )
  M.open(entry.id, { client = client, primary = entry.primary })
  return entry
end

--- Attach ITEM to the session (ATTACH true) or detach it.
function M.set_attached(item, attach, client)
  local method = attach and 'mevedel/artifact/attach' or 'mevedel/artifact/detach'
  local result = call(client, method, mevedel.scoped(session_here(), { id = item.id }))
  if result then
    mevedel.notify(
      string.format('%s is %s session %s', item.title, result.attached == true and 'attached to' or 'not attached to', result.sessionId),
      levels.INFO
    )
    for _, bufnr in ipairs(M.buffers_of(item.id, client.id)) do
      vim.b[bufnr].mevedel_artifact_attached = result.attached == true
    end
  end
  return result
end

--- One line of the versions picker: number, why, when, size, the turn.
function M.format_version(version)
  local text = string.format('v%d  %s  %s  %s', version.number, version.reason, os.date('%Y-%m-%d %H:%M:%S', version.at), plural(version.size, 'byte'))
  if present(version.turn) and present(version.sessionId) then
    text = text .. string.format('  turn %d of %s', version.turn, version.sessionId)
  elseif present(version.sessionId) then
    text = text .. '  in ' .. version.sessionId
  end
  return text
end

-- What restoring ITEM to VERSION (an entry of VERSIONS, newest first)
-- replaces, for the question asked first; nil and the error when the item
-- cannot be read.
function M.restore_question(item, version, versions, client)
  local read, err = mevedel.request(client, 'mevedel/artifact/read', { id = item.id })
  if not read then
    return nil, err
  end
  local content = read.content or ''
  local size = #content
  if read.encoding == 'base64' then
    size = math.floor(#content * 3 / 4) - (content:sub(-2) == '==' and 2 or content:sub(-1) == '=' and 1 or 0)
  end
  local current = plural(size, 'byte')
  local latest = versions[1]
  local where
  if latest and latest.revision == read.revision then
    where = string.format('which is version %d', latest.number)
  else
    where = 'which no version holds: it is kept as a new version first'
    for _, v in ipairs(versions) do
      if v.revision == read.revision then
        where = string.format('the same as version %d; it is kept as a new version first', v.number)
        break
      end
    end
  end
  local unsaved = ''
  for _, bufnr in ipairs(M.buffers_of(item.id, client.id)) do
    if vim.bo[bufnr].modified then
      unsaved = '; the unsaved changes in buffer ' .. bufnr .. ' are not part of it and stay there'
      break
    end
  end
  return string.format(
    'Restore %s to version %d (%s, %s, %s)? It replaces the current text (%s), %s%s.',
    item.title,
    version.number,
    version.reason,
    plural(version.size, 'byte'),
    os.date('%Y-%m-%d %H:%M', version.at),
    current,
    where,
    unsaved
  )
end

--- Restore version NUMBER of ITEM (an ordinary write of its bytes, after
--- the server keeps the replaced text as a version).
function M.restore(item, number, client)
  local result = call(client, 'mevedel/artifact/restore', mevedel.scoped(session_here(), { id = item.id, version = number }))
  if result then
    mevedel.notify(string.format('restored version %d of %s', number, item.title), levels.INFO)
    refresh_buffers(item.id, client)
  end
  return result
end

--- Pick a version of ITEM (newest first) and restore it.
function M.versions(item, client)
  local result = call(client, 'mevedel/artifact/versions', { id = item.id })
  if not result then
    return
  end
  if #result.versions == 0 then
    mevedel.notify(item.title .. ' has no versions kept', levels.INFO)
    return
  end
  ask_select(result.versions, {
    prompt = 'mevedel: restore a version of ' .. item.title,
    format_item = M.format_version,
    kind = 'mevedel.artifact.version',
  }, function(version)
    if not version then
      return
    end
    local question, err = M.restore_question(item, version, result.versions, client)
    if not question then
      mevedel.notify(tostring(err))
      return
    end
    -- Asked after the picker closed (scheduled), so the question does not
    -- run into the picker's prompt.
    vim.schedule(function()
      ask_select({ 'Restore', 'Cancel' }, { prompt = 'mevedel: ' .. question, kind = 'mevedel.confirm' }, function(choice)
        if choice == 'Restore' then
          M.restore(item, version.number, client)
        else
          mevedel.notify(item.title .. ' was not restored', levels.INFO)
        end
      end)
    end)
  end)
end

--- Record ITEM's current content as a version.
function M.save_version(item, client)
  local version = call(client, 'mevedel/artifact/saveVersion', mevedel.scoped(session_here(), { id = item.id }))
  if version then
    mevedel.notify(string.format('saved version %d of %s', version.number, item.title), levels.INFO)
  end
  return version
end

--- Comment on ITEM with TEXT (asked when nil or empty).
function M.comment(item, text, client)
  text = text and vim.trim(text) or ''
  if text == '' then
    ask_input({ prompt = 'Comment on ' .. item.title .. ': ' }, function(given)
      if given and vim.trim(given) ~= '' then
        M.comment(item, given, client)
      end
    end)
    return nil
  end
  local comment = call(client, 'mevedel/artifact/comment', mevedel.scoped(session_here(), { id = item.id, text = text }))
  if comment then
    local routed = present(comment.sessionId) and (' (to session ' .. comment.sessionId .. ')') or ''
    mevedel.notify(string.format('comment %d on %s%s', comment.number, item.title, routed), levels.INFO)
  end
  return comment
end

--- Copy ITEM under a new id titled TITLE (asked when nil; empty: the
--- server's `TITLE (copy)`).
function M.duplicate(item, title, client)
  if title == nil then
    ask_input({ prompt = 'Title of the copy: ', default = item.title .. ' (copy)' }, function(given)
      if given then
        M.duplicate(item, given, client)
      end
    end)
    return nil
  end
  title = vim.trim(title)
  local entry = call(client, 'mevedel/artifact/duplicate', mevedel.scoped(session_here(), { id = item.id, title = title ~= '' and title or nil }))
  if entry then
    mevedel.notify(string.format('duplicated %s as %s', item.title, entry.title), levels.INFO)
  end
  return entry
end

--- Delete ITEM after asking (vim.ui.select, kind `mevedel.confirm`). Its
--- unmodified buffers are closed; modified ones keep their text.
function M.delete(item, client)
  local prompt = string.format('Delete %s? Its files, versions and discussion are removed for every session.', item.title)
  ask_select({ 'Delete', 'Cancel' }, { prompt = 'mevedel: ' .. prompt, kind = 'mevedel.confirm' }, function(choice)
    if choice ~= 'Delete' then
      mevedel.notify('nothing was deleted', levels.INFO)
      return
    end
    deleting[item.id] = true
    local result = call(client, 'mevedel/artifact/delete', mevedel.scoped(session_here(), { id = item.id }))
    deleting[item.id] = nil
    if not result then
      return
    end
    local said = 'deleted ' .. item.title
    if present(result.keptSession) then
      said = said .. '; its conversation ' .. result.keptSession .. ' is kept as an ordinary session'
    end
    mevedel.notify(said, levels.INFO)
    for _, bufnr in ipairs(M.buffers_of(item.id, client.id)) do
      if vim.bo[bufnr].modified then
        mark_deleted(bufnr, 'was deleted')
      else
        pcall(vim.api.nvim_buf_delete, bufnr, { force = true })
      end
    end
  end)
end

-- Reads the buffers of ID again every few seconds until one is writable
-- (a holder hands over once the item has had no write for 10 s).
local function watch_handover(id, client, tries)
  if tries <= 0 then
    return
  end
  vim.defer_fn(function()
    local waiting = false
    for _, bufnr in ipairs(M.buffers_of(id, client.id)) do
      if vim.b[bufnr].mevedel_artifact_writable == false and not is_stopped(client) then
        waiting = true
        reload_quietly(bufnr, client, false)
      end
    end
    if waiting then
      watch_handover(id, client, tries - 1)
    end
  end, 3000)
end

--- Ask the server process holding ITEM to hand it over; its buffers turn
--- writable once it has.
function M.request_handover(item, client)
  local entry = call(client, 'mevedel/artifact/requestHandover', mevedel.scoped(session_here(), { id = item.id }))
  if not entry then
    return nil
  end
  if present(entry.holderHost) then
    local who = present(entry.holder) and entry.holder or entry.holderHost
    mevedel.notify(
      string.format(
        'asked %s for %s: it hands it over once the item has had no write there for 10 seconds (at once if it has not); this buffer turns writable then',
        who,
        entry.title
      ),
      levels.INFO
    )
    watch_handover(item.id, client, 40)
  else
    mevedel.notify(entry.title .. ' is held by no other server; it is writable here', levels.INFO)
    refresh_buffers(item.id, client)
  end
  return entry
end

--- One comment as shown by M.comments: number, when, who, where it went
--- and whether an agent has read it, then its text.
function M.format_comment(comment)
  local head = string.format('#%d  %s  %s', comment.number, os.date('%Y-%m-%d %H:%M', comment.at), comment.author)
  if present(comment.sessionId) then
    head = head .. '  -> ' .. comment.sessionId
    if present(comment.deliveredIn) then
      head = head .. string.format(', delivered in turn %d', comment.deliveredIn)
    else
      head = head .. ', not delivered yet (the next turn there carries it)'
    end
  else
    head = head .. '  (routed to no session)'
  end
  local lines = { head }
  for _, line in ipairs(vim.split(comment.text or '', '\n', { plain = true })) do
    table.insert(lines, '  ' .. line)
  end
  table.insert(lines, '')
  return lines
end

--- Show ITEM's discussion (comments, oldest first, and their delivery) in a
--- scratch buffer `mevedel-comments://ID`; `mevedel/artifact/didChange`
--- (a comment added or delivered) reads it again. Returns the buffer.
function M.comments(item, client)
  local read = call(client, 'mevedel/artifact/read', { id = item.id })
  if not read then
    return nil
  end
  local name = 'mevedel-comments://' .. item.id
  local bufnr = vim.fn.bufnr(name)
  if bufnr < 0 then
    bufnr = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(bufnr, name)
    vim.bo[bufnr].filetype = 'markdown'
  end
  vim.b[bufnr].mevedel_comments_of = item.id
  vim.b[bufnr].mevedel_client = client.id
  local lines = { 'Comments on ' .. read.title .. ' (:MevedelArtifactComment adds one)', '' }
  if not present(read.comments) or #read.comments == 0 then
    table.insert(lines, 'No comments yet.')
  else
    for _, comment in ipairs(read.comments) do
      vim.list_extend(lines, M.format_comment(comment))
    end
  end
  vim.bo[bufnr].modifiable = true
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].modifiable = false
  vim.bo[bufnr].modified = false
  if vim.api.nvim_get_current_buf() ~= bufnr and vim.fn.bufwinid(bufnr) < 0 then
    vim.api.nvim_set_current_buf(bufnr)
  end
  return bufnr
end

--- Open the chat of ITEM's dedicated session (created on first use).
function M.conversation(item, client)
  local result = call(client, 'mevedel/artifact/conversation', mevedel.scoped(session_here(), { id = item.id }))
  if result then
    if result.created == true then
      mevedel.notify('started the conversation about ' .. item.title .. ' (session ' .. result.sessionId .. ')', levels.INFO)
    end
    require('mevedel.chat').open(result.sessionId, nil, client)
  end
  return result
end

--- Commands acting on the current buffer's item, else on one picked.
function M.command(action, arg)
  local prompts = {
    versions = 'restore a version of',
    save_version = 'save a version of',
    attach = 'attach',
    detach = 'detach',
    duplicate = 'duplicate',
    delete = 'delete',
    comment = 'comment on',
    request = 'ask for',
    conversation = 'talk about',
    comments = 'read the comments on',
  }
  with_item(prompts[action] or action, function(item, client)
    if action == 'versions' then
      M.versions(item, client)
    elseif action == 'save_version' then
      M.save_version(item, client)
    elseif action == 'attach' or action == 'detach' then
      M.set_attached(item, action == 'attach', client)
    elseif action == 'duplicate' then
      M.duplicate(item, arg ~= '' and arg or nil, client)
    elseif action == 'delete' then
      M.delete(item, client)
    elseif action == 'comment' then
      M.comment(item, arg, client)
    elseif action == 'request' then
      M.request_handover(item, client)
    elseif action == 'conversation' then
      M.conversation(item, client)
    elseif action == 'comments' then
      M.comments(item, client)
    end
  end)
end

-- Server messages -------------------------------------------------------------------

--- `mevedel/artifact/didChange`: read the item's open buffers again
--- (modified ones keep their text; a deleted item's buffers keep theirs).
function M.on_did_change(_, params, ctx)
  M.last_change = params
  local client = ctx and live_client(ctx.client_id)
  if client and type(params) == 'table' and params.id then
    for _, bufnr in ipairs(M.buffers_of(params.id, client.id)) do
      if params.reason == 'deleted' then
        if not deleting[params.id] then
          mark_deleted(bufnr, 'was deleted')
        end
      elseif params.reason == 'elsewhere' and params.writable == false and vim.b[bufnr].mevedel_artifact_writable ~= false then
        -- Another editor's server took it: unsaved text could never be
        -- written here, so it goes to a buffer of its own and the buffer
        -- shows the item, read-only, naming who holds it (apply says so).
        if vim.bo[bufnr].modified then
          M.keep_copy(bufnr)
        end
        reload_quietly(bufnr, client, true)
      else
        reload_quietly(bufnr, client, false)
      end
    end
  end
  if client and type(params) == 'table' and params.id and params.reason ~= 'deleted' then
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(bufnr) and vim.b[bufnr].mevedel_comments_of == params.id and vim.fn.bufwinid(bufnr) >= 0 then
        M.comments({ id = params.id }, client)
      end
    end
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'MevedelArtifactChanged', modeline = false })
end

--- BufEnter of an item buffer: a read-only one is read again (it may have
--- been handed over meanwhile).
function M.on_enter(bufnr)
  local b = vim.b[bufnr]
  if b.mevedel_artifact and b.mevedel_artifact_writable == false and not b.mevedel_artifact_deleted and not vim.bo[bufnr].modified then
    local client = live_client(b.mevedel_client)
    if client then
      reload_quietly(bufnr, client, false)
    end
  end
end

--- The autocommands of item buffers (plugin/mevedel.lua defines them).
function M.define_autocommands()
  local group = vim.api.nvim_create_augroup('mevedel_artifacts', { clear = true })
  local pattern = M.scheme .. '://*'
  vim.api.nvim_create_autocmd('BufReadCmd', {
    group = group,
    pattern = pattern,
    callback = function(args)
      M.read_cmd(args.buf, args.match)
    end,
  })
  vim.api.nvim_create_autocmd('BufWriteCmd', {
    group = group,
    pattern = pattern,
    callback = function(args)
      M.write(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd('BufEnter', {
    group = group,
    pattern = pattern,
    callback = function(args)
      M.on_enter(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd('BufWipeout', {
    group = group,
    pattern = pattern,
    callback = function(args)
      -- (generation stays: buffer numbers are not reused.)
      writing[args.buf], reload_after_write[args.buf] = nil, nil
    end,
  })
end

return M
