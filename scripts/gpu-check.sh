#!/usr/bin/env bash
# gpu-check.sh: on a machine with an NVIDIA GPU, in under 8 minutes: build with the detected
# arch (sm_90 when unknown); run the cuda tests (each op vs the cpu backend; dp and ZeRO 1-3, and
# tp 2, with two ranks on the GPU vs the cpu run); time the ops at
# GPT-2-small shapes beside their references (tests/bench/cuda_ops_bench.cpp), and attention
# beside PyTorch's (scripts/attention_reference.py, where python3 has torch); train
# configs/tiny.yaml for a few dozen steps on cuda and on cpu with the same seed, in fp32 and in
# bf16, and compare the loss curves (loose tolerance: reduction orders differ); on sm_90 and
# later also fp8 against the cuda bf16 curve (FP8_RTOL, default 5e-2); train
# configs/gpt2_small_cuda.yaml for GPT2_STEPS (default 20) steps for tokens/s and MFU (bf16, bf16
# with cuDNN's attention, bf16 with the GEMM algorithms tuned, both of those together where
# cuDNN's run trained, the fastest of those at micro_batch 64 x grad_accum 1 (the same tokens a
# step, llm.c's micro-batch), fp8 where the GPU has it, and bf16 in 6 heads of 128), each with 3 steps
# profiled (device time by phase: the default run's longest phases get a table); run the bf16
# attention test under compute-sanitizer (memcheck, racecheck) where the toolkit has it; time the
# mma attention kernels under Nsight Compute where it is present; print the tables last. A failed
# check does not stop the others; the exit status is 1 when any failed.
# usage: scripts/gpu-check.sh [BUILD_DIR]          builds here (needs the project's Debian libraries)
#        scripts/gpu-check.sh --bundle DIR         runs what scripts/gpu-bundle.sh built elsewhere
# env: STEPS (default 40), RTOL (default 2e-2), GPT2_STEPS (default 20), GPU_CHECK_OUT (results),
#      GPU_CHECK_SECONDS (the whole check's budget, default 480),
#      GPU_CHECK_ARCHIVE (also pack the results into this .tar.gz, e.g. under the device tool's $OUT)
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
bundle=""
if [ "${1:-}" = --bundle ]; then bundle="$(cd "$2" && pwd)"; shift 2; fi
# gpu-bundle.sh packs the bundle (bundle.tar.gz) so that it fits the device tool's carry limit.
bundle_dir="$bundle"  # results go beside the bundle by default, not into the unpacked copy
if [ -n "$bundle" ] && [ -f "$bundle/bundle.tar.gz" ]; then
  unpacked="$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")"
  tar -C "$unpacked" -xzf "$bundle/bundle.tar.gz"
  bundle="$unpacked"
fi
build="${1:-$src/build-gpu}"
steps="${STEPS:-40}"
rtol="${RTOL:-2e-2}"
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-480}))
# Seconds left, at least 1 (timeout 0 would mean no limit at all).
left() { local l=$((deadline - SECONDS)); echo $((l > 1 ? l : 1)); }
# The seconds left, but at most $1: a hung test must not take the time of the checks after it.
cap() { local l; l=$(left); echo $((l < $1 ? l : $1)); }
# Whether a step that needs about $1 seconds still fits; if not it is listed as skipped.
skipped=()
fits() { [ $((deadline - SECONDS)) -ge "$1" ] || { skipped+=("$2"); return 1; }; }
# cuDNN's log (CUDNN_LOGDEST_DBG) in a few lines: its errors and warnings, most frequent first.
cudnn_log_summary() {
  grep -h -i -E "error|warn" "$1" 2>/dev/null | cut -c1-300 | sort | uniq -c | sort -rn | head -12 ||
    true
}

command -v nvidia-smi >/dev/null || { echo "gpu-check: nvidia-smi not found: no GPU here" >&2; exit 2; }
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')"
arch="${arch:-90}"
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

