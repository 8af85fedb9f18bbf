-- Apply one event's planned writes to one session's projection, exactly once.
--
-- KEYS[1] is the projection's meta hash of the session (it holds `applied`, the last applied
-- seq); the other KEYS are that session's data keys, all sharing its {hash tag}.
-- ARGV[1] is the event's seq; the rest is a flat list of write ops planned by Python:
--   X k id n f1 v1 .. fn vn  XADD      (always planned first: a refused id writes nothing)
--   H k field value          HSET
--   D k field                HDEL
--   A k field value          append ",value" to a hash field (reverse provenance links)
--   R k value                RPUSH
--   L k start end new        in list k, replace the run start..end (both present, start first)
--                            by new: a surface replace on the node list
-- Returns {status, applied}: 1 applied, 0 duplicate (seq <= applied), -1 gap (seq > applied+1:
-- the projection lost state and must be rebuilt, never skipped ahead), -2 session blocked.
local meta = KEYS[1]
local seq = tonumber(ARGV[1])
local state = redis.call('HMGET', meta, 'applied', 'blocked')
local applied = tonumber(state[1] or '-1')
if state[2] then
  return {-2, applied}
end
if seq <= applied then
  return {0, applied}
end
if seq > applied + 1 then
  return {-1, applied}
end
local i = 2
local n = #ARGV
while i <= n do
  local op = ARGV[i]
  local key = KEYS[tonumber(ARGV[i + 1])]
  if op == 'H' then
    redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  elseif op == 'D' then
    redis.call('HDEL', key, ARGV[i + 2])
    i = i + 3
  elseif op == 'A' then
    local old = redis.call('HGET', key, ARGV[i + 2])
    if old then
      redis.call('HSET', key, ARGV[i + 2], old .. ',' .. ARGV[i + 3])
    else
      redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
    end
    i = i + 4
  elseif op == 'R' then
    redis.call('RPUSH', key, ARGV[i + 2])
    i = i + 3
  elseif op == 'L' then
    local first = redis.call('LPOS', key, ARGV[i + 2])
    local last = redis.call('LPOS', key, ARGV[i + 3])
    if first == last then
      redis.call('LSET', key, first, ARGV[i + 4])
    else
      local tail = redis.call('LRANGE', key, last + 1, -1)
      if first == 0 then
        redis.call('DEL', key)
      else
        redis.call('LTRIM', key, 0, first - 1)
      end
      redis.call('RPUSH', key, ARGV[i + 4])
      -- in slices: unpack() of a long list would overflow Lua's C stack
      for from = 1, #tail, 1000 do
        redis.call('RPUSH', key, unpack(tail, from, math.min(from + 999, #tail)))
      end
    end
    i = i + 5
  elseif op == 'X' then
    local count = tonumber(ARGV[i + 3])
    local args = {'XADD', key, ARGV[i + 2]}
    for j = 1, 2 * count do
      args[#args + 1] = ARGV[i + 3 + j]
    end
    redis.call(unpack(args))
    i = i + 4 + 2 * count
  else
    return redis.error_reply('apply.lua: unknown op ' .. tostring(op))
  end
end
redis.call('HSET', meta, 'applied', seq)
redis.call('HINCRBY', meta, 'applies', 1)
return {1, seq}
