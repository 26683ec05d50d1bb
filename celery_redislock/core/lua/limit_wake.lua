-- limit_wake.lua: wake the first name whose parked head waits for this
-- listed limit (see wake_first() in includes/wake_first.lua), for the
-- caller to promote one of its tasks (park_unhold.lua); after a slot of
-- the limit came back by other means than limit_release.lua (a refused
-- run's give-back, a dead child's clean-up, the dead-holder path), or when
-- the limit had room for one more.
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked, KEYS[9] limits and KEYS[10] turns (limit_block.lua's).
-- ARGV[1] the name not to wake ("" none): a run that gives this limit back
--         because another refused it, whose own name goes back to wait
-- ARGV[2] ttl_ms     as limit_block.lua's ARGV[3], for a name noted again
-- ARGV[3] published  the execution tags (core/owners.py: the first part of
--                    an owner id, up to its first ".") of tasks the caller
--                    published for the limit, space-separated ("" none):
--                    each counts as taking a slot besides the holders
--                    unless a holder's owner id begins with it (it took its
--                    slot already, and is counted as a holder)
-- Returns wake_first()'s reply: {name, asks, holds, room} or {}.

--- @include "includes/lease_set_keys"
--- @include "includes/wake_first"

local in_flight = 0
local pending = {}
for tag in string.gmatch(ARGV[3], '%S+') do pending[tag] = true end
if next(pending) then
  for _, owner in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
    local tag = string.match(owner, '^[^.]*%.')
    if tag then pending[tag] = nil end
  end
  for _ in pairs(pending) do in_flight = in_flight + 1 end
end
return wake_first(KEYS[8], KEYS[9], KEYS[10], ARGV[1], in_flight, ARGV[2])
