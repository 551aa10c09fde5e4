#!/usr/bin/env bash
# The newcomer check: runs every command block of the manual that is marked to be run, in order, against the stack
# deploy/up.sh starts, and fails naming the first block that fails — so the manual cannot drift from the product.
#
# The manual is README.md and docs/*.md, read in a fixed order: README.md first (the quick start brings the stack
# up and sets the credentials later blocks use), then docs/README.md (the index), then the pages in the order the
# index first links them, then any page the index does not link, by name (deploy/doc-check.sh refuses such a
# page; here it is still run rather than silently skipped). A block keeps running wherever it moves.
#
# A block is run when the line before its ```sh fence (blank lines aside) is exactly
#     <!-- newcomer: run -->
# Each block runs as its own `bash -euo pipefail` script from the repository's root, with a time limit
# (NEWCOMER_BLOCK_TIMEOUT, default 120 s), as a newcomer would paste it, with two differences that are the
# newcomer's own setup, not the manual's:
# - HOOKLINE_API_KEY and HOOKLINE_CONSOLE_PASSWORD are set to the key and password up.sh printed (the quick
#   start asks the reader to export them);
# - `target/quick/` is replaced by the directory of the binaries up.sh ran (HOOKLINE_PROFILE=debug and
#   CARGO_TARGET_DIR move them: deploy/test.sh runs this on the debug binaries it built, without a second build).
# - `deploy/hookline.toml` is replaced by a copy whose database is `hookline_newcomer`, dropped and created again
#   for each run: a newcomer's first run meets an empty database, and a developer's `hookline` database (whose
#   earlier intents would answer the quick start's idempotency keys as replays) is left alone; a block's
#   `psql … -U postgres hookline` reads `hookline_newcomer` too (on a fresh machine `hookline` does not exist,
#   and on a developer's it is not the database this run filled).
# The stack is brought up here (deploy/up.sh) and down at the end (deploy/down.sh), so a stack that already runs
# is refused rather than taken down. up.sh's output is shown with the key and password masked (CI keeps logs).
# Usage: deploy/newcomer.sh [--list] [FILE…]   (--list: print the marked blocks, run nothing; FILEs: these, in this
#        order, instead of the manual)
set -euo pipefail
cd "$(dirname "$0")/.."
list=""
if [ "${1:-}" = --list ]; then list=1; shift; fi
if [ "$#" -gt 0 ]; then
  files=("$@")
