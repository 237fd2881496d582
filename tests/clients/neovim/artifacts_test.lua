-- Headless Neovim tests of the artifact store UI
-- (clients/neovim/lua/mevedel/artifacts.lua) against the real server.
--
-- Run by tests/clients/test_neovim.py with MEVEDEL_TEST_WORKSPACE,
-- MEVEDEL_TEST_DOCUMENT and MEVEDEL_LSP_COMMAND (a JSON array). Prints one
-- PASS/FAIL line per test; exits non-zero when any failed.

local R = dofile(debug.getinfo(1, 'S').source:sub(2):match('(.*/)') .. 'runner.lua')
local root, document, command, TIMEOUT, out, test = R.root, R.document, R.command, R.TIMEOUT, R.out, R.test
local wait_for, expect, notifications, notified = R.wait_for, R.expect, R.notifications, R.notified
local mevedel_client, open_document, server_call, buffer_text = R.mevedel_client, R.open_document, R.server_call, R.buffer_text
local asked, answering, selected = R.asked, R.answering, R.selected

vim.cmd('filetype on')
vim.o.hidden = true
vim.cmd('runtime plugin/mevedel.lua')
local mevedel = require('mevedel')
mevedel.setup({ cmd = command })
local sessions = require('mevedel.sessions')
local artifacts = require('mevedel.artifacts')

local real_input = vim.ui.input
-- Stands in for the user at vim.ui.input, answering TEXT.
local function typing(text)
  vim.ui.input = function(_, on_confirm)
    on_confirm(text)
  end
end

-- The lines :MevedelArtifacts shows (the user then cancels).
local function listing()
  local shown
  answering({
    ['mevedel.artifact'] = function(_, formatted, on_choice)
      shown = formatted
      on_choice(nil)
    end,
  })
  vim.cmd('MevedelArtifacts')
  expect(shown, ':MevedelArtifacts showed nothing')
  out('listing:\n' .. table.concat(shown, '\n'))
  return shown
end

local function line_with(lines, text)
  for _, line in ipairs(lines) do
    if line:find(text, 1, true) then
      return line
    end
  end
end

-- The buffer of item ID, or nil.
local function item_buffer(id)
  return artifacts.buffers_of(id)[1]
end

-- Tests -----------------------------------------------------------------------------

local plan -- the id of the document the tests work on

test('artifacts: a new document from the list opens, and the list shows it by title, attached', function()
  open_document()
  sessions.create('Nvim artifacts')
  open_document()
  answering({ ['mevedel.artifact'] = '^%+ New document' })
  typing('Plan notes')
  vim.cmd('MevedelArtifacts')
  local bufnr = vim.api.nvim_get_current_buf()
  plan = vim.b[bufnr].mevedel_artifact
  expect(plan, 'no item buffer is current: %s', vim.api.nvim_buf_get_name(bufnr))
  expect(vim.api.nvim_buf_get_name(bufnr) == 'mevedel-artifact://' .. plan .. '/document.md', 'named %s', vim.api.nvim_buf_get_name(bufnr))
  expect(vim.bo.buftype == 'acwrite' and vim.bo.filetype == 'markdown', 'buftype %s filetype %s', vim.bo.buftype, vim.bo.filetype)
  expect(vim.bo.modifiable and not vim.bo.readonly and not vim.bo.modified, 'the new document is not editable')
  expect(vim.b.mevedel_artifact_title == 'Plan notes', 'title %s', tostring(vim.b.mevedel_artifact_title))
  expect(notified('created document Plan notes (attached to the session)'), 'creation was not told')
  local line = line_with(listing(), 'Plan notes')
  expect(line and line:find('^%* Plan notes  %(document, attached, 1 version%)'), 'listed as %s', tostring(line))
end)

