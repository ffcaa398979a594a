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
# json_get FILE EXPR: evaluates a Python expression on the parsed JSON document `d`.
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
