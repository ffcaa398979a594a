#!/usr/bin/env bash
# Gloo all_reduce bus bandwidth for 2 and 4 local ranks (threads of one process, loopback TCP)
# over 1..256 MiB, beside memcpy bandwidth of the same sizes: the table shows how close the
# communicator gets to the machine's copy ceiling. Usage: scripts/bench_allreduce.sh [extra args]
# (e.g. --ranks 2,4,8 --max-mib 64). BUILD_DIR selects the build (default: build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DTRAINER_CUDA=OFF >/dev/null
fi
cmake --build "$build" --target allreduce_bench -j "$(nproc)" >/dev/null
"$build/tests/allreduce_bench" "$@"
