local function split(entry, n)
  local out, pos = {}, 1
  for i = 1, n - 1 do
    local bar = string.find(entry, '|', pos, true)
    out[i] = string.sub(entry, pos, bar - 1)
    pos = bar + 1
  end
  out[n] = string.sub(entry, pos)
  return out
end
