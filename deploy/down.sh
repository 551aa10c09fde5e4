#!/usr/bin/env bash
# Stops the processes deploy/up.sh started (sandbox, edge, worker, console; SIGTERM: each finishes its in-flight
# work first), then removes the console's generated configuration (it holds the operator's password hash).
set -euo pipefail
cd "$(dirname "$0")/.."
for pidfile in .run/*.pid; do
  [ -e "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" && echo "stopped $(basename "$pidfile" .pid) ($pid)"; fi
  rm -f "$pidfile"
done
rm -f .run/hookline.toml
