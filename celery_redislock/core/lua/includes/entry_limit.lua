--- @include "includes/limit_of"

-- The limit of a holder, from its info entry (stored as passed, resolved
-- now); 1 if the entry is missing (its info key was deleted: counted as a
-- lock holder, which only delays others).
local function entry_limit(info)
  if not info then return 1 end
  return limit_of(tonumber(string.match(info, '^%d+:%d+:%d+:(%-?%d+):')))
end
