# The walkthrough's helpers, sourced by tools/demo.sh (and by tests/deploy/test_demo_lib.py on their
# own). They expect RUN (pid files and logs), API (the sidecar's URL) and BIN (the venv's bin).

die() { echo "make run: $*" >&2; exit 1; }

wait_for() { # wait_for URL WHAT PIDFILE: until URL answers, unless the process WHAT exits first
  local pid; pid=$(cat "$3")
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || die "$2 exited: $(tail -n 1 "$RUN/$(basename "$3" .pid).log")"
    curl -sf -o /dev/null "$1" && return 0; sleep 0.2
  done
  die "$2 did not come up in 20 s; see $RUN/*.log"
}

# The sidecar answering on API must be the one started here: its pid lives and it holds $RUN/data's
# store. Otherwise another process on the port would answer the walkthrough in its place.
ours() {
  kill -0 "$(cat "$RUN/sidecar.pid")" 2>/dev/null || die "the sidecar exited: see $RUN/sidecar.log"
  curl -sf "$API/v1/admin/stats" | STORE="$RUN/data/store" "$BIN/python" -c '
import json, os, sys
from pathlib import Path
sys.exit(Path(json.load(sys.stdin)["store"]).resolve() != Path(os.environ["STORE"]).resolve())' \
    || die "the sidecar on $API is not the one make run started (its store is not $RUN/data/store)"
}

step() { ours; printf '\n\033[1m== %s\033[0m\n' "$*"; }

show() { printf '$ %s\n' "$*"; shown=$(eval "$*"); printf '%s\n\n' "$shown"; }

expect() { # expect TEXT...: the last output shown (or $shown as set) has each TEXT, as its heading says
  local want
  for want in "$@"; do grep -qF -- "$want" <<<"$shown" || die "expected $want, got: $shown"; done
}

send() { # send STATUS JSON: POST one message, print the answer, expect STATUS; its id is left in $sent_id
  shown=$(curl -s -X POST "$API/v1/messages" -H 'content-type: application/json' -d "$2")
  printf '%s\n' "$shown"
  expect "\"status\":\"$1\""
  sent_id=$("$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$shown")
}

until_sent() { # until_sent ID: poll its status until SENT, 60 times at most (the step's expect tells)
  for _ in $(seq 1 60); do
    curl -s "$API/v1/messages/$1" | grep -qF '"status":"SENT"' && return 0; sleep "${POLL_S:-0.5}"
  done
  return 0
}
