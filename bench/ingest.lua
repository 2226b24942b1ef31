-- wrk script for bench/ingest.py: POST Alertmanager-shaped alerts, distinct or re-sent.
--   wrk ... -s bench/ingest.lua URL -- <format> <alerts per request> <duplicate %> <run id>
-- format: webhook (ira's /v1/sources/alertmanager/..., and the raw chain) | api (Alertmanager /api/v2/alerts)
-- A request is a duplicate storm request with probability <duplicate %>: it re-sends one of 50
-- hot alerts (new only the first time each is sent); every other request carries new alerts.
-- The run id is part of every label set and fingerprint, so separate runs never collide.
-- Prints one JSON line at the end; per-thread non-2xx counts are summed.

local threads = {}
local next_tid = 1

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

function init(args)
  format = args[1]
  per_request = tonumber(args[2])
  dup_percent = tonumber(args[3])
  run = args[4]
  counter = 0
  responses = 0
  errors = 0
end

local function alert(instance, fingerprint)
  local labels = string.format(
    '"labels":{"alertname":"BenchAlert","instance":"%s","service":"bench","severity":"warning","run":"%s"}',
    instance, run)
  local common = '"annotations":{"summary":"bench alert"},"startsAt":"2026-04-29T10:00:00Z",' ..
                 '"generatorURL":"http://prometheus.bench/graph?g0.expr=up"'
  if format == "api" then
    return "{" .. labels .. "," .. common .. "}"
  end
  return '{"status":"firing",' .. labels .. "," .. common ..
         ',"endsAt":"0001-01-01T00:00:00Z","fingerprint":"' .. fingerprint .. '"}'
end

function request()
  counter = counter + 1
  local parts = {}
  local hot = dup_percent > 0 and (counter % 100) < dup_percent
  for j = 1, per_request do
    if hot then
      local slot = counter % 50
      parts[j] = alert("hot-" .. slot .. "-" .. j, run .. string.format("ff%04x%08x", j, slot))
    else
      parts[j] = alert(tid .. "-" .. counter .. "-" .. j, run .. string.format("%02x%04x%08x", tid, j, counter))
    end
  end
  local body
  if format == "api" then
    body = "[" .. table.concat(parts, ",") .. "]"
  else
    body = '{"version":"4","status":"firing","receiver":"ira","groupKey":"bench","alerts":[' ..
           table.concat(parts, ",") .. "]}"
  end
  return wrk.format("POST", nil, nil, body)
end

function response(status, headers, body)
  responses = responses + 1
  if status >= 300 then
    errors = errors + 1
  end
end

function done(summary, latency, requests)
  local non_2xx = 0
  for _, thread in ipairs(threads) do
    non_2xx = non_2xx + thread:get("errors")
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,"non_2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max, non_2xx,
    e.connect + e.read + e.write + e.timeout))
end
