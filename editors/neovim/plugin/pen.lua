-- Commands of pen.nvim; they load the plugin lazily and work without setup() (defaults).
if vim.g.loaded_pen then
  return
end
vim.g.loaded_pen = true

local function pen()
  return require('pen')
end

vim.api.nvim_create_user_command('Pen', function(o)
  pen().prompt(o.args, o.range > 0 and { o.line1, o.line2 } or nil)
end, { nargs = '+', range = true, desc = 'Ask pen (with a range: about the selection)' })
vim.api.nvim_create_user_command('PenStop', function() pen().stop() end, { desc = 'Stop the running pen turn' })
vim.api.nvim_create_user_command('PenRetry', function() pen().retry() end,
  { desc = 'Send the last pen prompt of the session again' })
vim.api.nvim_create_user_command('PenNew', function(o) pen().new_session(o.args) end,
  { nargs = '?', desc = 'Start a new pen session' })
vim.api.nvim_create_user_command('PenSessions', function() pen().sessions() end,
  { desc = 'Pick a pen session and show its transcript' })
vim.api.nvim_create_user_command('PenUndo', function(o) pen().undo(o.args) end,
  { nargs = '?', desc = "Revert a turn's file changes (the last turn by default) and every later turn's" })
vim.api.nvim_create_user_command('PenFork', function(o) pen().fork(o.args) end,
  { nargs = '?', desc = 'Start a new pen session with the history before a turn (the last by default)' })
vim.api.nvim_create_user_command('PenMcp', function() pen().mcp_status() end,
  { desc = "Show each MCP server's status, tool count and schema tokens" })
vim.api.nvim_create_user_command('PenMode', function(o) pen().set_mode(o.args) end, {
  nargs = '?',
  complete = function() return pen().MODES end,
  desc = 'Set the permission mode: plan, ask, edit or auto',
})
vim.api.nvim_create_user_command('PenLog', function() pen().log() end, { desc = "Open pen's daemon log" })
