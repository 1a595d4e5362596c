-- The provider refuses the key (HTTP 401): the turn ends with errorKind auth, and the transcript
-- points at the provider settings (:checkhealth pen, :help pen-setup), live and again when the
-- session is re-rendered from pen/getTranscript; the error's wording plays no part.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'helpers.lua'))
H.setup({ { error = { status = 401, body = { error = { message = 'Incorrect API key provided',
  type = 'invalid_request_error', code = 'invalid_api_key' } } } } })
local pen = require('pen')
local P = require('pen.protocol')

vim.cmd('Pen hello')
local res = H.wait_turn()
H.check(res.stopReason == P.stop_reason.ERROR, 'stopReason ' .. vim.inspect(res))
H.check(res.errorKind == P.error_kind.AUTH, 'errorKind ' .. vim.inspect(res))
local hint = require('pen.transcript').ERROR_HINTS[P.error_kind.AUTH]
H.check(hint and hint:find(':checkhealth pen', 1, true), 'the hint names :checkhealth pen: ' .. tostring(hint))
local live = H.transcript_text()
H.check(live:find('> ' .. hint, 1, true), 'the live transcript points at the settings:\n' .. live)

-- The stored turn_ended carries the kind too: a re-render shows the same hint.
local client = pen.client()
pen.load_transcript(client, pen.state.session)
local stored = H.transcript_text()
H.check(stored:find('> ' .. hint, 1, true), 'the stored transcript points at the settings:\n' .. stored)
H.check(stored:find('*— turn ended: error*', 1, true), 'turn end re-rendered:\n' .. stored)
H.done()