if [ -n "$bundle" ]; then
  # Binaries from scripts/gpu-bundle.sh; CUDA's libraries (cuBLASLt, NCCL, cudart) from this
  # machine, wherever its toolkit or its Python packages keep them.
  echo "gpu-check: $gpu_name, sm_$arch, prebuilt bundle $bundle ($(cat "$bundle/BUILD"))"
  # The configs and scripts come from this tree, the binaries from the bundle: say if they differ.
  if head=$(git -C "$src" describe --always --dirty 2>/dev/null) &&
    ! grep -q "commit=$head\$" "$bundle/BUILD"; then
    echo "gpu-check: WARNING: the bundle was built from another commit than this tree ($head)"
  fi
  # (cuDNN, for TRAINER_ATTENTION=cudnn, often only in PyTorch's Python packages)
  cuda_dirs=$( (find /usr/local /opt /usr/lib -maxdepth 12 -name 'libcublasLt.so.*' \
    -o -name 'libnccl.so.*' -o -name 'libcudart.so.*' -o -name 'libcudnn.so.*' 2>/dev/null ||
    true) |
    xargs -r -n1 dirname | sort -u | paste -sd: -)
  export LD_LIBRARY_PATH="$bundle/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin="$bundle/bin" tests="$bundle/bin" out="${GPU_CHECK_OUT:-$bundle_dir/gpu-check}"
  ldd "$bin/trainer" | grep "not found" && { echo "gpu-check: libraries missing" >&2; exit 1; }
  # ldd cannot see cuBLASLt: the trainer loads it when it creates the cuda backend, from this path.
  [ -n "$(find ${cuda_dirs//:/ } -maxdepth 1 -name 'libcublasLt.so.*' 2>/dev/null)" ] ||
    { echo "gpu-check: no libcublasLt.so.* on this machine" >&2; exit 1; }
else
  echo "gpu-check: $gpu_name, sm_$arch, build dir $build"
  cmake -S "$src" -B "$build" -DTRAINER_CUDA=ON -DTRAINER_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
  timeout "$(left)" cmake --build "$build" -j"$(nproc)" --target trainer unit_cuda cuda_ops_bench
  bin="$build" tests="$build/tests" out="${GPU_CHECK_OUT:-$build/gpu-check}"
fi
rm -rf "$out" && mkdir -p "$out"

# A failed check is recorded and the script goes on, so that one failure still leaves the other
# figures (above all GPT-2 small's MFU); the exit status says whether everything passed.
failed=()
echo "== cuda op tests"
# The dp/ZeRO, tp, pp and cp tests (two ranks as threads on the GPU) run in their own process: a crash
# there must not take the op tests with it.
# The op tests synchronise after every launch (TRAINER_CUDA_SYNC=1), so that a fault is reported
# at the kernel that caused it; the dp/ZeRO and tp tests run their streams as they are.
TRAINER_CUDA_SYNC=1 timeout "$(cap 180)" "$tests/unit_cuda" "~[zero]~[tp]~[pp]~[cp]~[cudnn]" -s -r compact \
  >>"$out/unit_cuda.txt" 2>&1 || failed+=("cuda tests ~[zero]~[tp]~[pp]~[cp]~[cudnn]")
timeout "$(cap 90)" "$tests/unit_cuda" "[zero],[tp],[pp],[cp]" -s -r compact >>"$out/unit_cuda.txt" 2>&1 ||
  failed+=("cuda tests [zero],[tp],[pp],[cp]")
# cuDNN's attention in a process of its own, with cuDNN's log of its errors and warnings
# (cudnn-tests.log): a fault inside cuDNN must not take the other tests with it.
TRAINER_CUDA_SYNC=1 CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn-tests.log" \
  timeout "$(cap 60)" "$tests/unit_cuda" "[cudnn]" -s -r compact >>"$out/unit_cuda.txt" 2>&1 ||
  failed+=("cuda tests [cudnn]")
