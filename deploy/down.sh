#!/usr/bin/env bash
# Stops the processes deploy/up.sh started (sandbox, edge, worker, console; SIGTERM: each finishes its in-flight
# work first), then removes the configuration up.sh generated (it holds the development API key and the console
# operator's password hash): the next up.sh generates new ones.
set -euo pipefail
cd "$(dirname "$0")/.."
for pidfile in .run/*.pid; do
  [ -e "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" && echo "stopped $(basename "$pidfile" .pid) ($pid)"; fi
  rm -f "$pidfile"
done
rm -f .run/hookline.toml .run/hookline.toml.new
