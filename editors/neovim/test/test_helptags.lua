-- The plugin ships doc/tags, so `:help pen` opens pen.txt without `:helptags ALL`, and the
-- committed tags file is the one `:helptags` makes from doc/pen.txt today (regenerated in a
-- scratch folder and compared): editing the help without regenerating the tags fails here.
-- Regenerate with: nvim --clean --headless -c 'helptags editors/neovim/doc' -c q
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
local doc = vim.fs.joinpath(H.plugin_dir, 'doc')

local scratch = vim.fn.tempname()
vim.fn.mkdir(scratch, 'p')
vim.fn.writefile(vim.fn.readfile(vim.fs.joinpath(doc, 'pen.txt'), 'b'), vim.fs.joinpath(scratch, 'pen.txt'), 'b')
vim.cmd.helptags(vim.fn.fnameescape(scratch))
local fresh = vim.fn.readfile(vim.fs.joinpath(scratch, 'tags'), 'b')
local shipped = vim.fn.filereadable(vim.fs.joinpath(doc, 'tags')) == 1
  and vim.fn.readfile(vim.fs.joinpath(doc, 'tags'), 'b') or {}
H.check(vim.deep_equal(fresh, shipped), 'editors/neovim/doc/tags is out of date; regenerate it with '
  .. "nvim --clean --headless -c 'helptags editors/neovim/doc' -c q\nexpected:\n"
  .. table.concat(fresh, '\n') .. '\nshipped:\n' .. table.concat(shipped, '\n'))

-- With only the plugin folder on the runtimepath (as a plugin manager or a native package puts
-- it), `:help pen` and `:help :PenStop` land in pen.txt.
for _, topic in ipairs({ 'pen', ':PenStop', 'pen-health' }) do
  vim.cmd.help(topic)
  local name = vim.api.nvim_buf_get_name(0)
  H.check(vim.fs.normalize(name) == vim.fs.normalize(vim.fs.joinpath(doc, 'pen.txt')),
    (':help %s opened %s'):format(topic, name))
  vim.cmd.helpclose()
end
H.done()
