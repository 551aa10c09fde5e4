#!/usr/bin/env bash
# Mutation testing of the pure code: cargo-mutants changes one thing at a time (a `<` into `<=`, a function
# body into `Default::default()`, ...) and runs the package's tests; a mutant the tests do not notice
# ("missed") is a behaviour no test pins down.
#
# Scope (the pure parts; nothing here needs PostgreSQL or RabbitMQ):
#   1. crates/hookline-signature, the whole crate;
#   2. crates/hookline-payments: src/normalize/ (one file per provider), src/ledger.rs (the fee rule; the two
#      functions that write SQL are excluded, see PAYMENTS_EXCLUDE) and src/model.rs (statuses and ranks).
#
# Results: mutants.out/signature/ and mutants.out/payments/ (gitignored), each with cargo-mutants'
# caught.txt, missed.txt, unviable.txt, timeout.txt and outcomes.json. Exit status: 0 when every missed
# mutant is listed in deploy/mutants-equivalent.txt (a mutant that cannot change observable behaviour, with the
# reason), 1 otherwise (each unlisted one is printed), 2 when cargo-mutants itself fails. Extra arguments go to
# cargo-mutants: `--iterate` re-tests only what the previous run in mutants.out/ did not catch.
#
# How long, on the 2-core dev box: about 16 min for the signature crate (246 mutants) and about 40 min for the
# payments files (242 mutants), one incremental build + test run each, plus ~7 min for the first baseline build
# of payments under cargo-mutants. That is why it is NOT in CI: run it
# before merging a change to these files, and after adding a scheme or a provider dialect.
#
# Usage: deploy/mutants.sh [signature|payments|all] [extra cargo-mutants arguments, e.g. --list]
#
# It runs with --in-place: the mutants are applied to THIS checkout, one at a time, and each file is restored
# afterwards, so the pre-built target/ is reused (a copy of the tree would rebuild every dependency). Do not
# edit the crates under test while it runs, and check `git status` if it is interrupted with SIGKILL.
set -euo pipefail
cd "$(dirname "$0")/.."

what="${1:-all}"
[ $# -gt 0 ] && shift
case "$what" in
  signature | payments | all) ;;
  *)
    echo "usage: $0 [signature|payments|all] [cargo-mutants arguments]" >&2
    exit 2
    ;;
esac

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "mutants.sh: cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
  exit 2
fi

allow_list=deploy/mutants-equivalent.txt
# A mutant that makes a proptest fail would otherwise leave a *.proptest-regressions file in the checkout,
# seeded by code that never existed.
export PROPTEST_DISABLE_FAILURE_PERSISTENCE=1
# The per-mutant test timeout: the unmutated tests take ~1 s (proptests included), so 30 s is ample on a loaded
# machine, and every mutant that makes a loop endless (percent_decode has several) costs only that.
# Doctests are left out (--all-targets): each one is compiled on its own for every mutant, which doubled the
# time per mutant, and the examples they hold are covered by the integration tests.
# --in-place runs one mutant at a time by itself (cargo-mutants refuses --jobs with it).
common=(--in-place --timeout 30 --no-shuffle --cargo-test-arg=--all-targets)

# ledger::post and ledger::post_many only bind values into SQL, and PostingKind::as_str is only ever bound into
# it (the ledger_transactions.kind CHECK refuses any other spelling): their mutants can only be caught by the
# database tests of the workspace `tests/` crate (tests/pipeline.rs, tests/order.rs), not by this run.
PAYMENTS_EXCLUDE='ledger\.rs:.*((in|replace) post(_many)?\b|PostingKind::as_str)'

run() {
  local name="$1"
  shift
  mkdir -p "mutants.out/$name"
  echo "mutants.sh: $name: cargo mutants $*" >&2
  # Exit codes of cargo-mutants: 0 all caught, 2 some missed, 3 some timed out, 4 the baseline failed.
  local rc=0
  nice -n 10 cargo mutants "${common[@]}" --output "mutants.out/$name" "$@" || rc=$?
  case "$rc" in
    0 | 2 | 3) ;;
    *)
      echo "mutants.sh: $name: cargo-mutants failed (exit $rc), see mutants.out/$name/mutants.out/debug.log" >&2
      exit 2
      ;;
  esac
}

# Prints the missed mutants of one run that are not in the allow-list. Matching drops the line:column, so the
# list survives edits elsewhere in a file. Timed-out mutants are not listed: the tests did not pass (the
# mutant made a loop endless), so the tests noticed it; they are counted apart.
unexplained() {
  local dir="mutants.out/$1/mutants.out"
  local allowed
  allowed=$(sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' "$allow_list")
  cat "$dir/missed.txt" 2>/dev/null |
    sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /' |
    while IFS= read -r mutant; do
      grep -qxF -- "$mutant" <<<"$allowed" || echo "$mutant"
    done
}

list_only=0
for arg in "$@"; do [ "$arg" = --list ] && list_only=1; done

if [ "$what" = signature ] || [ "$what" = all ]; then
  run signature --package hookline-signature "$@"
fi
if [ "$what" = payments ] || [ "$what" = all ]; then
  run payments --package hookline-payments \
    --file 'crates/hookline-payments/src/normalize/*.rs' \
    --file crates/hookline-payments/src/ledger.rs \
    --file crates/hookline-payments/src/model.rs \
    --exclude-re "$PAYMENTS_EXCLUDE" "$@"
fi
[ "$list_only" = 1 ] && exit 0

status=0
for name in signature payments; do
  [ "$what" = "$name" ] || [ "$what" = all ] || continue
  dir="mutants.out/$name/mutants.out"
  counts=""
  for outcome in caught missed unviable timeout; do
    counts+=" $outcome=$(cat "$dir/$outcome.txt" 2>/dev/null | wc -l)"
  done
  echo "mutants.sh: $name:$counts"
  left=$(unexplained "$name")
  if [ -n "$left" ]; then
    echo "mutants.sh: $name: mutants no test catches and $allow_list does not explain:" >&2
    echo "$left" | sed 's/^/  /' >&2
    status=1
  fi
done
exit "$status"