test('artifacts: open from the list, edit, :w writes it (baseRevision from the buffer)', function()
  -- Read afresh: the buffer is wiped, then opened from the list.
  vim.cmd('bwipeout! ' .. item_buffer(plan))
  open_document()
  answering({ ['mevedel.artifact'] = '^. Plan notes', ['mevedel.artifact.action'] = '^Open$' })
  vim.cmd('MevedelArtifacts')
  local actions = selected('mevedel.artifact.action').formatted
  expect(vim.tbl_contains(actions, 'Detach') and vim.tbl_contains(actions, 'Versions') and vim.tbl_contains(actions, 'Delete'), 'actions %s', vim.inspect(actions))
  expect(vim.b.mevedel_artifact == plan, 'opened %s', vim.api.nvim_buf_get_name(0))
  local before = server_call('mevedel/artifact/read', { id = plan })
  expect(vim.b.mevedel_artifact_revision == before.revision, 'revision %s, the server has %s', tostring(vim.b.mevedel_artifact_revision), before.revision)
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { '# Plan', '', 'First step.' })
  expect(vim.bo.modified, 'the edit did not modify the buffer')
  vim.cmd('write')
  expect(not vim.bo.modified, 'still modified after :w')
  local after = server_call('mevedel/artifact/read', { id = plan })
  expect(after.content == '# Plan\n\nFirst step.\n', 'the server has %q', after.content)
  expect(vim.b.mevedel_artifact_revision == after.revision, 'the buffer kept revision %s, the server has %s', tostring(vim.b.mevedel_artifact_revision), after.revision)
  expect(notified('wrote Plan notes'), 'the write was not told')
end)

