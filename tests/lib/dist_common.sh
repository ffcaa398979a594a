# Multi-process helpers: a small model (fast on 2 cores) and the single-process reference run.
source "$2/tests/lib/common.sh"
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
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
