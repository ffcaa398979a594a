#!/usr/bin/env bash
# Whether the emulated kernel tests see a missing barrier: takes out one __syncthreads() at a
# time (every one in kernels/, or the FILE:LINE given), rebuilds unit_kernels in $BUILD_DIR
# (default build/), runs all its test cases, and prints per barrier whether some case failed
# ("caught") or none did ("missed"), then the counts. Each source is put back after its turn
# (and on exit; unit_kernels is rebuilt from the untouched sources at the end). Exits 1 if one
# was missed.
#   scripts/mutate_barriers.sh [kernels/X.cu:LINE ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cd "$root"
if (($#)); then
  sites=("$@")
else
  mapfile -t sites < <(grep -n "__syncthreads();" kernels/*.cu kernels/*.cuh | cut -d: -f1,2)
fi
saved=$(mktemp -d)
current=""
restore() {
  [[ -n $current ]] && cp "$saved/source" "$current"
  current=""
}
trap 'restore; cmake --build "$build" --target unit_kernels -j "$(nproc)" >/dev/null; rm -rf "$saved"' EXIT
caught=0 missed=0
for site in "${sites[@]}"; do
  file=${site%%:*} line=${site##*:}
  cp "$file" "$saved/source"
  current=$file
  sed -i "${line}s/__syncthreads();/(void)0;/g" "$file"
  if cmp -s "$file" "$saved/source"; then
    echo "$site: no __syncthreads() on that line" >&2
    restore
    exit 2
  fi
  cmake --build "$build" --target unit_kernels -j "$(nproc)" >"$saved/build.log" 2>&1 ||
    { cat "$saved/build.log" >&2; exit 2; }
  if "$build/tests/unit_kernels" >"$saved/run.log" 2>&1; then
    echo "$site: missed"
    missed=$((missed + 1))
  else
    echo "$site: caught ($(grep -E '^test cases' "$saved/run.log" | tr -s ' '))"
    caught=$((caught + 1))
  fi
  restore
done
echo "barriers taken out: $((caught + missed)); caught $caught, missed $missed"
((missed == 0))
