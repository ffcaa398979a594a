#!/usr/bin/env bash
# kernel_resources.sh: what ptxas gives each CUDA kernel (registers, shared memory, stack frame,
# spills), read here without a GPU: compiles kernels/*.cu (or the files named) for sm_90 (or
# CUDA_ARCH) with -Xptxas -v and prints one line per kernel.
#   scripts/kernel_resources.sh [kernels/flash_attention_tc.cu ...]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
arch="${CUDA_ARCH:-90}"
[ $# -gt 0 ] || set -- "$src"/kernels/*.cu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-52s %5s %9s %7s %7s\n' kernel regs smem_B stack_B spill_B
for f in "$@"; do
  "$nvcc" -std=c++17 -arch="sm_$arch" -O3 -I"$src" -Xptxas -v -c "$f" -o "$tmp/k.o" 2>&1 |
    awk -v file="$(basename "$f")" '
      /Compiling entry function/ {
        name = $0; sub(/.*function .?/, "", name); sub(/. for .*/, "", name)
        if (match(name, /[a-z_]+_kernel/)) k = substr(name, RSTART, RLENGTH); else k = name
        if (match(name, /ILi[0-9]+/)) k = k "<" substr(name, RSTART + 3, RLENGTH - 3) ">"
        if (name ~ /ItE/) k = k "(bf16 out)"
      }
      /stack frame/ { match($0, /[0-9]+ bytes stack/); stack = substr($0, RSTART, RLENGTH) + 0
                      match($0, /[0-9]+ bytes spill stores/); spill = substr($0, RSTART, RLENGTH) + 0 }
      /registers/ { match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15) + 0
                    smem = 0; if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH) + 0
                    line = sprintf("%-52s %5d %9d %7d %7d", file ": " k, regs, smem, stack, spill)
                    if (!(line in seen)) { seen[line] = 1; print line } }'
done
