-- wrk script of scripts/bench-postgres-costs.sh: checks every path of the list given
-- after `--` in exactly once (thread t of n takes paths t, t + n, t + 2n, ...), as jobs
-- that check in once per period do. Connections that ask for more once a thread's share
-- is sent get `/healthz`, which touches no snitch; the thread stops once it has as many
-- answers as it had paths. wrk itself still runs for its whole -d.
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end

function init(args)
  local all = {}
  for line in io.lines(args[1]) do
    if line ~= "" then all[#all + 1] = line end
  end
  local stride = tonumber(args[2]) or 1
  mine = {}
  -- wrk calls thread 0's request() once before the run to check for pipelining and
  -- sends nothing for that call: it gets a path that touches no snitch.
  if id == 0 then mine[1] = "/healthz" end
  for i = id + 1, #all, stride do mine[#mine + 1] = all[i] end
  sent = 0
  answered = 0
end

function request()
  sent = sent + 1
  if sent <= #mine then
    return wrk.format("GET", mine[sent])
  end
  return wrk.format("GET", "/healthz")
end

function response(status, headers, body)
  answered = answered + 1
  if answered >= #mine then
    wrk.thread:stop()
  end
end
