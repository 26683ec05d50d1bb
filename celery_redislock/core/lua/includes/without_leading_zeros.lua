-- Decimal string `s` without leading zeros ("0" for zero).
local function without_leading_zeros(s)
  local stripped = string.gsub(s, '^0+', '')
  if stripped == '' then return '0' end
  return stripped
end