# A failed fp8 test again, with cuBLASLt's whole log (API trace included: on an H200 its errors
# and hints alone said nothing of why it refused a GEMM); its last 2000 lines are kept.
if grep -q "fp8_test.cpp.*failed" "$out/unit_cuda.txt"; then
  CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE="$out/cublaslt-fp8-full.log" timeout "$(cap 30)" \
    "$tests/unit_cuda" "[fp8]" >/dev/null 2>&1 || true
  tail -2000 "$out/cublaslt-fp8-full.log" >"$out/cublaslt-fp8.log" 2>/dev/null || true
  rm -f "$out/cublaslt-fp8-full.log"
fi
if grep -q "SKIPPED: no CUDA device" "$out/unit_cuda.txt"; then
  grep -m1 "SKIPPED" "$out/unit_cuda.txt"; echo "gpu-check: tests skipped on a GPU machine" >&2; exit 1
fi
grep -E "^(Passed|Failed|test cases)" "$out/unit_cuda.txt" | tail -3 || true

echo "== cuda ops at GPT-2-small shapes, each beside its reference"
timeout "$(cap 150)" "$tests/cuda_ops_bench" --reps 5 >"$out/ops_bench.txt" 2>&1 ||
  failed+=("cuda_ops_bench")
# PyTorch's fused attention (FlashAttention-2, cuDNN) at the bench's attention shape, where this
# machine's python3 has torch: the reference for the rows above. Informational; its own libraries
# (hence no LD_LIBRARY_PATH).
if fits 60 "PyTorch attention reference" && env -u LD_LIBRARY_PATH python3 -c "import torch" 2>/dev/null; then
  env -u LD_LIBRARY_PATH timeout "$(cap 60)" python3 "$src/scripts/attention_reference.py" --reps 5 \
    >>"$out/ops_bench.txt" 2>&1 || echo "gpu-check: attention_reference.py failed (ops_bench.txt)"
fi

train() {  # device precision -> $out/<device>-<precision>/metrics.jsonl
  local run="$1-$2"
  fits 20 "training $run" || return 0
  timeout "$(cap 60)" "$bin/trainer" train "$src/configs/tiny.yaml" --out "$out/$run" \
    --set hardware.device="$1" --set precision.compute="$2" --set train.steps="$steps" \
    --set train.eval_every=0 --set logging.every_steps=1 --set run.seed=1234 >"$out/$run.log" 2>&1 ||
    { tail -20 "$out/$run.log"; failed+=("training $run"); }
}
curve_ok=PASS
for precision in fp32 bf16; do
  echo "== tiny.yaml, $steps steps on cuda and cpu, $precision"
  train cuda "$precision"
  train cpu "$precision"
  python3 "$src/tests/lib/compare_metrics.py" "$out/cpu-$precision/metrics.jsonl" \
    "$out/cuda-$precision/metrics.jsonl" --rtol "$rtol" --min-steps "$steps" --fields loss \
    >>"$out/curve.txt" 2>&1 || curve_ok=FAIL
done
fp8=no
if [ "$arch" -ge 90 ]; then
  fp8=yes
  echo "== tiny.yaml, $steps steps on cuda, fp8 vs bf16"
  train cuda fp8
  python3 "$src/tests/lib/compare_metrics.py" "$out/cuda-bf16/metrics.jsonl" \
    "$out/cuda-fp8/metrics.jsonl" --rtol "${FP8_RTOL:-5e-2}" --min-steps "$steps" --fields loss \
    >>"$out/curve.txt" 2>&1 || curve_ok=FAIL
fi

