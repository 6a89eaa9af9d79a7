#!/usr/bin/env bash
# `make run`: start devbroker and the sidecar on loopback, send a few messages (one while the brokers
# are down, to show spooling and replay), and show where to look. `make stop` stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
RUN=.run
API=http://127.0.0.1:9880
ADMIN=http://127.0.0.1:19880
# Every port the demo listens on (devbroker's brokers are --broker-base-port + 10 * i), as PORT=WHAT.
PORTS=(
  "19876=devbroker's name server" "20911=devbroker's broker-a" "20921=devbroker's broker-b"
  "19880=devbroker's admin API" "9890=the demo's app (tools/echo_app.py)"
  "9880=the sidecar's HTTP API" "9881=the sidecar's gRPC API"
)
mkdir -p "$RUN"
bash tools/stop.sh >/dev/null 2>&1 || true
# Before starting anything: else a process already on one of them answers the walkthrough instead.
"$BIN/python" tools/check_ports.py "${PORTS[@]}" || exit 1

source tools/demo_lib.sh

"$BIN/rocksidecar" devbroker --namesrv-port 19876 --broker-base-port 20911 --admin-port 19880 \
  --data-dir "$RUN/devbroker" >"$RUN/devbroker.log" 2>&1 &
echo $! >"$RUN/devbroker.pid"
wait_for "$ADMIN/brokers" devbroker "$RUN/devbroker.pid"

# The app behind the demo's subscription: prints each message the sidecar POSTs to it.
"$BIN/python" tools/echo_app.py 9890 >"$RUN/echo_app.log" 2>&1 &
echo $! >"$RUN/echo_app.pid"
# The subscribed topic must exist before the consumer starts (else it waits for its 20 s rebalance).
"$BIN/python" - <<'PY'
import asyncio, json, urllib.request
from rmq import BrokerApi, RemotingClient

async def main() -> None:
    client = RemotingClient()
    brokers = json.load(urllib.request.urlopen("http://127.0.0.1:19880/brokers"))
    for b in brokers if isinstance(brokers, list) else brokers.values():
        await BrokerApi(client).create_topic(b["addr"], "Orders")
    await client.close()

asyncio.run(main())
PY
SUBS='[{name: orders, topic: Orders, group: demo-orders-app, endpoint: "http://127.0.0.1:9890/events", consume_from: first}]'
ROCKSIDECAR_NAMESRV=127.0.0.1:19876 ROCKSIDECAR_DATA_DIR="$RUN/data" ROCKSIDECAR_SUBSCRIPTIONS="$SUBS" \
  "$BIN/rocksidecar" serve >"$RUN/sidecar.log" 2>&1 &
echo $! >"$RUN/sidecar.pid"
wait_for "$API/healthz" "the sidecar" "$RUN/sidecar.pid"

step "Send one message: 200 SENT, stored by a broker; id is its UNIQ_KEY in RocketMQ"
show "curl -s -X POST $API/v1/messages -H 'content-type: application/json' -d '{\"topic\":\"Orders\",\"body\":\"order 1 placed\",\"tags\":\"created\",\"keys\":[\"order-1\"]}'"
expect '"status":"SENT"'

step "A batch: one result per message, a bad one fails only itself"
show "curl -s -X POST $API/v1/messages:batch -H 'content-type: application/json' -d '{\"messages\":[{\"topic\":\"Orders\",\"body\":\"a\"},{\"topic\":\"no spaces allowed\",\"body\":\"b\"},{\"topic\":\"Orders\",\"body\":\"c\",\"shardingKey\":\"customer-7\"}]}'"
expect '"status":"SENT"' '"status":"REJECTED"'

step "Bad input: 400 application/problem+json naming the field; nothing is stored"
show "curl -s -X POST $API/v1/messages -H 'content-type: application/json' -d '{\"topic\":\"Orders\",\"body\":\"x\",\"properties\":{\"UNIQ_KEY\":\"mine\"}}'"
expect '"status":400' '"field":'

step "A delayed message: 202 SCHEDULED, synced locally, published when due (any delay up to 90 days)"
send SCHEDULED '{"topic":"Orders","body":"remind me in 2 s","delayMs":2000}'
later=$sent_id
show "curl -s $API/v1/messages/$later"

step "Both brokers down: the message is synced to the local store and answered 202 SPOOLED"
mark=$(wc -l <"$RUN/sidecar.log")
curl -s -X POST "$ADMIN/brokers/broker-a/stop" >/dev/null
curl -s -X POST "$ADMIN/brokers/broker-b/stop" >/dev/null
send SPOOLED '{"topic":"Orders","body":"sent during the outage"}'
id=$sent_id
show "curl -s $API/v1/messages/$id"
step "The store while the sidecar runs: rocksidecar store goes through its admin API (/v1/admin)"
show "$BIN/rocksidecar store --data-dir $RUN/data stats"
show "$BIN/rocksidecar store --data-dir $RUN/data inspect $id | sed -n 1,20p"  # not head: it would break the pipe, and pipefail the demo

step "Brokers back: the sidecar sees them answer and replays what waited at once, not at its rung"
curl -s -X POST "$ADMIN/brokers/broker-a/start" >/dev/null
curl -s -X POST "$ADMIN/brokers/broker-b/start" >/dev/null
until_sent "$id"
show "curl -s $API/v1/messages/$id"
expect '"status":"SENT"'
show "$BIN/rocksidecar store --data-dir $RUN/data stats"

step "The outage in the sidecar's log: one line per cause (ROCKSIDECAR_LOG_FORMAT=json for JSON lines)"
show "tail -n +$((mark + 1)) $RUN/sidecar.log | grep -E 'event=(broker_|message_spooled|replay_on_recovery|route_)' | cut -c1-220"

step "The delayed message went out when due (it keeps its id)"
until_sent "$later"  # due 2 s after it was scheduled; published then, or replayed once the brokers are back
show "curl -s $API/v1/messages/$later"
expect '"status":"SENT"'

step "The subscription: the sidecar consumed Orders and POSTed each message to the app (tools/echo_app.py)"
for _ in $(seq 1 60); do  # 5 messages reached Orders; the two sent late arrive after a pull back-off
  [ "$(wc -l <"$RUN/echo_app.log")" -ge 5 ] && break; sleep 0.5
done
show "cat $RUN/echo_app.log"

step "Metrics"
show "curl -s $API/metrics | grep -E '^rocksidecar_(messages|replays|retry_pending|broker_backoff|delay_lateness_seconds_(count|sum)|subscription_deliveries|consumer_lag)' | grep -v ' 0.0$'"

cat <<MSG

Where to look:
  API          $API  (OpenAPI: $API/docs, $API/openapi.json; gRPC on 127.0.0.1:9881)
  status page  $API/ui             admin API $API/v1/admin/stats (see README, "Operating it")
  metrics      $API/metrics        health $API/healthz   readiness $API/readyz
  devbroker    $ADMIN/brokers  (faults: POST $ADMIN/brokers/broker-a/faults {"latency_ms":600})
  store        $BIN/rocksidecar store --data-dir $RUN/data stats   (also: inspect ID, dead list, replay)
  logs         $RUN/sidecar.log  $RUN/devbroker.log  $RUN/echo_app.log (the subscription's app)
Both keep running; stop them with: make stop
MSG
