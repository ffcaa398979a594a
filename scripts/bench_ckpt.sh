#!/usr/bin/env bash
# Checkpoint write and read bandwidth per rank, beside the disk's sequential write bandwidth
# (dd conv=fsync into the same directory). A model of a few hundred MB of state (params + Adam
# m + v, fp32) is trained one step and saved (train.stop_after_steps=1), then loaded (--resume)
# at 1 process (zero 0: rank 0 writes everything) and at dp=NPROC with zero 1 (each rank 1/dp).
# Write time covers the file writes, fsync, the manifest and rename; load time is the read of
# the owned slices plus the broadcast to all ranks, after rank 0's sha256 verification (timed
# apart). Reads come from the page cache (the files were just written): a cold read is slower.
# Last: blocked time per save, sync vs checkpoint.async.
# Usage: scripts/bench_ckpt.sh [NPROC] [DIR]   Env: BUILD_DIR (default build/), L, C.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-2}
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/bench_ckpt.XXXXXX")}
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
L=${L:-8} C=${C:-512}
common=(--set model.n_layer=$L --set model.d_model=$C --set model.n_head=8 --set model.seq_len=64
        --set train.micro_batch=$n --set train.steps=2 --set train.eval_every=0
        --set train.stop_after_steps=1)

dd_mb=1024
dd_out=$(dd if=/dev/zero of="$dir/dd.bin" bs=1M count=$dd_mb conv=fsync 2>&1 | tail -1)
rm -f "$dir/dd.bin"
echo "disk: dd $dd_mb MiB conv=fsync into $dir: $dd_out"

bench() {  # bench NAME NPROC ZERO
  local name=$1 np=$2 z=$3 run=("$build/trainer" train "$root/configs/tiny.yaml")
  [ "$np" -gt 1 ] && run=("$build/trainer" launch --nproc-per-node "$np" "$root/configs/tiny.yaml")
  local mb=$((n / np))
  "${run[@]}" "${common[@]}" --set train.micro_batch=$mb --set parallel.zero=$z \
    --set checkpoint.dir="$dir/ck_$name" --out "$dir/$name" >"$dir/$name.save.log" 2>&1
  "${run[@]}" "${common[@]}" --set train.micro_batch=$mb --set parallel.zero=$z \
    --set train.stop_after_steps=0 --set checkpoint.dir="$dir/ck_$name" --out "$dir/$name.r" \
    --resume "$dir/ck_$name" >"$dir/$name.load.log" 2>&1
  /usr/bin/python3 - "$name" "$dir/ck_$name" "$dir/$name.save.log" "$dir/$name.load.log" <<'PY'
import glob, json, os, re, sys
name, ck, save_log, load_log = sys.argv[1:]
step = sorted(glob.glob(ck + "/step_*"))[-1]
sizes = [os.path.getsize(f) for f in sorted(glob.glob(step + "/rank_*.safetensors"))]
save_s = float(re.search(r"checkpoint saved: \S+ \(([0-9.]+) s\)", open(save_log).read()).group(1))
m = re.search(r"verify ([0-9.]+) s, read ([0-9.]+) s", open(load_log).read())
verify_s, read_s = float(m.group(1)), float(m.group(2))
total, biggest = sum(sizes), max(sizes)
print(f"{name}: {len(sizes)} rank file(s), {total/1e6:.0f} MB in all, largest {biggest/1e6:.0f} MB")
print(f"  write {save_s:.3f} s -> {biggest/save_s/1e9:.2f} GB/s per rank (largest file), "
      f"{total/save_s/1e9:.2f} GB/s aggregate")
print(f"  load  {read_s:.3f} s -> {biggest/read_s/1e9:.2f} GB/s per rank; "
      f"sha256 verify of all files on rank 0 {verify_s:.3f} s -> {total/verify_s/1e9:.2f} GB/s")
PY
}
bench one_process 1 0
[ "$n" -gt 1 ] && bench "dp${n}_zero1" "$n" 1

# Async save: the same 1-process model, 8 steps with a checkpoint every 2 (4 saves), sync vs
# checkpoint.async. Printed: how long the training loop is blocked per save, and the wall time
# of the whole run (with 2 cores the writer thread competes with training for CPU).
async_vs_sync() {  # async_vs_sync MODE(true|false)
  local mode=$1 t0 t1
  t0=$(date +%s.%N)
  "$build/trainer" train "$root/configs/tiny.yaml" "${common[@]}" --set train.stop_after_steps=0 \
    --set train.steps=8 --set checkpoint.every_steps=2 --set checkpoint.keep=1 \
    --set checkpoint.async=$mode --set checkpoint.dir="$dir/ck_async_$mode" \
    --out "$dir/async_$mode" >"$dir/async_$mode.log" 2>&1
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$mode" "$dir/async_$mode.log" "$t0" "$t1" <<'PY'
import re, sys
mode, log, t0, t1 = sys.argv[1], open(sys.argv[2]).read(), float(sys.argv[3]), float(sys.argv[4])
if mode == "true":
    blocked = [float(x) for x in re.findall(r"training blocked ([0-9.]+) s", log)]
else:
    blocked = [float(x) for x in re.findall(r"checkpoint saved: \S+ \(([0-9.]+) s\)", log)]
label = "async" if mode == "true" else "sync "
print(f"{label}: {len(blocked)} saves, training blocked {sum(blocked)/len(blocked):.3f} s per save "
      f"(max {max(blocked):.3f}); run wall time {t1 - t0:.2f} s")
PY
}
echo "save every 2 of 8 steps, one process:"
async_vs_sync false
async_vs_sync true