test('artifacts: a change made elsewhere reloads the buffer; a conflicting :w is told and keeps the text', function()
  local bufnr = item_buffer(plan)
  vim.api.nvim_set_current_buf(bufnr)
  -- Another writer (a request of its own) while the buffer is unmodified:
  -- the didChange reads it again.
  local current = server_call('mevedel/artifact/read', { id = plan })
  server_call('mevedel/artifact/write', { id = plan, content = '# Plan\n\nTheir step.\n', baseRevision = current.revision })
  wait_for('the buffer to show the other write', function()
    return buffer_text(bufnr) == '# Plan\n\nTheir step.'
  end)
  expect(not vim.bo[bufnr].modified, 'the reloaded buffer is modified')
  expect(vim.b[bufnr].mevedel_artifact_revision == server_call('mevedel/artifact/read', { id = plan }).revision, 'the reload did not take the revision')

  -- Now the user edits, and the other writer writes again first.
  vim.api.nvim_buf_set_lines(bufnr, 2, 3, false, { 'My step.' })
  local mine = buffer_text(bufnr)
  current = server_call('mevedel/artifact/read', { id = plan })
  local mark = #notifications
  server_call('mevedel/artifact/write', { id = plan, content = '# Plan\n\nTheir second step.\n', baseRevision = current.revision })
  wait_for('the change on the server to be told', function()
    return notified('Plan notes changed on the server; your unsaved changes stay', mark + 1) ~= nil
  end)
  expect(buffer_text(bufnr) == mine and vim.bo[bufnr].modified, 'the reload took the text: %s', buffer_text(bufnr))

  -- :w is refused as a conflict: told in the server's words, the text stays.
  answering({ ['mevedel.artifact.conflict'] = '^Keep my text' })
  mark = #notifications
  vim.cmd('write')
  local told = notified('nothing was written; your text stays in this buffer', mark + 1)
  expect(told and tostring(told.message):find(plan, 1, true), 'the conflict was not told with the server message: %s', vim.inspect(notifications[#notifications]))
  expect(buffer_text(bufnr) == mine and vim.bo[bufnr].modified, 'the buffer lost its text: %s', buffer_text(bufnr))
  wait_for('the reload offer', function()
    return selected('mevedel.artifact.conflict') ~= nil
  end)
  expect(server_call('mevedel/artifact/read', { id = plan }).content == '# Plan\n\nTheir second step.\n', 'the conflicting write went through')

  -- Again, now taking the server's text: the user's goes to a buffer.
  answering({ ['mevedel.artifact.conflict'] = '^Reload' })
  vim.cmd('write')
  wait_for("the server's text in the buffer", function()
    return buffer_text(bufnr) == '# Plan\n\nTheir second step.' and not vim.bo[bufnr].modified
  end)
  local copy = vim.fn.bufnr('mevedel unsaved text of Plan notes (' .. plan .. ')')
  expect(copy > 0 and buffer_text(copy) == mine, 'your text was not kept: %s', copy > 0 and buffer_text(copy) or 'no buffer')
  -- The buffer writes again from the new revision.
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 2, 3, false, { 'Merged step.' })
  vim.cmd('write')
  expect(server_call('mevedel/artifact/read', { id = plan }).content == '# Plan\n\nMerged step.\n', 'the write after the reload failed')
end)

test('artifacts: a read answered after a newer one does not put its older text back', function()
  -- Two writes elsewhere, each read again here on its didChange; the
  -- first read's answer is held back until the second read's is in the
  -- buffer, then delivered.
  local bufnr = item_buffer(plan)
  vim.api.nvim_set_current_buf(bufnr)
  local real_async = mevedel.request_async
  local hold, held = true, nil
  mevedel.request_async = function(client, method, params, callback)
    if hold and method == 'mevedel/artifact/read' and params.id == plan then
      hold = false
      return real_async(client, method, params, function(...)
        held = { n = select('#', ...), ... }
        held.callback = callback
      end)
    end
    return real_async(client, method, params, callback)
  end
  local ok, err = pcall(function()
    local current = server_call('mevedel/artifact/read', { id = plan })
    current = server_call('mevedel/artifact/write', { id = plan, content = '# Plan\n\nOlder.\n', baseRevision = current.revision })
    wait_for('the first read to be answered (held back)', function()
      return held ~= nil
    end)
    expect(held[1] and held[1].content == '# Plan\n\nOlder.\n', 'the held read says %s', vim.inspect(held[1]))
    server_call('mevedel/artifact/write', { id = plan, content = '# Plan\n\nNewer.\n', baseRevision = current.revision })
    wait_for('the newer text in the buffer', function()
      return buffer_text(bufnr) == '# Plan\n\nNewer.'
    end)
    held.callback(unpack(held, 1, held.n))
    expect(buffer_text(bufnr) == '# Plan\n\nNewer.', 'the older read put back %s', buffer_text(bufnr))
    expect(vim.b[bufnr].mevedel_artifact_revision == server_call('mevedel/artifact/read', { id = plan }).revision, 'the buffer has an older revision')
  end)
  mevedel.request_async = real_async
  expect(ok, '%s', tostring(err))
  -- The buffer still writes (its revision is the newest).
  vim.api.nvim_buf_set_lines(bufnr, 2, 3, false, { 'Merged step.' })
  vim.cmd('write')
  expect(not vim.bo[bufnr].modified, 'the write failed')
end)

test('artifacts: versions are listed newest first and restore puts one back', function()
  local bufnr = item_buffer(plan)
  vim.api.nvim_set_current_buf(bufnr)
  vim.cmd('MevedelArtifactSaveVersion')
  expect(notified('saved version 2 of Plan notes'), 'the saved version was not told')
  -- Declined: nothing is restored.
  answering({ ['mevedel.artifact.version'] = '^v1  created', ['mevedel.confirm'] = '^Cancel' })
  vim.cmd('MevedelArtifactVersions')
  wait_for('the restore question', function()
    return selected('mevedel.confirm') ~= nil
  end)
  local question = selected('mevedel.confirm').prompt
  out('asked: ' .. question)
  expect(question:find('Restore Plan notes to version 1 (created, 0 bytes, ', 1, true), 'asked %s', question)
  expect(question:find('It replaces the current text %(%d+ bytes%), which is version 2%.'), 'asked %s', question)
  wait_for('the declined restore told', function()
    return notified('Plan notes was not restored') ~= nil
  end)
  expect(server_call('mevedel/artifact/read', { id = plan }).content ~= '', 'restored without a yes')
  answering({ ['mevedel.artifact.version'] = '^v1  created', ['mevedel.confirm'] = '^Restore' })
  vim.cmd('MevedelArtifactVersions')
  local offered = selected('mevedel.artifact.version').formatted
  out('versions:\n' .. table.concat(offered, '\n'))
  expect(offered[1]:find('^v2  saved') and offered[2]:find('^v1  created'), 'versions %s', vim.inspect(offered))
  wait_for('the restored (empty) document in the buffer', function()
    return buffer_text(bufnr) == '' and not vim.bo[bufnr].modified
  end)
  expect(server_call('mevedel/artifact/read', { id = plan }).content == '', 'the server did not restore')
  -- And back to the saved one (the restore is a version too).
  answering({ ['mevedel.artifact.version'] = '^v2  saved', ['mevedel.confirm'] = '^Restore' })
  vim.cmd('MevedelArtifactVersions')
  offered = selected('mevedel.artifact.version').formatted
  expect(offered[1]:find('^v3  restored'), 'versions %s', vim.inspect(offered))
  wait_for('the saved version in the buffer', function()
    return buffer_text(bufnr) == '# Plan\n\nMerged step.'
  end)
end)

test('artifacts: detach, attach, duplicate and comment', function()
  vim.api.nvim_set_current_buf(item_buffer(plan))
  vim.cmd('MevedelArtifactDetach')
  local line = line_with(listing(), 'Plan notes')
  expect(line:find('^  Plan notes  %(document, %d') and not line:find('attached', 1, true), 'listed as %s', line)
  vim.api.nvim_set_current_buf(item_buffer(plan))
  vim.cmd('MevedelArtifactAttach')
  line = line_with(listing(), 'Plan notes')
  expect(line:find('^%* Plan notes  %(document, attached'), 'listed as %s', line)
  vim.api.nvim_set_current_buf(item_buffer(plan))
  vim.cmd('MevedelArtifactDuplicate Plan copy')
  line = line_with(listing(), 'Plan copy')
  expect(line and line:find('^%* Plan copy  %(document, attached, 1 version%)'), 'the copy is listed as %s', tostring(line))
  vim.api.nvim_set_current_buf(item_buffer(plan))
  vim.cmd('MevedelArtifactComment Please tighten the intro')
  local comments = server_call('mevedel/artifact/read', { id = plan }).comments
  expect(#comments == 1 and comments[1].text == 'Please tighten the intro' and comments[1].author == 'user', 'comments %s', vim.inspect(comments))
  expect(notified('comment 1 on Plan notes'), 'the comment was not told')
end)

test("artifacts: the item's conversation opens its own session's chat", function()
  vim.api.nvim_set_current_buf(item_buffer(plan))
  vim.cmd('MevedelArtifactConversation')
  expect(notified('started the conversation about Plan notes'), 'the new conversation was not told')
  local session = vim.b.mevedel_chat_session
  expect(session and vim.b.mevedel_session == session, 'no chat is current: %s', vim.api.nvim_buf_get_name(0))
  local conversation = server_call('mevedel/artifact/conversation', { id = plan })
  expect(conversation.sessionId == session and conversation.created == false, 'the chat is of %s, the item talks in %s', session, vim.inspect(conversation))
  expect(buffer_text():find('No turns yet.', 1, true), 'the chat shows %s', buffer_text())
  pcall(vim.cmd, 'close')
end)

test('artifacts: a whiteboard opens as its JSON scene; a refused write shows the server message', function()
  open_document()
  vim.cmd('MevedelArtifactNew whiteboard Sketch')
  local bufnr = vim.api.nvim_get_current_buf()
  expect(vim.b.mevedel_artifact_kind == 'whiteboard' and vim.bo.filetype == 'json', 'kind %s filetype %s', tostring(vim.b.mevedel_artifact_kind), vim.bo.filetype)
  local ok, scene = pcall(vim.json.decode, buffer_text(bufnr))
  expect(ok and type(scene) == 'table', 'the buffer is not a JSON scene: %s', buffer_text(bufnr))
  local id = vim.b.mevedel_artifact
  local before = server_call('mevedel/artifact/read', { id = id }).content
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { 'not a scene' })
  local mark = #notifications
  vim.cmd('write')
  local told = notified('nothing was written', mark + 1)
  expect(told, 'the refusal was not told')
  out('refusal: ' .. tostring(told.message))
  expect(vim.bo[bufnr].modified and buffer_text(bufnr) == 'not a scene', 'the buffer lost its text')
  expect(server_call('mevedel/artifact/read', { id = id }).content == before, 'the server took the refused scene')
  vim.cmd('edit!')
  expect(not vim.bo.modified and buffer_text(bufnr) == before:gsub('\n$', ''), ':edit! did not read it again: %s', buffer_text(bufnr))
end)

test('artifacts: delete asks first, then the item is gone from the list and its buffer closed', function()
  local copy
  for _, row in ipairs(server_call('mevedel/artifact/list', vim.empty_dict()).items) do
    if row.title == 'Plan copy' then
      copy = row.id
    end
  end
  artifacts.open(copy)
  local copy_buffer = vim.api.nvim_get_current_buf()
  expect(vim.b.mevedel_artifact == copy, 'the copy did not open')
  open_document()
  answering({ ['mevedel.artifact'] = '^. Plan copy', ['mevedel.confirm'] = '^Cancel$' })
  vim.cmd('MevedelArtifactDelete')
  expect(line_with(listing(), 'Plan copy'), 'cancelled, yet the copy is gone')
  answering({ ['mevedel.artifact'] = '^. Plan copy', ['mevedel.confirm'] = '^Delete$' })
  vim.cmd('MevedelArtifactDelete')
  expect(selected('mevedel.confirm').prompt:find('Delete Plan copy?', 1, true), 'asked %s', selected('mevedel.confirm').prompt)
  expect(notified('deleted Plan copy'), 'the deletion was not told')
  local shown = listing()
  expect(not line_with(shown, 'Plan copy') and line_with(shown, 'Plan notes'), 'the list after delete: %s', vim.inspect(shown))
  expect(not vim.api.nvim_buf_is_valid(copy_buffer) or not vim.api.nvim_buf_is_loaded(copy_buffer), 'the deleted item is still open')
end)

test('artifacts: an item another server holds is read-only here until it hands it over', function()
  -- A second server process for the same workspace makes a document and
  -- writes it: it holds the item's lease.
  local other_id
  local other_config = { name = 'mevedel-other', cmd = command, root_dir = root }
  if vim.lsp.start and vim.fn.has('nvim-0.11') == 1 then
    other_id = vim.lsp.start(other_config, { attach = false })
  else
    other_id = vim.lsp.start_client(other_config)
  end
  local other = vim.lsp.get_client_by_id(other_id)
  wait_for('the other server', function()
    return other.initialized == true
  end)
  local function other_call(method, params)
    local result, err = mevedel.request(other, method, params)
    expect(result, 'the other server: %s failed: %s', method, tostring(err))
    return result
  end
  local held = other_call('mevedel/artifact/create', { kind = 'document', title = 'Held notes' }).id
  local base = other_call('mevedel/artifact/read', { id = held }).revision
  other_call('mevedel/artifact/write', { id = held, content = '# Held\n\nThe other server wrote this.\n', baseRevision = base })

  local line = line_with(listing(), 'Held notes')
  expect(line and line:find('held by ', 1, true), 'listed as %s', tostring(line))
  open_document()
  local mark = #notifications
  answering({ ['mevedel.artifact'] = '^. Held notes' })
  vim.cmd('MevedelArtifactOpen')
  local bufnr = vim.api.nvim_get_current_buf()
  expect(vim.b.mevedel_artifact == held, 'opened %s', vim.api.nvim_buf_get_name(bufnr))
  expect(buffer_text(bufnr) == '# Held\n\nThe other server wrote this.', 'the buffer shows %s', buffer_text(bufnr))
  expect(vim.b.mevedel_artifact_writable == false and vim.bo.readonly and not vim.bo.modifiable, 'the held item is editable here')
  local holder = vim.b.mevedel_artifact_holder
  expect(type(holder) == 'string' and holder ~= '', 'no holder host: %s', tostring(holder))
  expect(line:find('held by ' .. holder, 1, true), 'listed as %s', line)
  expect(notified('Held notes is held by ' .. holder .. ': read-only here (:MevedelArtifactRequest asks for it)', mark + 1), 'the holder was not told')
  expect(artifacts.status(bufnr):find('held by ' .. holder, 1, true), 'status %s', artifacts.status(bufnr))

  -- :w is refused here, saying why.
  mark = #notifications
  vim.cmd('write!')
  expect(notified('nothing was written', mark + 1), 'the refused write was not told')

  -- Asking for it: the other server hands it over once the item is idle
  -- there, and the buffer turns writable.
  mark = #notifications
  vim.cmd('MevedelArtifactRequest')
  expect(notified('asked ' .. holder .. ' for Held notes', mark + 1), 'the request was not told')
  wait_for('the hand-over', function()
    return vim.b[bufnr].mevedel_artifact_writable == true
  end, 90000)
  expect(vim.bo[bufnr].modifiable and not vim.bo[bufnr].readonly, 'writable, yet not modifiable')
  expect(notified('Held notes is writable here now', mark + 1), 'the hand-over was not told')
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 2, 3, false, { 'Written here.' })
  vim.cmd('write')
  expect(server_call('mevedel/artifact/read', { id = held }).content == '# Held\n\nWritten here.\n', 'the write after the hand-over failed')
  vim.lsp.stop_client(other_id, true)
end)

test('artifacts: an open buffer turns read-only naming the other editor once it writes, keeping unsaved text; a restore keeps what it replaces', function()
  -- A second server process for the same workspace, as a second editor on
  -- this machine: this one's server is told by its watch of the item.
  local other_id
  local other_config = { name = 'mevedel-second', cmd = command, root_dir = root }
  if vim.lsp.start and vim.fn.has('nvim-0.11') == 1 then
    other_id = vim.lsp.start(other_config, { attach = false })
  else
    other_id = vim.lsp.start_client(other_config)
  end
  local other = vim.lsp.get_client_by_id(other_id)
  wait_for('the second server', function()
    return other.initialized == true
  end)
  open_document()
  local id = server_call('mevedel/artifact/create', { kind = 'document', title = 'Shared notes', content = '# Shared\n' }).id
  local bufnr = artifacts.open(id, { client = mevedel_client(vim.fn.bufnr(document)) })
  expect(vim.b[bufnr].mevedel_artifact_writable == true and vim.bo[bufnr].modifiable, 'not writable at first')
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, { 'my unsaved line' })
  expect(vim.bo[bufnr].modified, 'the edit did not modify the buffer')
  local mark = #notifications
  local written, err = mevedel.request(other, 'mevedel/artifact/write', { id = id, content = '# Shared\n\nThe second editor wrote this.\n' })
  expect(written, 'the second server could not write: %s', tostring(err))
  wait_for('the buffer to turn read-only with the other text', function()
    return vim.b[bufnr].mevedel_artifact_writable == false and buffer_text(bufnr) == '# Shared\n\nThe second editor wrote this.'
  end)
  expect(not vim.bo[bufnr].modifiable and not vim.bo[bufnr].modified, 'still editable or modified')
  local holder = vim.b[bufnr].mevedel_artifact_holder
  out('holder: ' .. tostring(holder))
  expect(type(holder) == 'string' and holder:find('^Neovim .*%(pid %d+%) on '), 'the holder is %s', tostring(holder))
  expect(notified('Shared notes is held by ' .. holder .. ': read-only here', mark + 1), 'the takeover was not told')
  local kept = vim.fn.bufnr('mevedel unsaved text of Shared notes (' .. id .. ')')
  expect(kept > 0 and buffer_text(kept) == '# Shared\nmy unsaved line', 'the unsaved text was not kept: %s', kept > 0 and buffer_text(kept) or 'no buffer')
  -- The second editor exits: its server hands the item back.
  vim.lsp.stop_client(other_id, true)
  wait_for('the buffer to turn writable again', function()
    return vim.b[bufnr].mevedel_artifact_writable == true
  end)
  -- A restore keeps the text it replaces as a version, and says so first.
  vim.api.nvim_set_current_buf(bufnr)
  answering({ ['mevedel.artifact.version'] = '^v1  created', ['mevedel.confirm'] = '^Restore' })
  vim.cmd('MevedelArtifactVersions')
  wait_for('the restored text', function()
    return buffer_text(bufnr) == '# Shared'
  end)
  local question = selected('mevedel.confirm').prompt
  expect(question:find('which no version holds: it is kept as a new version first', 1, true), 'asked %s', question)
  local versions = server_call('mevedel/artifact/versions', { id = id }).versions
  expect(versions[1].reason == 'restored' and versions[2].reason == 'replaced', 'versions %s', vim.inspect(versions))
  expect(versions[2].size == #'# Shared\n\nThe second editor wrote this.\n', 'the replaced version holds %d bytes', versions[2].size)
  -- The comments and their delivery can be read.
  server_call('mevedel/artifact/comment', { id = id, text = 'Shorter, please' })
  vim.cmd('MevedelArtifactComments')
  local shown = buffer_text(0)
  out('comments:\n' .. shown)
  expect(shown:find('#1  .*  user  ') and shown:find('  Shorter, please', 1, true), 'comments shown as %s', shown)
  -- An empty title makes nothing and says so.
  mark = #notifications
  typing('   ')
  vim.cmd('MevedelArtifactNew')
  expect(notified('no title given: no document was created', mark + 1), 'the empty title was not told')
end)

vim.ui.input = real_input
R.finish()
