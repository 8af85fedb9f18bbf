-- Mark one session's projection blocked at a seq, with the reason; the first reason wins.
-- KEYS[1]: the projection's meta hash of the session. ARGV: seq, reason (JSON).
if redis.call('HSETNX', KEYS[1], 'blocked', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'blocked_seq', ARGV[1])
  return 1
end
return 0
