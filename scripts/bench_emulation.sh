#!/usr/bin/env bash
# The emulated kernel tests (tests/unit/kernels) with each CUDA thread a fiber, the default,
# against each a std::thread (-DTRAINER_EMULATION_THREADS=ON, as sanitizer builds run them):
# builds unit_kernels both ways in $BUILD_DIR (default build/, set back to fibers at the end),
# then runs the test cases both have (not the fiber-only emulated_fibers_*), threads then fibers,
# ROUNDS times, one process a run, and prints each run's wall seconds, the medians and the ratio.
#   scripts/bench_emulation.sh [ROUNDS]    (default 1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${1:-1}
out=$(mktemp -d)
build_as() {
  cmake -S "$root" -B "$build" -DTRAINER_EMULATION_THREADS="$1" >/dev/null
  cmake --build "$build" --target unit_kernels -j "$(nproc)" >/dev/null
}
trap 'build_as OFF; rm -rf "$out"' EXIT
build_as ON
cp "$build/tests/unit_kernels" "$out/threads"
build_as OFF
cp "$build/tests/unit_kernels" "$out/fibers"
spec='[kernels]~emulated_fibers_*'
echo "test cases: $("$out/fibers" "$spec" --list-test-names-only | grep -c .)"
for ((r = 0; r < rounds; ++r)); do
  for mode in threads fibers; do
    start=$(date +%s.%N)
    "$out/$mode" "$spec" >"$out/$mode.log" 2>&1 || { cat "$out/$mode.log" >&2; exit 1; }
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    echo "$mode $secs" | tee -a "$out/times"
  done
done
python3 - "$out/times" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    mode, secs = line.split()
    t.setdefault(mode, []).append(float(secs))
a, b = statistics.median(t["threads"]), statistics.median(t["fibers"])
print(f"median: threads {a:.1f} s, fibers {b:.1f} s; fibers are {a / b:.1f}x as fast")
PY
