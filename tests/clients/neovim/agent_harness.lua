-- What the chat and review tests share: the environment the Python side
-- gives (tests/clients/test_neovim.py), a tiny test runner, waits, the
-- server and agent set-up and the chat helpers. Loaded with dofile by each
-- test file, which binds the names it uses.

local root = vim.env.MEVEDEL_TEST_WORKSPACE
local document = vim.env.MEVEDEL_TEST_DOCUMENT
local command = vim.json.decode(vim.env.MEVEDEL_LSP_COMMAND)
local agent_command = vim.json.decode(vim.env.MEVEDEL_TEST_AGENT_COMMAND)
local scratch = vim.env.MEVEDEL_TEST_SCRATCH
local TIMEOUT = 30000
local native = vim.fn.has('nvim-0.11') == 1

local function out(text)
  io.stdout:write(text .. '\n')
end

local failures, ran = 0, 0
local function test(name, body)
  ran = ran + 1
  local ok, err = xpcall(body, debug.traceback)
  if ok then
    out('PASS ' .. name)
  else
    failures = failures + 1
    out('FAIL ' .. name .. '\n' .. tostring(err))
  end
end

local function wait_for(what, predicate)
  if not vim.wait(TIMEOUT, predicate, 20) then
    error('timed out waiting for ' .. what, 2)
  end
end

local function expect(condition, message, ...)
  if not condition then
    error(string.format(message, ...), 2)
  end
end

local function read_file(path)
  local handle = assert(io.open(path, 'rb'))
  local text = handle:read('*a')
  handle:close()
  return text
end

local function write_file(path, text)
  local handle = assert(io.open(path, 'wb'))
  handle:write(text)
  handle:close()
end

local notifications = {}
vim.notify = function(message, level)
  table.insert(notifications, { message = message, level = level })
  out('notify: ' .. tostring(message))
end

local function notified(text)
  for _, n in ipairs(notifications) do
    if tostring(n.message):find(text, 1, true) then
      return n
    end
  end
end

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

local function mevedel_client(bufnr)
  local found = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr or 0, name = 'mevedel' })
    or vim.tbl_filter(function(c)
      return c.name == 'mevedel'
    end, vim.lsp.buf_get_clients(bufnr or 0))
  return found[1]
end

local function open_document()
  local bufnr = vim.fn.bufnr(document)
  if bufnr > 0 and vim.api.nvim_buf_is_loaded(bufnr) then
    vim.api.nvim_set_current_buf(bufnr)
  else
    vim.cmd('edit ' .. vim.fn.fnameescape(document))
  end
  wait_for('the server to attach', function()
    local client = mevedel_client(0)
    return client ~= nil and client.initialized == true
  end)
end

local function server_call(method, params)
  local result, err = mevedel.request(mevedel_client(vim.fn.bufnr(document)), method, params or vim.empty_dict())
  expect(result, '%s failed: %s', method, tostring(err))
  return result
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr or 0, 0, -1, false), '\n')
end

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

-- Stands in for the user at vim.ui.select: BY_KIND maps a select's kind to
-- a Lua pattern its chosen line must match, or to a function of (items,
-- formatted, on_choice) that answers (now or later).
local real_select = vim.ui.select
local asked = {}
local function answering(by_kind)
  asked = {}
  vim.ui.select = function(items, opts, on_choice)
    local formatted = {}
    for i, item in ipairs(items) do
      formatted[i] = opts.format_item and opts.format_item(item) or tostring(item)
    end
    table.insert(asked, { kind = opts.kind, prompt = opts.prompt, formatted = formatted, opts = opts })
    local answer = by_kind[opts.kind]
    if answer == nil then
      error(string.format('an unexpected %s question: %s %s', tostring(opts.kind), tostring(opts.prompt), vim.inspect(formatted)))
    end
    if type(answer) == 'function' then
      return answer(items, formatted, on_choice)
    end
    for i, text in ipairs(formatted) do
      if text:find(answer) then
        return on_choice(items[i])
      end
    end
    error(string.format('%s offers nothing matching %s: %s', tostring(opts.prompt), answer, vim.inspect(formatted)))
  end
end

local function selected(kind)
  for i = #asked, 1, -1 do
    if asked[i].kind == kind then
      return asked[i]
    end
  end
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
  local session = sessions.create(name).sessionId
  open_document()
  return session
end

return {
  root = root,
  document = document,
  command = command,
  agent_command = agent_command,
  scratch = scratch,
  TIMEOUT = TIMEOUT,
  native = native,
  out = out,
  test = test,
  wait_for = wait_for,
  expect = expect,
  read_file = read_file,
  write_file = write_file,
  notifications = notifications,
  notified = notified,
  mevedel = mevedel,
  sessions = sessions,
  lifecycle = lifecycle,
  chat = chat,
  mevedel_client = mevedel_client,
  open_document = open_document,
  server_call = server_call,
  buffer_text = buffer_text,
  scripts = scripts,
  agent = agent,
  configure = configure,
  real_select = real_select,
  asked = asked,
  answering = answering,
  selected = selected,
  chat_buffer = chat_buffer,
  chat_text = chat_text,
  line_of = line_of,
  turns_of = turns_of,
  cursor_on = cursor_on,
  press = press,
  new_session = new_session,
  -- The runner's counts, read once the tests have run.
  summary = function()
    return ran, failures
  end,
}
