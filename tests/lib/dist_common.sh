# Multi-process helpers: a small model (fast on 2 cores) and the single-process reference run.
source "$2/tests/lib/common.sh"
# Every run here faults on a read or write of memory that ZeRO released (the cpu backend's
# fault_released), as the cuda backend's unmapped granules would: a ZeRO 2/3 path that touches a
# released range before acquiring it crashes instead of reading zeros.
export TRAINER_TEST_FAULT_RELEASED=1
# 2 layers, d_model 64, every step logged; tiny buckets so several all-reduces overlap backward.
small=(--set model.n_layer=2 --set model.d_model=64 --set logging.every_steps=1
       --set train.eval_every=0 --set train.warmup_steps=5 --set parallel.bucket_mb=0.1)
# run_single OUT MICRO_BATCH GRAD_ACCUM STEPS [extra args]
run_single() {
  local out=$1 mb=$2 ga=$3 steps=$4; shift 4
  "$bin" train "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=$steps \
    --set train.micro_batch=$mb --set train.grad_accum=$ga --out "$out" "$@" >"$out.log" 2>&1 \
    || { cat "$out.log"; fail "single-process run $out failed"; }
}
# run_launch OUT NPROC MICRO_BATCH GRAD_ACCUM STEPS [extra args]
run_launch() {
  local out=$1 n=$2 mb=$3 ga=$4 steps=$5; shift 5
  "$bin" launch --nproc-per-node "$n" "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=$steps \
    --set train.micro_batch=$mb --set train.grad_accum=$ga --out "$out" "$@" >"$out.log" 2>&1 \
    || { cat "$out.log"; fail "launch run $out failed"; }
}
# check_layout NAME NPROC MICRO_BATCH GRAD_ACCUM [args]: runs NAME (20 steps, the caller's s=(...)
# settings) and compares it with the reference run ref/ over the caller's fields=(...)
check_layout() {
  local name=$1 n=$2 mb=$3 ga=$4
  shift 4
  run_launch "$name" "$n" "$mb" "$ga" 20 "${s[@]}" "$@"
  echo "$name:"
  compare_metrics ref/metrics.jsonl "$name/metrics.jsonl" "${fields[@]}" \
    || fail "$name differs from one process"
}
# free_port [LO HI]: a random port in [LO, HI) that is free together with the next one (a
# torchrun-style run puts our store on MASTER_PORT+1). The default range lies below the kernel's
# ephemeral ports, so concurrent tests and their connections do not hand out neighbours.
free_port() {
  /usr/bin/python3 - "${1:-10000}" "${2:-20000}" <<'PY'
import random, socket, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
for _ in range(200):
    p = random.randrange(lo, hi - 1)
    try:
        for q in (p, p + 1):
            s = socket.socket()
            s.bind(("127.0.0.1", q))
            s.close()
    except OSError:
        continue
    print(p)
    sys.exit(0)
sys.exit("no free port pair in [%d, %d)" % (lo, hi))
PY
}
