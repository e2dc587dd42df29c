-- Remove every expired token.  ARGV: prefix, batch.  Returns how many went.
local T = tools()
local total, batch = 0, tonumber(ARGV[2])
repeat
  local entries, dropped = T.purge(batch)
  total = total + dropped
until entries < batch
return total
