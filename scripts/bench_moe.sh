#!/usr/bin/env bash
# Mixture of experts against the dense model, in one invocation: the same 4-layer d_model 256
# GPT and global batch (8 sequences of 256 tokens) run as
#   - dense, one process (the reference);
#   - 8 experts, top 2, capacity factor 1.25 (CAPACITY_FACTOR; 4 = E / top_k keeps every choice),
#     one process (twice the dense MLP's FLOPs per token, 4x its MLP parameters);
#   - the same MoE on NPROC ranks as dp (every expert on each rank), as ep = NPROC (each rank
#     8 / NPROC experts, tokens by all-to-all), that with ZeRO 1, 2 and 3 (the dense tensors'
#     state over dp, the experts' over edp), and as tp = NPROC with sequence parallelism (each
#     rank routes 8 / NPROC sequences to every expert), the cores split evenly over the ranks.
# Prints tokens/s and the ratio to the dense run, model FLOPs per token (active parameters), the
# step time p50, the share of rank 0's step in the routing (host), the experts' GEMMs and the ep
# all-to-alls (3 profiled steps), and rank 0's parameter, gradient and optimizer bytes
# (report.json memory.breakdown).
#   scripts/bench_moe.sh [NPROC] [STEPS]
#   Env: BUILD_DIR (default build/), PRECISION (fp32), CAPACITY_FACTOR (1.25)
set -euo pipefail
source "$(dirname "$0")/bench_ranks.sh" "$@"  # root, build, n, steps, precision, out; run
(( 8 % n == 0 )) || { echo "NPROC $n must divide 8 (the experts and the micro-batch)" >&2; exit 2; }
common=(--set model.n_layer=4 --set model.d_model=256 --set model.n_head=4
        --set model.seq_len=256 --set train.steps=$steps --set train.warmup_steps=1
        --set train.eval_every=0 --set logging.every_steps=$steps --set checkpoint.every_steps=0
        --set precision.compute=$precision --set logging.profile_steps=3)
moe=(--set model.moe.num_experts=8 --set model.moe.top_k=2
     --set model.moe.capacity_factor="${CAPACITY_FACTOR:-1.25}")
run dense 1 --set train.micro_batch=8
run moe 1 --set train.micro_batch=8 "${moe[@]}"
run moe_dp "$n" --set train.micro_batch=$((8 / n)) "${moe[@]}"
run moe_ep "$n" --set train.micro_batch=$((8 / n)) "${moe[@]}" --set parallel.ep="$n"
for z in 1 2 3; do
  run moe_ep_z$z "$n" --set train.micro_batch=$((8 / n)) "${moe[@]}" --set parallel.ep="$n" \
    --set parallel.zero=$z
done
run moe_tp "$n" --set train.micro_batch=8 "${moe[@]}" --set parallel.tp="$n" \
  --set parallel.sequence_parallel=true
/usr/bin/python3 - "$out" "$n" "$precision" "${CAPACITY_FACTOR:-1.25}" <<'PY'
import json, sys
out, n, precision, capacity = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
mib = 2 ** 20
ref = json.load(open(f"{out}/dense/report.json"))["throughput"]["tokens_per_second"]
print(f"{precision}, 8 sequences x 256 tokens per step, capacity factor {capacity}; cores split "
      "over the ranks")
print(f"{'layout':>16} {'tokens/s':>9} {'vs dense':>8} {'MFLOP/tok':>9} {'step p50 ms':>11} "
      f"{'routing':>7} {'experts':>7} {'ep a2a':>6} {'params MiB':>10} {'grads MiB':>9} "
      f"{'optim MiB':>9}")
for label, name in [("dense", "dense"), ("moe 8x top2", "moe"), (f"moe dp {n}", "moe_dp"),
                    (f"moe ep {n}", "moe_ep")] + [
                    (f"moe ep {n} zero {z}", f"moe_ep_z{z}") for z in (1, 2, 3)] + [
                    (f"moe tp {n} sp", "moe_tp")]:
    r = json.load(open(f"{out}/{name}/report.json"))
    t, b, phases = r["throughput"], r["memory"]["breakdown"], r["profile"]["phases"]
    share = lambda key: sum(p["share"] for p in phases if p["name"].endswith(key))
    print(f"{label:>16} {t['tokens_per_second']:9.0f} {t['tokens_per_second'] / ref:8.2f} "
          f"{r['model']['flops_per_token'] / 1e6:9.1f} {1e3 * t['step_time_s']['p50']:11.1f} "
          f"{100 * share('.routing'):6.1f}% {100 * share('.experts'):6.1f}% "
          f"{100 * share('.ep_all_to_all'):5.1f}% {b['params'] / mib:10.2f} "
          f"{b['grads'] / mib:9.2f} {b['optimizer'] / mib:9.2f}")
PY
