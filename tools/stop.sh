#!/usr/bin/env bash
# `make stop`: stop the sidecar (SIGTERM: it drains), then devbroker, started by `make run`.
cd "$(dirname "$0")/.."
for name in sidecar devbroker echo_app; do
  f=.run/$name.pid
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "stopped $name"
  fi
  rm -f "$f"
done
