-- Release tokens (confirmed or not).  ARGV: prefix, ids...  Returns how many existed.
-- Their expiry entries stay: the purge skips a record that is gone.
local T = tools()
T.purge(64)
return T.release(ARGV, 2, #ARGV)
