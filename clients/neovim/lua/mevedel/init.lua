-- mevedel: a thin Neovim client for the mevedel-lsp language server.
--
-- The server does the work (address completion, hover, definition,
-- diagnostics); this module starts it for Markdown and text buffers, passes
-- the settings, and opens `mevedel-resource:` virtual documents read-only by
-- reading them through `mevedel/resource/read` (sessions, their transcript
-- views and turns are in `mevedel.sessions`, the agent chat in
-- `mevedel.chat`, the workspace artifact store in `mevedel.artifacts`). Works on Neovim 0.7 (`vim.lsp.start_client` +
-- `vim.lsp.buf_attach_client`), on versions with `vim.lsp.start`, and from
-- 0.11 as a `vim.lsp.config` entry (`lsp/mevedel.lua`: `vim.lsp.enable('mevedel')`).

local M = {}

M.virtual_scheme = 'mevedel-resource'
M.configuration_section = 'mevedel'

local defaults = {
  -- The server program and its arguments.
  cmd = { 'mevedel-lsp' },
  -- The server's settings, with its camelCase keys (see the guide).
  settings = {},
  -- Filetypes whose buffers the server manages.
  filetypes = { 'markdown', 'text' },
  -- A buffer's workspace is the nearest directory above it holding one of
  -- these, else the buffer's own directory.
  root_markers = { '.mevedel', '.git' },
  -- How many lines one `mevedel/resource/read` page asks for.
  read_page_lines = 2000,
  -- Milliseconds a synchronous read may take before it is reported as failed.
  timeout_ms = 10000,
  -- Called as on_attach(client, bufnr) after the server attaches to a buffer.
  on_attach = nil,
  -- The agent chat (`mevedel.chat`).
  chat = {
    -- Where :MevedelChat opens the chat: 'vsplit', 'split', 'tab' or 'current'.
    window = 'vsplit',
    -- Open the chat when a prompt is sent and it is not shown.
    open_on_prompt = true,
    -- Buffer-local keys of the chat buffer (false: no key).
    keys = {
      prompt = 'p',
      cancel = '<C-c>',
      rewind = 'r',
      redo = 'R',
      fork = 'f',
      worktree_fork = 'W',
      show_turn = '<CR>',
      review = 'd',
      options = 'o',
      queue_edit = 'e',
      queue_cancel = 'x',
      steer = 'S',
      close = 'q',
      help = '?',
    },
  },
}

local config = vim.deepcopy(defaults)
-- Neovim 0.7 has no vim.lsp.start to find a running client; one per root.
local clients_by_root = {}
-- Whether setup() has run (commands used before it set up with defaults).
local autocommands_defined = false

local function notify(message, level)
  vim.notify('mevedel: ' .. message, level or vim.log.levels.ERROR)
end
M.notify = notify

-- What did not happen when the user answered Cancel to the server's
-- question (the request it guarded fails with this kind). The question
-- said why, so this is no error and not the server's whole text: that
-- was wider than the command line and, echoed just after the question,
-- asked "Press ENTER" of someone who had already answered.
local DECLINED = {
  ['beside-held-declined'] = function()
    return 'no new session was started'
  end,
  ['takeover-declined'] = function(data)
    return tostring(data.authored) .. ' was not taken over'
  end,
  ['identity-declined'] = function(data)
    return tostring(data.authored) .. ' was not bound to this workspace'
  end,
}