# GPT-2 small (124M, seq 1024, bf16) on the GPU: throughput and MFU against the 40% target, at
# the config's own batch (micro_batch 16 x grad_accum 4: 65,536 tokens per optimizer step).
gpt2_steps="${GPT2_STEPS:-20}"
gpt2() {  # run-name precision [--set ...]; returns the trainer's status (a failed run still
  #          writes its report)
  local name=$1 precision=$2
  shift 2
  echo "== configs/gpt2_small_cuda.yaml, $gpt2_steps steps ($precision) $*"
  timeout "$(cap 120)" "$bin/trainer" train "$src/configs/gpt2_small_cuda.yaml" --out "$out/$name" \
    --set precision.compute="$precision" --set train.steps="$gpt2_steps" \
    --set train.warmup_steps=10 --set train.eval_every=0 \
    --set checkpoint.every_steps=0 --set logging.every_steps=1 --set logging.profile_steps=3 \
    "$@" >"$out/$name.log" 2>&1 && return 0
  tail -20 "$out/$name.log"
  failed+=("GPT-2 small $name")
  return 1
}
# A bf16 run that failed (say in cuBLASLt's GELU epilogue, never run before this device) still
# gets its throughput figure, from the GELU in kernels/; the failure stays in the list.
if fits 60 "GPT-2 small bf16" && ! gpt2 gpt2 bf16 && fits 90 "GPT-2 small bf16, GELU in kernels/"; then
  TRAINER_GELU_EPILOGUE=0 gpt2 gpt2-no-epilogue bf16 || true
fi
# The same bf16 run with cuDNN's fused attention (TRAINER_ATTENTION=cudnn) in place of the mma.sync
# kernels; its log says which cuDNN ran and which shapes it planned or refused.
if fits 60 "GPT-2 small bf16, cuDNN attention"; then
  TRAINER_ATTENTION=cudnn CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn-gpt2.log" \
    gpt2 gpt2-cudnn bf16 || true
  grep -h -E "attention: cuDNN" "$out/gpt2-cudnn.log" | cut -c1-600 | sort -u | head -6 || true
  # a refusal: cuDNN's own words for it
  if grep -q "cuDNN has no engine" "$out/gpt2-cudnn.log"; then
    cudnn_log_summary "$out/cudnn-gpt2.log"
  fi
fi
# The same bf16 run with each GEMM shape's cuBLASLt algorithm tuned (TRAINER_GEMM_AUTOTUNE=1: the
# first calls try the heuristic's candidates, timed, and the shape keeps the fastest), to compare
# with the default's step. (Attention at 32 rows a warp, TRAINER_ATTENTION=tensor_core_32, lost to
# 16 by 1% in the step and 6% alone on the H200, and cuda_ops_bench still times it.)
if fits 60 "GPT-2 small bf16, GEMM algorithms tuned"; then
  TRAINER_GEMM_AUTOTUNE=1 gpt2 gpt2-gemm-tuned bf16 || true
fi
# Both at once, where cuDNN's attention trained: the fastest configuration this build has, so the
# one that measures the MFU target (each alone was measured above, against the default).
cudnn_report="$out/gpt2-cudnn/report.json"
if [ -f "$cudnn_report" ] && grep -q '"status": *"completed"' "$cudnn_report" &&
  fits 60 "GPT-2 small bf16, cuDNN attention and GEMM algorithms tuned"; then
  TRAINER_ATTENTION=cudnn TRAINER_GEMM_AUTOTUNE=1 gpt2 gpt2-cudnn-tuned bf16 || true
fi
# The same tokens a step in one micro-batch of 64 (llm.c's, and 30 GiB a rank by `trainer plan`):
# each GEMM four times as tall (the 768-wide ones ran at 250-550 TFLOP/s at 16), a quarter of the
# launches. With the fastest settings above: cuDNN's attention where it trained, tuned GEMMs.
if fits 60 "GPT-2 small bf16, micro_batch 64 x grad_accum 1"; then
  mb64_attention=""
  grep -qs '"status": *"completed"' "$out/gpt2-cudnn-tuned/report.json" && mb64_attention=cudnn
  TRAINER_ATTENTION="$mb64_attention" TRAINER_GEMM_AUTOTUNE=1 gpt2 gpt2-mb64 bf16 \
    --set train.micro_batch=64 --set train.grad_accum=1 || true
