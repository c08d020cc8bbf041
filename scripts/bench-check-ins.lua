-- wrk script of the check-in rows (examples/bench.rs): every request is a GET of one of
-- the check-in paths listed in the file given after `--`, one per line. Thread t of n
-- takes paths t, t + n, t + 2n, ... so threads do not race each other on one snitch
-- more than the list makes them. An optional third argument starts the walk that many
-- paths into the list (runs over a long list then cover different snitches).
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  paths = {}
  for line in io.lines(args[1]) do
    if line ~= "" then paths[#paths + 1] = line end
  end
  stride = tonumber(args[2]) or 1
  local start = tonumber(args[3]) or 0
  counter = start - (start % stride) + id
end

function request()
  local path = paths[(counter % #paths) + 1]
  counter = counter + stride
  return wrk.format("GET", path)
end
