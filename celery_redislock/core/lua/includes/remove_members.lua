local function remove_members(zset, hash, members)
  for i = 1, #members, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #members) do chunk[#chunk + 1] = members[j] end
    redis.call('ZREM', zset, unpack(chunk))
    redis.call('HDEL', hash, unpack(chunk))
  end
end
