-- The limit a parked task is admitted by (as passed, see stored_limit()): the
-- promoter's (evaluated now, so a raised plan applies at once) when the promoter is the same task name, else
-- the task's own limit from when it was parked (another task name sharing the
-- key, or the sweeper, which has no task).  The claim checks the run's limit
-- again at arrival.
local function own_limit(stored, task, promoter_limit, promoter_task)
  if promoter_task ~= '' and task == promoter_task then return promoter_limit end
  if stored and stored ~= 0 then return stored end
  return promoter_limit
end
