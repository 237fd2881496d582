-- What every headless Neovim test file shares: the environment the Python
-- side gives (tests/clients/test_neovim.py: MEVEDEL_TEST_WORKSPACE,
-- MEVEDEL_TEST_DOCUMENT, MEVEDEL_LSP_COMMAND), a tiny test runner, waits,
-- the notifications and vim.ui.select questions recorded, and the client
-- helpers. It starts no server: each file starts it its own way (the
-- agent tests through agent_harness.lua). Loaded with dofile by each test
-- file, which binds the names it uses; `notifications` and `asked` are
-- emptied in place, so a bound name stays the list the runner fills.

local root = vim.env.MEVEDEL_TEST_WORKSPACE
local document = vim.env.MEVEDEL_TEST_DOCUMENT
local command = vim.json.decode(vim.env.MEVEDEL_LSP_COMMAND)
local TIMEOUT = 30000

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

local function wait_for(what, predicate, timeout)
  if not vim.wait(timeout or TIMEOUT, predicate, 20) then
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

local function empty(list)
  for i = #list, 1, -1 do
    list[i] = nil
  end
end

local notifications = {}
vim.notify = function(message, level)
  table.insert(notifications, { message = message, level = level })
  out('notify: ' .. tostring(message))
end

--- Forget the notifications so far.
local function clear_notifications()
  empty(notifications)
end

-- The first notification since index FROM whose text holds TEXT.
local function notified(text, from)
  for i = from or 1, #notifications do
    if tostring(notifications[i].message):find(text, 1, true) then
      return notifications[i]
    end
  end
end

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

-- Sends METHOD straight to the server (what a test checks or sets up).
local function server_call(method, params)
  local result, err = require('mevedel').request(mevedel_client(vim.fn.bufnr(document)), method, params or vim.empty_dict())
  expect(result, '%s failed: %s', method, tostring(err))
  return result
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr or 0, 0, -1, false), '\n')
end

-- Stands in for the user at vim.ui.select: CHOOSE(items, opts, formatted,
-- on_choice) answers (now or later); every question is recorded in `asked`.
local real_select = vim.ui.select
local asked = {}
local function answer_selects(choose)
  empty(asked)
  vim.ui.select = function(items, opts, on_choice)
    local formatted = {}
    for i, item in ipairs(items) do
      formatted[i] = opts.format_item and opts.format_item(item) or tostring(item)
    end
    table.insert(asked, { kind = opts.kind, prompt = opts.prompt, formatted = formatted, opts = opts })
    choose(items, opts, formatted, on_choice)
  end
end

-- BY_KIND maps a select's kind to a Lua pattern its chosen line must
-- match, or to a function of (items, formatted, on_choice) that answers.
local function answering(by_kind)
  answer_selects(function(items, opts, formatted, on_choice)
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
  end)
end

-- A new session, as the user starts it (sessions.create NAME): beside the
-- sessions earlier tests left open, the server asks once whether to start
-- it anyway (they share the project's files); the user accepts. Any other
-- question goes to whatever answers vim.ui.select now.
local function create_session(name)
  local select = vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    if opts.kind == 'mevedel.question' and (opts.prompt or ''):find("share this project's files", 1, true) then
      return on_choice('Start anyway')
    end
    return select(items, opts, on_choice)
  end
  local ok, state = pcall(require('mevedel.sessions').create, name)
  vim.ui.select = select
  if not ok then
    error(state, 0)
  end
  expect(state, 'no session was created (%s)', tostring(name))
  return state
end

-- The latest question of KIND.
local function selected(kind)
  for i = #asked, 1, -1 do
    if asked[i].kind == kind then
      return asked[i]
    end
  end
end

-- Prints the counts and quits, failing when a test failed.
local function finish()
  vim.ui.select = real_select
  out(string.format('%d tests, %d failed', ran, failures))
  vim.cmd(failures == 0 and 'qa!' or 'cq!')
end

return {
  root = root,
  document = document,
  command = command,
  TIMEOUT = TIMEOUT,
  out = out,
  test = test,
  wait_for = wait_for,
  expect = expect,
  read_file = read_file,
  write_file = write_file,
  notifications = notifications,
  clear_notifications = clear_notifications,
  notified = notified,
  mevedel_client = mevedel_client,
  open_document = open_document,
  server_call = server_call,
  buffer_text = buffer_text,
  real_select = real_select,
  asked = asked,
  answer_selects = answer_selects,
  answering = answering,
  selected = selected,
  create_session = create_session,
  finish = finish,
}