--- Tell the user a request failed: ERR, the server's text, as an error;
--- a question the user declined (DATA's kind) as what was not done.
function M.notify_failure(err, data)
  local declined = type(data) == 'table' and DECLINED[data.kind]
  if declined then
    notify(declined(data), vim.log.levels.INFO)
  else
    notify(err)
  end
end

-- The server keeps any setting a message leaves out, so every one is sent,
-- vim.NIL (JSON null) meaning "the server's default".
local SETTING_KEYS = {
  'memoryRoots',
  'skillRoots',
  'completionLimit',
  'currentSession',
  'diagnostics',
  'followPublished',
  'sessionWatch',
  'leaseSeconds',
  'controlTransfer',
  'remoteWorkspaces',
  'agents',
  'defaultAgent',
  'permissions',
  'permissionTimeoutSeconds',
  'agentStartTimeoutSeconds',
  'cancelTimeoutSeconds',
  'agentIdleTimeoutSeconds',
  'checkpointExclude',
}
-- vim.json encodes an empty Lua table as an array; these are objects.
local OBJECT_KEYS = {
  diagnostics = true,
  currentSession = true,
  sessionWatch = true,
  controlTransfer = true,
  agents = true,
}

local function settings_object(settings)
  local copy = vim.deepcopy(settings or {})
  for _, key in ipairs(SETTING_KEYS) do
    if copy[key] == nil then
      copy[key] = vim.NIL
    elseif OBJECT_KEYS[key] and type(copy[key]) == 'table' and next(copy[key]) == nil then
      copy[key] = vim.empty_dict()
    end
  end
  return copy
end

function M.is_virtual_uri(uri)
  return type(uri) == 'string' and uri:sub(1, #M.virtual_scheme + 1) == M.virtual_scheme .. ':'
end

--- The session id a virtual URI carries, or nil when it names none
--- (`mevedel-resource:/WORKSPACE/SESSION/SCHEME/TAIL`, `_` for none).
function M.uri_session(uri)
  if not M.is_virtual_uri(uri) then
    return nil
  end
  local session = uri:sub(#M.virtual_scheme + 2):match('^/*[^/]+/([^/]+)')
  if session == nil or session == '_' then
    return nil
  end
  return session
end

-- Neovim keeps a buffer name as a URI only in the `scheme://` form; any
-- other form is taken for a relative file name and made absolute. The server
-- accepts both spellings of an empty authority, so virtual URIs are named
-- `mevedel-resource:///...` here.
function M.buffer_name_for_uri(uri)
  local prefix = M.virtual_scheme .. ':'
  if M.is_virtual_uri(uri) and uri:sub(#prefix + 1, #prefix + 2) ~= '//' then
    return prefix .. '//' .. uri:sub(#prefix + 1)
  end
  return uri
end

local function normalize_locations(result)
  if type(result) ~= 'table' then
    return result
  end
  local function fix(location)
    if location.uri then
      location.uri = M.buffer_name_for_uri(location.uri)
    end
    if location.targetUri then
      location.targetUri = M.buffer_name_for_uri(location.targetUri)
    end
  end
  if result.uri or result.targetUri then
    fix(result)
  else
    for _, location in ipairs(result) do
      fix(location)
    end
  end
  return result
end

local function find_root(path)
  local dir = vim.fn.fnamemodify(path, ':p:h')
  while true do
    for _, marker in ipairs(config.root_markers) do
      if vim.loop.fs_stat(dir .. '/' .. marker) then
        return dir
      end
    end
    local parent = vim.fn.fnamemodify(dir, ':h')
    if parent == dir then
      break
    end
    dir = parent
  end
  return vim.fn.fnamemodify(path, ':p:h')
end

local function on_attach(client, bufnr)
  -- Completion with CTRL-X CTRL-O in every Neovim version.
  vim.api.nvim_buf_set_option(bufnr, 'omnifunc', 'v:lua.vim.lsp.omnifunc')
  if config.on_attach then
    config.on_attach(client, bufnr)
  end
end

local function handlers()
  local definition = function(err, result, ctx, handler_config)
    return vim.lsp.handlers['textDocument/definition'](err, normalize_locations(result), ctx, handler_config)
  end
  return {
    ['textDocument/definition'] = definition,
    ['mevedel/session/didChange'] = function(err, params, ctx)
      return require('mevedel.sessions').on_did_change(err, params, ctx)
    end,
    ['mevedel/session/didPublish'] = function(err, params, ctx)
      return require('mevedel.sessions').on_did_publish(err, params, ctx)
    end,
    ['mevedel/control/didChange'] = function(err, params, ctx)
      return require('mevedel.control').on_did_change(err, params, ctx)
    end,
    ['mevedel/turn/didUpdate'] = function(err, params, ctx)
      return require('mevedel.chat').on_did_update(err, params, ctx)
    end,
    ['mevedel/agent/didChangeOptions'] = function(err, params, ctx)
      return require('mevedel.options').on_did_change(err, params, ctx)
    end,
    ['mevedel/queue/didChange'] = function(err, params, ctx)
      return require('mevedel.queue').on_did_change(err, params, ctx)
    end,
    ['mevedel/artifact/didChange'] = function(err, params, ctx)
      return require('mevedel.artifacts').on_did_change(err, params, ctx)
    end,
    ['window/showMessageRequest'] = function(err, params, ctx)
      return require('mevedel.sessions').on_question(err, params, ctx)
    end,
  }
end

local function client_config(root)
  return {
    name = 'mevedel',
    cmd = config.cmd,
    root_dir = root,
    init_options = settings_object(config.settings),
    -- Answers the server's workspace/configuration requests.
    settings = { [M.configuration_section] = settings_object(config.settings) },
    handlers = handlers(),
    on_attach = on_attach,
    on_exit = function(_, _, client_id)
      clients_by_root[root] = nil
      M.client_exited(client_id)
    end,
  }
end

-- A client's server exited: its chats stop waiting for it (only when a
-- chat was ever opened; on_exit runs in a fast event, so not at once).
function M.client_exited(client_id)
  if package.loaded['mevedel.chat'] then
    vim.schedule(function()
      package.loaded['mevedel.chat'].on_client_exit(client_id)
    end)
  end
end

-- Client methods are closures on 0.7 and methods taking self from 0.11 on.
local methods_take_self = vim.fn.has('nvim-0.11') == 1

local function invoke(client, name, ...)
  if methods_take_self then
    return client[name](client, ...)
  end
  return client[name](...)
end

local function live_client(id)
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not invoke(client, 'is_stopped') then
    return client
  end
  return nil
end

local function buffer_clients(bufnr)
  if vim.lsp.get_clients then
    return vim.lsp.get_clients({ bufnr = bufnr, name = 'mevedel' })
  end
  local found = {}
  for _, client in pairs(vim.lsp.buf_get_clients(bufnr)) do
    if client.name == 'mevedel' then
      table.insert(found, client)
    end
  end
  return found
end

-- Every running mevedel client (those vim.lsp.enable started too).
local function all_clients()
  local all = vim.lsp.get_clients and vim.lsp.get_clients({ name = 'mevedel' }) or vim.lsp.get_active_clients()
  return vim.tbl_filter(function(client)
    return client.name == 'mevedel' and not invoke(client, 'is_stopped')
  end, all)
end

-- What a client started here starts with: the `vim.lsp.config` entry when
-- the user enabled it (their cmd and settings, which setup() never saw),
-- else setup()'s.
local function start_config(root)
  if vim.lsp.is_enabled and vim.lsp.is_enabled('mevedel') then
    local entry = vim.deepcopy(vim.lsp.config.mevedel)
    entry.root_dir = root
    return entry
  end
  return client_config(root)
end

-- Starts (or reuses) the server for ROOT and attaches BUFNR when given.
-- Returns the client id.
local function ensure_client(root, bufnr)
  local existing = live_client(clients_by_root[root])
  if existing then
    if bufnr then
      vim.lsp.buf_attach_client(bufnr, existing.id)
    end
    return existing.id
  end
  local id
  local starting = start_config(root)
  if vim.lsp.start and bufnr then
    id = vim.lsp.start(starting, { bufnr = bufnr })
  elseif vim.lsp.start and vim.fn.has('nvim-0.11') == 1 then
    id = vim.lsp.start(starting, { attach = false })
  else
    id = vim.lsp.start_client(starting)
    if id and bufnr then
      vim.lsp.buf_attach_client(bufnr, id)
    end
  end
  if not id then
    notify('could not start ' .. table.concat(starting.cmd, ' '))
    return nil
  end
  clients_by_root[root] = id
  return id
end

--- Attach the server to BUFNR (default: the current buffer).
function M.attach(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local name = vim.api.nvim_buf_get_name(bufnr)
  if M.is_virtual_uri(name) then
    return ensure_client(vim.b[bufnr].mevedel_root or vim.loop.cwd(), bufnr)
  end
  if vim.api.nvim_buf_get_option(bufnr, 'buftype') ~= '' then
    return nil
  end
  return ensure_client(find_root(name ~= '' and name or vim.loop.cwd() .. '/x'), bufnr)
end

--- The running mevedel client for the current buffer, else the alternate
--- buffer's (a definition jump arrives from there), else any, else one
--- started for the current directory. Waits for it to be initialized.
function M.client()
  -- A chat buffer names the client it belongs to.
  local id = live_client(vim.b.mevedel_client) and vim.b.mevedel_client or nil
  for _, bufnr in ipairs({ vim.api.nvim_get_current_buf(), vim.fn.bufnr('#') }) do
    if not id and bufnr > 0 then
      local attached = buffer_clients(bufnr)[1]
      id = attached and attached.id
    end
  end
  if not id then
    for _, candidate in pairs(clients_by_root) do
      if live_client(candidate) then
        id = candidate
        break
      end
    end
  end
  if not id then
    -- One vim.lsp.enable started, for the current directory's workspace
    -- first.
    local cwd = vim.loop.cwd()
    for _, client in ipairs(all_clients()) do
      if not id or client.config.root_dir == cwd then
        id = client.id
      end
    end
  end
  id = id or ensure_client(vim.loop.cwd(), nil)
  local client = live_client(id)
  if not client then
    return nil, 'the mevedel server is not running'
  end
  local ready = vim.wait(config.timeout_ms, function()
    return client.initialized == true or invoke(client, 'is_stopped')
  end, 10)
  if not ready or invoke(client, 'is_stopped') then
    local cmd = type(client.config.cmd) == 'table' and client.config.cmd or config.cmd
    return nil, 'the mevedel server did not start (' .. table.concat(cmd, ' ') .. ')'
  end
  return client
end

--- The mevedel client, or nil after telling the user why there is none.
function M.client_or_notify()
  local client, err = M.client()
  if not client then
    notify(err)
  end
  return client
end

--- Whether a decoded JSON value is present (neither absent nor null).
function M.present(value)
  return value ~= nil and value ~= vim.NIL
end

--- A decoded JSON value, or nil when it is absent or null.
function M.value(x)
  if x == nil or x == vim.NIL then
    return nil
  end
  return x
end

--- Request params with sessionId when SESSION is given (else the server's
--- current session); an empty table goes out as a JSON object.
function M.scoped(session, params)
  params = params or {}
  if session then
    params.sessionId = session
  end
  return next(params) == nil and vim.empty_dict() or params
end

local function error_text(err)
  if type(err) ~= 'table' then
    return tostring(err)
  end
  local data = err.data
  if type(data) == 'table' and data.authored and data.reason then
    return data.authored .. ': ' .. data.reason
  end
  return err.message or vim.inspect(err)
end

--- Send METHOD with PARAMS and wait for the answer: result, or nil and the
--- server's error text (which names the authored input) and its error data.
function M.request(client, method, params)
  local response, failure = invoke(client, 'request_sync', method, params, config.timeout_ms, 0)
  if not response then
    return nil, method .. ': ' .. tostring(failure or 'no answer')
  end
  if response.err then
    return nil, error_text(response.err), response.err.data
  end
  return response.result
end

--- Send METHOD with PARAMS without waiting; CALLBACK gets (result) or
--- (nil, error text, error data).
function M.request_async(client, method, params, callback)
  local sent = invoke(client, 'request', method, params, function(err, result)
    if err then
      callback(nil, error_text(err), type(err) == 'table' and err.data or nil)
    else
      callback(result)
    end
  end)
  if not sent then
    callback(nil, method .. ': the mevedel server is not running')
  end
end

local function rest_of_line(client, ref, line, char_offset)
  local pieces = {}
  while true do
    local params = vim.tbl_extend('force', ref, { view = 'plain', offset = line, limit = 1, charOffset = char_offset })
    local page, err = M.request(client, 'mevedel/resource/read', params)
    if not page then
      return nil, err
    end
    table.insert(pieces, page.text)
    local again
    for _, cut in ipairs(page.truncatedLines or {}) do
      if cut.line == line then
        again = cut
      end
    end
    if not again then
      return table.concat(pieces)
    end
    if again.charOffset <= char_offset then
      return nil, string.format('%s: line %d does not advance past character %d', page.canonical, line, char_offset)
    end
    char_offset = again.charOffset
  end
end

--- Read all of REF's plain projection ({ uri = ... } or { address = ... }):
--- pages joined, lines the server cut at its page width continued, so line
--- numbers match the server's. TOKEN, when given, rides on the first page
--- (where the server does most of the work) so its `$/progress` shows the
--- native way. Returns { canonical, kind, lines } or nil, err.
function M.read_document(client, ref, token)
  local lines, first, offset, total = {}, nil, nil, 0
  while true do
    local params = vim.tbl_extend('force', ref, { view = 'plain', limit = config.read_page_lines, offset = offset })
    if first == nil then
      params.workDoneToken = token
    end
    local page, err = M.request(client, 'mevedel/resource/read', params)
    if not page then
      return nil, err
    end
    first = first or page
    if page.kind == 'empty' or page.totalLines == 0 then
      break
    end
    total = page.totalLines
    local n = page.startLine
    for text in (page.text .. '\n'):gmatch('(.-)\n') do
      lines[n] = text
      n = n + 1
    end
    for _, cut in ipairs(page.truncatedLines or {}) do
      local rest, rest_err = rest_of_line(client, ref, cut.line, cut.charOffset)
      if not rest then
        return nil, rest_err
      end
      lines[cut.line] = (lines[cut.line] or '') .. rest
    end
    local next_offset = page.nextOffset
    if next_offset == nil or next_offset == vim.NIL then
      break
    end
    if next_offset <= page.startLine then
      return nil, string.format('%s: the next page (%d) does not advance', page.canonical, next_offset)
    end
    offset = next_offset
  end
  local ordered = {}
  for i = 1, total do
    ordered[i] = lines[i] or ''
  end
  return { canonical = first.canonical, kind = first.kind, lines = ordered }
end

local function filetype_for(canonical)
  -- A transcript (history://root) is Markdown, as the server renders it.
  if canonical:match('%.md$') or canonical:match('%.markdown$') or canonical == 'history://root' then
    return 'markdown'
  end
  return 'text'
end

local progress_tokens = 0

-- Replaces BUFNR's lines with LINES from the first line that differs, so
-- the text above (what a reader of a growing transcript is on) and the
-- cursors on it stay put; a window that was on the last line (following the
-- conversation) stays on the last line.
local function replace_lines(bufnr, lines)
  local old = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local following = {}
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_buf(win) == bufnr and #old > 0 and vim.api.nvim_win_get_cursor(win)[1] >= #old then
      table.insert(following, win)
    end
  end
  local first = 1
  while first <= #old and first <= #lines and old[first] == lines[first] do
    first = first + 1
  end
  if first > #old and first > #lines then
    return
  end
  vim.api.nvim_buf_set_lines(bufnr, first - 1, -1, false, vim.list_slice(lines, first))
  for _, win in ipairs(following) do
    vim.api.nvim_win_set_cursor(win, { math.max(1, #lines), 0 })
  end
end

-- Fills BUFNR with the virtual document URI read through CLIENT, read-only.
-- Returns true, or nil and the error text.
local function fill_virtual(bufnr, client, uri, token)
  local document, err = M.read_document(client, { uri = uri }, token)
  if not document then
    return nil, err
  end
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
  vim.api.nvim_buf_set_option(bufnr, 'readonly', false)
  replace_lines(bufnr, document.lines)
  vim.api.nvim_buf_set_option(bufnr, 'modified', false)
  vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
  vim.api.nvim_buf_set_option(bufnr, 'readonly', true)
  vim.b[bufnr].mevedel_canonical = document.canonical
  return true
end

--- BufReadCmd of `mevedel-resource:` buffers: fill BUFNR with the virtual
--- document URI names, read-only.
function M.read_virtual(bufnr, uri)
  local client, err = M.client()
  local filled
  if client then
    progress_tokens = progress_tokens + 1
    filled, err = fill_virtual(bufnr, client, uri, 'mevedel-read-' .. progress_tokens)
  end
  if not filled then
    vim.api.nvim_buf_set_option(bufnr, 'modifiable', true)
    vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, {})
    vim.api.nvim_buf_set_option(bufnr, 'modifiable', false)
    notify(err)
    return
  end
  vim.api.nvim_buf_set_option(bufnr, 'buftype', 'nofile')
  vim.api.nvim_buf_set_option(bufnr, 'swapfile', false)
  vim.b[bufnr].mevedel_uri = uri
  vim.b[bufnr].mevedel_session = M.uri_session(uri)
  vim.b[bufnr].mevedel_root = client.config.root_dir
  vim.api.nvim_buf_set_option(bufnr, 'filetype', filetype_for(vim.b[bufnr].mevedel_canonical))
end

--- Read BUFNR's virtual document again through CLIENT (default: the
--- buffer's server), keeping cursors. Returns true, or nil and the error.
function M.refresh_virtual(bufnr, client)
  local uri = vim.b[bufnr].mevedel_uri
  if not uri then
    return nil, 'not a mevedel virtual buffer'
  end
  if not client then
    local err
    client, err = M.client()
    if not client then
      return nil, err
    end
  end
  return fill_virtual(bufnr, client, uri, nil)
end

--- Open what ADDRESS names: its backing file, else its virtual document.
function M.read_address(address)
  M.ensure_autocommands()
  address = vim.trim(address or '')
  if address == '' then
    notify('give an address, like :MevedelRead work://shared/notes.md')
    return
  end
  local client, err = M.client()
  if not client then
    notify(err)
    return
  end
  local described, describe_err = M.request(client, 'mevedel/address/describe', { address = address })
  if not described then
    notify(describe_err)
    return
  end
  local uri = described.uri
  if uri == nil or uri == vim.NIL then
    notify(described.canonical .. ': ' .. (described.reason or (described.status .. ', nothing to open')), vim.log.levels.WARN)
    return
  end
  if described.status == 'missing' then
    notify(described.canonical .. ' does not exist', vim.log.levels.WARN)
    return
  end
  if M.is_virtual_uri(uri) then
    vim.cmd('edit ' .. vim.fn.fnameescape(M.buffer_name_for_uri(uri)))
  else
    vim.cmd('edit ' .. vim.fn.fnameescape(vim.uri_to_fname(uri)))
  end
end

--- Replace the settings and send them to every running mevedel server.
function M.set_settings(settings)
  config.settings = settings or {}
  local object = settings_object(config.settings)
  local seen = {}
  for _, id in pairs(clients_by_root) do
    seen[id] = true
  end
  for _, client in ipairs(all_clients()) do
    seen[client.id] = true
  end
  for id in pairs(seen) do
    local client = live_client(id)
    if client then
      client.config.settings = { [M.configuration_section] = object }
      invoke(client, 'notify', 'workspace/didChangeConfiguration', { settings = { [M.configuration_section] = object } })
    end
  end
end

--- The options in effect (setup's, else the defaults).
function M.options()
  return config
end

local function define_virtual_documents(group)
  vim.api.nvim_create_autocmd('BufReadCmd', {
    group = group,
    -- A pattern without '/' would match the name's tail only. `scheme:/*`
    -- matches both spellings: `scheme:///...` (buffer_name_for_uri) and
    -- `scheme:/...` (0.11+ jumps to a location with the server's URI).
    pattern = M.virtual_scheme .. ':/*',
    callback = function(args)
      M.read_virtual(args.buf, args.match)
    end,
  })
end

--- Define what commands need without starting the server for buffers (the
--- virtual documents' BufReadCmd), unless setup() or lsp_config() did.
function M.ensure_autocommands()
  if autocommands_defined then
    return
  end
  autocommands_defined = true
  define_virtual_documents(vim.api.nvim_create_augroup('mevedel', { clear = true }))
end

local function apply_options(opts)
  config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  -- Lists replace, they do not merge index by index.
  for _, key in ipairs({ 'cmd', 'filetypes', 'root_markers' }) do
    if opts and opts[key] then
      config[key] = opts[key]
    end
  end
  if opts and opts.settings then
    config.settings = opts.settings
  end
end

function M.setup(opts)
  autocommands_defined = true
  apply_options(opts)
  local group = vim.api.nvim_create_augroup('mevedel', { clear = true })
  if opts and opts.autostart == false then
    -- vim.lsp.enable('mevedel') attaches the buffers (lsp/mevedel.lua).
    define_virtual_documents(group)
    return
  end
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = config.filetypes,
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  define_virtual_documents(group)
  -- Buffers that were open before setup.
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(config.filetypes, vim.api.nvim_buf_get_option(bufnr, 'filetype')) then
      M.attach(bufnr)
    end
  end
end

--- The `vim.lsp.config` entry of Neovim 0.11+ (`lsp/mevedel.lua` returns
--- it): `vim.lsp.enable('mevedel')` then starts the server for the
--- filetypes, and `vim.lsp.config('mevedel', { settings = { mevedel = {...} } })`
--- adds settings (agents, defaultAgent, ...). Options from setup(), if it
--- ran, are the starting point.
function M.lsp_config()
  M.ensure_autocommands()
  return {
    cmd = config.cmd,
    filetypes = config.filetypes,
    root_markers = config.root_markers,
    init_options = settings_object(config.settings),
    settings = { [M.configuration_section] = settings_object(config.settings) },
    handlers = handlers(),
    -- Settings given through vim.lsp.config go in initialize too.
    before_init = function(params, client_config_)
      local given = client_config_.settings and client_config_.settings[M.configuration_section]
      if type(given) == 'table' then
        params.initializationOptions = settings_object(given)
      end
    end,
    on_init = function(client)
      local root = client.config.root_dir
      if root and not live_client(clients_by_root[root]) then
        clients_by_root[root] = client.id
      end
    end,
    on_attach = on_attach,
    on_exit = function(_, _, client_id)
      for root, id in pairs(clients_by_root) do
        if id == client_id then
          clients_by_root[root] = nil
        end
      end
      M.client_exited(client_id)
    end,
  }
end

return M
