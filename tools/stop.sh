#!/usr/bin/env bash
# `make stop`: stop the sidecar (SIGTERM: it drains), then devbroker, started by `make run`. A process
# still running after 10 s keeps its pid file, and `make stop` says so and fails: the next `make run`
# would find its ports taken.
cd "$(dirname "$0")/.."
left=0
for name in sidecar devbroker echo_app; do
  f=.run/$name.pid
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 "${STOP_WAIT_TENTHS:-100}"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "make stop: $name (pid $pid) is still running 10 s after SIGTERM: kill -9 $pid" >&2
      left=1
      continue
    fi
    echo "stopped $name"
  fi
  rm -f "$f"
done
exit $left