fi
# fp8 after the bf16 figures (the target's) is safe, and only with the time for it.
if [ "$fp8" = yes ] && fits 90 "GPT-2 small fp8"; then gpt2 gpt2-fp8 fp8 || true; fi
# The same width in 6 heads of 128 (Llama's head size, and most larger models'): the same
# parameters and FLOPs, so its MFU sets the mma.sync kernels at 128 beside 64 in a whole step.
if fits 60 "GPT-2 small bf16, 6 heads of 128"; then
  gpt2 gpt2-hs128 bf16 --set model.n_head=6 || true
fi
# compute-sanitizer, where this machine's toolkit has it, over the bf16 attention test (both
# tensor-core families, the flash and the reference kernels): out-of-bounds and misaligned
# accesses (memcheck), then shared-memory races (racecheck), which the cpu emulation, running
# one block at a time, cannot show.
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)"
if [ -z "$sanitizer" ]; then
  echo "gpu-check: no compute-sanitizer on this machine; the sanitizer checks do not run"
else
  for tool in memcheck racecheck; do
    fits 45 "compute-sanitizer $tool" || continue
    echo "== compute-sanitizer --tool $tool, bf16 attention test"
    timeout "$(left)" "$sanitizer" --tool "$tool" --error-exitcode 3 "$tests/unit_cuda" \
      "cuda_bf16_attention_matches_cpu_on_tensor_cores_and_cuda_cores" \
      >"$out/sanitizer-$tool.txt" 2>&1 || failed+=("compute-sanitizer $tool")
  done
fi
# Nsight Compute, where this machine has it, over the mma attention kernels at GPT-2 shapes: each
# kernel's duration and its SM and memory throughput (attention is a third of a GPT-2 step; the
# forward, dq and dk/dv kernels each get a row). Informational: it fails no check.
ncu="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)"
if [ -n "$ncu" ] && fits 60 "ncu attention kernels"; then
  echo "== ncu: the mma attention kernels (B8 T1024 12x64)"
  timeout "$(cap 120)" "$ncu" --clock-control none --kernel-name regex:mma_ --launch-count 3 \
    --section SpeedOfLight "$tests/cuda_ops_bench" --only attention --reps 1 \
    >"$out/ncu-attention.txt" 2>&1 || echo "gpu-check: ncu did not finish (see ncu-attention.txt)"
fi
[ "$curve_ok" = PASS ] || failed+=("loss curves")

# What failed, in detail, before the tables (the device tool keeps the output's last 12,000
# characters: the tables and the verdict come last).
if [ "${#failed[@]}" -gt 0 ]; then
  echo "== failures"
  [ "$curve_ok" = PASS ] || cat "$out/curve.txt"
  grep -B2 -A12 -E "FAILED|failed" "$out/unit_cuda.txt" | head -60 || true
  if grep -q "cudnn_attention_test.cpp.*failed" "$out/unit_cuda.txt"; then
    echo "-- cuDNN's log of the failed cuDNN tests (errors and warnings, most frequent first)"
    cudnn_log_summary "$out/cudnn-tests.log"
  fi
  grep -h -m5 -B1 -A6 -E "^========= (Invalid|Error|Race|Warning)" "$out"/sanitizer-*.txt 2>/dev/null |
    head -40 || true
fi
[ -z "${GPU_CHECK_ARCHIVE:-}" ] || tar -C "$out" -czf "$GPU_CHECK_ARCHIVE" . || true

# The tables: the ops' times, each op's worst error (from the test output), then throughput from
# report.json.
echo
cat "$out/ops_bench.txt" 2>/dev/null || true
echo
echo "== gpu-check summary ($gpu_name, sm_$arch, $((SECONDS)) s)"
printf '%-58s %s\n' "check" "result"
python3 - "$out" "$curve_ok" <<'PY' || echo "gpu-check: the summary itself failed"
import json, os, re, sys
out, curve = sys.argv[1], sys.argv[2]