else
  # The manual's order (above): the index's links, first appearance, that are pages of docs/.
  files=(README.md)
  if [ -e docs/README.md ]; then
    files+=(docs/README.md)
    while read -r page; do
      [ -e "docs/$page" ] && [ "$page" != README.md ] && files+=("docs/$page")
    done < <(grep -o '](\(\./\)\{0,1\}[A-Za-z0-9_.-]*\.md' docs/README.md | sed 's#^](\(\./\)\{0,1\}##' | awk '!seen[$0]++')
  fi
  for page in docs/*.md; do
    [ -e "$page" ] || continue
    case " ${files[*]} " in *" $page "*) ;; *) files+=("$page") ;; esac
  done
fi
what="${files[*]}"
block_timeout=${NEWCOMER_BLOCK_TIMEOUT:-120}
bin=${CARGO_TARGET_DIR:-target}/${HOOKLINE_PROFILE:-quick}

work=$(umask 077; mktemp -d)
# Stops the stack this script started, and removes the extracted blocks and up.sh's unmasked output.
started=""
finish() {
  local rc=$?
  if [ -n "$started" ]; then bash deploy/down.sh || rc=1; fi
  rm -rf "$work"
  exit "$rc"
}
trap finish EXIT

# Extract the marked blocks of each file, numbered on across the files: $work/N.sh, and $work/N.where =
# "FILE:LINE (under HEADING)". A marker not followed by a ```sh fence is an error (a typo would silently check
# nothing).
count=0
for file in "${files[@]}"; do
awk -v dir="$work" -v file="$file" -v n="$count" '
  function fail(msg) { print "newcomer: " file ":" NR ": " msg > "/dev/stderr"; bad = 1; exit 1 }
  /^```/ {
    if (inblock) { inblock = 0; close(dir "/" n ".sh"); next }
    if (marked) {
      if ($0 !~ /^```(sh|bash)[[:space:]]*$/) fail("<!-- newcomer: run --> must be followed by a ```sh block")
      marked = 0; inblock = 1; n++
      printf "%s:%d (under \"%s\")\n", file, NR, heading > (dir "/" n ".where"); close(dir "/" n ".where")
      printf "" > (dir "/" n ".sh")
      next
    }
    infence = !infence; next
  }
  inblock { print > (dir "/" n ".sh"); next }
  infence { next }
  marked && /^[[:space:]]*$/ { next }
  marked { fail("<!-- newcomer: run --> must be followed by a ```sh block") }
  /^#+ / { heading = $0; sub(/^#+ /, "", heading) }
  /^<!-- newcomer: run -->[[:space:]]*$/ { marked = 1 }
  END {
    if (bad) exit 1
    if (marked || inblock) { print "newcomer: " file ": the last marked block is not closed" > "/dev/stderr"; exit 1 }
    print n + 0 > (dir "/count")
  }
' "$file"
count=$(cat "$work/count")
done
[ "$count" -gt 0 ] || { echo "newcomer: no block of $what is marked <!-- newcomer: run -->" >&2; exit 1; }

if [ -n "$list" ]; then
  for i in $(seq "$count"); do
    echo "== block $i/$count, $(cat "$work/$i.where")"
    cat "$work/$i.sh"
  done
  exit 0
fi

for pidfile in .run/*.pid; do
  [ -e "$pidfile" ] || continue
  if kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "newcomer: a stack is already running ($pidfile): stop it with deploy/down.sh first" >&2
    exit 1
  fi
done

# The quick start's configuration on a database of its own, empty.
config="$work/hookline.toml"
sed -e 's#^\(database_url *= *"postgres://[^"]*/\)[^/"?]*#\1hookline_newcomer#' deploy/hookline.toml >"$config"
grep -q '^database_url *= *"postgres://[^"]*/hookline_newcomer' "$config" ||
  { echo "newcomer: deploy/hookline.toml has no postgres database_url to point at hookline_newcomer" >&2; exit 1; }
bash deploy/services.sh
psql -h 127.0.0.1 -U postgres -qc 'DROP DATABASE IF EXISTS hookline_newcomer WITH (FORCE)' >/dev/null
psql -h 127.0.0.1 -U postgres -qc 'CREATE DATABASE hookline_newcomer' >/dev/null

echo "newcomer: deploy/up.sh (HOOKLINE_PROFILE=${HOOKLINE_PROFILE:-quick}, database hookline_newcomer)"
started=1
# Streamed masked; the unmasked copy stays in $work (mode 700) until the end, only to read the credentials from.
bash deploy/up.sh "$config" 2>&1 | tee "$work/up.out" |
  sed -u -e 's/\(HOOKLINE_API_KEY=\).*/\1***/' -e 's/\(password: \).*/\1***/'
HOOKLINE_API_KEY=$(sed -n 's/^ *export HOOKLINE_API_KEY=\([^ ]*\)$/\1/p' "$work/up.out" | tail -n 1)
HOOKLINE_CONSOLE_PASSWORD=$(sed -n 's/^ *operator: operator *password: \([^ ]*\)$/\1/p' "$work/up.out" | tail -n 1)
[ -n "$HOOKLINE_API_KEY" ] || { echo "newcomer: deploy/up.sh printed no HOOKLINE_API_KEY" >&2; exit 1; }
[ -n "$HOOKLINE_CONSOLE_PASSWORD" ] || { echo "newcomer: deploy/up.sh printed no console password" >&2; exit 1; }
export HOOKLINE_API_KEY HOOKLINE_CONSOLE_PASSWORD

for i in $(seq "$count"); do
  where=$(cat "$work/$i.where")
  # `target/quick/` as written in the manual, or `./target/quick/`: the binaries up.sh ran.
  sed -e "s#\(^\|[[:space:](\"=]\)\(\./\)\{0,1\}target/quick/#\1$bin/#g" \
    -e "s#deploy/hookline\.toml#$config#g" \
    -e "s#\(psql .*-U postgres\) hookline\( \|\$\)#\1 hookline_newcomer\2#g" "$work/$i.sh" >"$work/$i.run"
  echo
  echo "newcomer: block $i/$count, $where"
  sed 's/^/  $ /' "$work/$i.run"
  start=$(date +%s)
  set +e
  timeout "$block_timeout" bash -euo pipefail "$work/$i.run" </dev/null
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ]; then rc="timed out after ${block_timeout} s"; else rc="exit status $rc"; fi
    echo "newcomer: FAILED: block $i/$count, $where: $rc (logs: .run/*.log)" >&2
    for log in .run/*.log; do [ -e "$log" ] && { echo "--- last lines of $log" >&2; tail -n 20 "$log" >&2; }; done
    exit 1
  fi
  echo "newcomer: block $i/$count passed in $(( $(date +%s) - start )) s"
done
echo
echo "newcomer: all $count marked blocks of $what ran"
