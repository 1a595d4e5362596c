-- :checkhealth pen reports the binary, the provider config and the data dir, with no ERROR.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
H.setup({})
vim.cmd('checkhealth pen')
local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
H.check(not text:find('ERROR', 1, true), 'ERROR in checkhealth:\n' .. text)
H.check(text:find('pen 0', 1, true), 'pen --version shown:\n' .. text)
H.check(text:find('provider = openai', 1, true), 'provider shown:\n' .. text)
H.check(text:find(H.data, 1, true), 'data dir shown:\n' .. text)
-- And a missing binary is an ERROR.
require('pen').setup({ cmd = { '/nonexistent/pen', 'serve' } })
vim.cmd('checkhealth pen')
text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
H.check(text:find('ERROR', 1, true), 'missing binary reported:\n' .. text)
-- With the install command the README gives.
H.check(text:find('cargo install --locked --path .', 1, true), 'install command shown:\n' .. text)
H.done()