# The op tests' errors against the cpu backend (each check_close prints its worst relative
# error): one row per op and precision in op_errors.txt, and here the worst per tolerance.
ops = {}
try:
    for line in open(f"{out}/unit_cuda.txt", errors="replace"):
        m = re.search(r"(passed|failed): worst < tol .*? with 1 message: '(.*?): worst relative "
                      r"error (\S+) at .*\(tolerance (\S+),", line)
        if m:
            status, what, err, tol = m.groups()
            op = re.sub(r"\s*\[.*?\]|\s+[A-Z]+=\S+|\s+at \+\d+ B", "", what).strip()
            row = ops.setdefault(op, {"err": 0.0, "tol": tol, "checks": 0, "failed": 0})
            row["err"] = max(row["err"], float(err))
            row["checks"] += 1
            row["failed"] += status == "failed"
    runs = [l.strip() for l in open(f"{out}/unit_cuda.txt", errors="replace")
            if l.startswith(("Passed", "Failed"))]
    for name, line in zip(("cuda tests: ops", "cuda tests: dp/ZeRO, tp, pp (two ranks)",
                           "cuda tests: cuDNN attention"), runs):
        print(f"{name:58} {line}")
except OSError:
    pass
with open(f"{out}/op_errors.txt", "w") as f:
    for op, r in sorted(ops.items()):
        f.write(f"{op:56} {r['err']:9.2e} < {r['tol']:6} x{r['checks']:<3} "
                f"{'FAILED' if r['failed'] else 'ok'}\n")
for tol in sorted({r["tol"] for r in ops.values()}, key=float):
    group = {op: r for op, r in ops.items() if r["tol"] == tol}
    worst = max(group, key=lambda op: group[op]["err"] / float(tol))
    bad = [op for op, r in group.items() if r["failed"]]
    print(f"{'op errors vs cpu, tolerance ' + tol + ' (' + str(len(group)) + ' ops)':58} "
          f"worst {group[worst]['err']:.2e} ({worst}); "
          f"{'FAILED: ' + ', '.join(bad) if bad else 'all within'}  [op_errors.txt]")

def num(x, fmt, scale=1.0):  # a report field that may be null (a failed or diverged run)
    return "n/a" if x is None else format(x * scale, fmt)

def report(run):
    try:
        return json.load(open(f"{out}/{run}/report.json"))
    except (OSError, ValueError):
        return None

def figures(r):
    t, l = r.get("throughput", {}), r.get("loss", {})
    return (f"tokens/s {num(t.get('tokens_per_second'), '.0f')}  "
            f"MFU {num(t.get('mfu'), '.2f', 100)}{'%' if t.get('mfu') is not None else ''}  "
            f"step p50 {num(t.get('step_time_s', {}).get('p50'), '.1f', 1e3)} ms  "
            f"final loss {num(l.get('final_train_loss'), '.4f')}  ({r.get('run', {}).get('status', '?')})")

for run in ("cuda-fp32", "cpu-fp32", "cuda-bf16", "cpu-bf16", "cuda-fp8"):
    r = report(run)
    if r:
        print(f"{'tiny ' + run + ' (' + r['hardware'].get('device_name', '?') + ')':58} {figures(r)}")
print(f"{'tiny loss curves cuda vs cpu fp32/bf16, fp8 vs bf16 (same seed)':58} {curve}")
gpt2_runs = (("gpt2", "bf16"), ("gpt2-no-epilogue", "bf16, GELU in kernels/"),
             ("gpt2-cudnn", "bf16, cuDNN attention"), ("gpt2-fp8", "fp8"),
             ("gpt2-gemm-tuned", "bf16, GEMM algorithms tuned"),
             ("gpt2-cudnn-tuned", "bf16, cuDNN attention, GEMMs tuned"),
             ("gpt2-mb64", "bf16, fastest of the above"),
             ("gpt2-hs128", "bf16, 6 heads of 128"))
