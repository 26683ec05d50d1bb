-- Whether decimal string `a` >= decimal string `b` (both without leading
-- zeros): fencing tokens reach 2^63 and Lua numbers are doubles, so tokens
-- are compared as strings.
local function decimal_at_least(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end
