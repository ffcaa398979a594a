# Shared helpers for script tests: `source "$src/tests/lib/common.sh"` after setting bin and src.
set -euo pipefail
bin=${1:?usage: test.sh TRAINER_BINARY SOURCE_DIR}
src=${2:?usage: test.sh TRAINER_BINARY SOURCE_DIR}
tmp_root=${TRAINER_TEST_TMP:-/tmp/trainer-tests}
mkdir -p "$tmp_root"
work=$(mktemp -d "$tmp_root/$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
compare_metrics() { /usr/bin/python3 "$src/tests/lib/compare_metrics.py" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# check_fp8_resumed NAME STEP_DIR: run NAME (NAME.log) resumed from STEP_DIR with its fp8
# scaling states (precision.compute: fp8; the run warns when a checkpoint has none for the model)
check_fp8_resumed() {
  grep -q "resumed from $2" "$1.log" || { cat "$1.log"; fail "$1 did not resume from $2"; }
  ! grep -q "no fp8 scaling state" "$1.log" || { cat "$1.log"; fail "$1: the fp8 state was not restored"; }
}
# check_resume_exact FULL FIRST SECOND STEPS WHAT: the metrics of a run stopped (FIRST) and resumed
# (SECOND), joined (joined.jsonl), equal the uninterrupted run's (FULL) bit for bit over STEPS
# steps; fails naming WHAT otherwise.
check_resume_exact() {
  cat "$2" "$3" >joined.jsonl
  compare_metrics "$1" joined.jsonl --exact --min-steps "$4" \
    || fail "resumed $5 differs from the uninterrupted one"
}
# json_get FILE EXPR: evaluates a Python expression on the parsed JSON document `d`.
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# expect_exit_2 "message part" NOT_CREATED trainer-args...: trainer refuses bad input: it exits 2,
# says the message, and creates no NOT_CREATED path ("" skips that check).
expect_exit_2() {
  local want=$1 not_created=$2
  shift 2
  set +e
  "$bin" "$@" >exit2.log 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { cat exit2.log; fail "trainer $* exited $rc, not 2"; }
  grep -qF -- "$want" exit2.log || { cat exit2.log; fail "trainer $* did not say '$want'"; }
  [ -z "$not_created" ] || [ ! -e "$not_created" ] || fail "trainer $* created $not_created"
  echo "ok: $* -> $(head -c 200 exit2.log)"
}