for run, label in gpt2_runs:
    r = report(run)
    if r:
        b = r.get("batch", {})
        shape = f"(124M, T 1024, B {b.get('micro_batch', '?')}x{b.get('grad_accum', '?')})"
        print(f"{'GPT-2 small ' + label + ' ' + shape:58} {figures(r)}"
              f"  [MFU of the bf16 peak; target 40%]")
# ncu's rows for the attention kernels (ncu-attention.txt): duration, SM and memory throughput.
try:
    kernel, rows = None, []
    for line in open(f"{out}/ncu-attention.txt", errors="replace"):
        m = re.search(r"(\w+)<([^<>]*)>.*\(\d+, \d+, \d+\)x\(\d+", line)
        if m:
            kernel = {"name": m.group(1), "types": m.group(2)}
            rows.append(kernel)
            continue
        m = re.match(r"\s+(Duration|Compute \(SM\) Throughput|Memory Throughput)\s+(\S+)\s+(\S+)", line)
        if m and kernel is not None:
            kernel[m.group(1)] = f"{m.group(3)} {m.group(2)}"
    for k in rows:
        print(f"{'ncu ' + k['name'] + '<' + k['types'][:24] + '>':58} {k.get('Duration', '?')}, "
              f"SM {k.get('Compute (SM) Throughput', '?')}, memory {k.get('Memory Throughput', '?')}")
except OSError:
    pass

# Where a GPT-2 step's device time goes (logging.profile_steps, rank 0): the default run's
# longest phases, the GEMM phases of the tuned run and the attention phases of the others.
for run, _ in gpt2_runs:
    p = (report(run) or {}).get("profile")
    if not p:
        continue
    print(f"profile {run}: {p['step_time_s'] * 1e3:.2f} ms/step over {p['steps']} steps, "
          f"{p['unaccounted_s'] * 1e3:.2f} ms in no phase")
    # The device span of a profiled step against the loop's step time (metrics.jsonl, host clock):
    # the event timer's own check on a GPU (they differ by launch latency and the end-of-step sync)
    try:
        rows = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
        first = p["first_step"]
        loop = [m["step_time_s"] for m in rows if first <= m["step"] < first + p["steps"]]
        if loop:
            ratio = p["step_time_s"] / (sum(loop) / len(loop))
            print(f"  device span / loop step time: {ratio:.3f}"
                  f"{'' if 0.8 <= ratio <= 1.05 else '  (WARN: the event timer disagrees with the loop)'}")
    except (OSError, ValueError, KeyError):
        pass
    if run == "gpt2":
        shown = p["phases"][:16]
    elif run == "gpt2-gemm-tuned":  # its GEMM phases, to set beside the default run's
        shown = [q for q in p["phases"] if q["tflops"] is not None and "attention" not in q["name"]]
    else:
        shown = [q for q in p["phases"] if "attention" in q["name"]]
    for q in shown:
        tf = "" if q["tflops"] is None else f"{q['tflops']:8.1f} TFLOP/s"
        print(f"  {q['name']:26} x{q['calls_per_step']:<4g} {q['time_s'] * 1e3:9.3f} ms "
              f"{q['share'] * 100:5.1f}% {tf}")
PY
for f in "$out"/sanitizer-*.txt; do
  [ -f "$f" ] || continue
  printf '%-58s %s\n' "compute-sanitizer $(basename "$f" .txt | cut -d- -f2), bf16 attention test" \
    "$(grep -h -E "(ERROR|RACECHECK) SUMMARY" "$f" | tail -1 | sed 's/^=* *//')"
done
[ "${#skipped[@]}" -eq 0 ] || printf 'gpu-check: skipped (out of time): %s\n' "${skipped[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'gpu-check: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu-check: all passed"
