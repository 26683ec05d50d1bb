--- @include "includes/token_fate"

local function supersede(id, token) token_fate('s', id, token) end
