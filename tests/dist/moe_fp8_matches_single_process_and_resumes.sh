# precision.compute: fp8 with a mixture of experts (the cpu backend's emulation, through the
# TRAINER_TEST_EMULATED_FP8 test hook): the attention's two linear layers and each expert's two
# quantize with their own delayed-scaling states (Transformer Engine's GroupedLinear). An expert's
# amaxes are reduced over the ranks that hold it (its dp / ep replicas and the tp ranks, which
# route different rows to it), so every rank scales as one process does. 4 experts, top 2,
# capacity factor 1 (some choices dropped), global batch 8 sequences of 32 tokens:
#  - the fp8 states after step 1 equal one process's to 1e-6 relative (0 measured) at dp 2 with
#    ZeRO 3 (the experts replicated, their weights' first scales from the owned shards), ep 2,
#    dp 4 x ep 2 (each expert on two ranks), tp 2 with sequence parallelism and pp 2; without the
#    experts' amax reduction over their replicas dp 4 x ep 2's are off by up to 1.7e-1, and with
#    the experts' amaxes reduced over the dense layers' group (ep ranks' experts mixed) ep 2's
#    by 1.4e-1;
#  - the losses: step 1 within 1e-6 (5e-9 measured), the grad norm within 3e-5 (3.1e-6), then
#    the loss within 3e-3 over 20 steps (0.8e-3 to 1.9e-3 measured; bf16 compute's own drift
#    on these layouts is 0.8e-3 to 1.4e-3: a flipped rounding can flip a routing choice, and
#    fp8 scales the flips up: fp8_pp_matches_single_process_and_resumes.sh);
#  - 10 + --resume auto + 10 steps at ep 2 are bit-identical to 20 straight, and the ep 2
#    checkpoint (each ep rank saves its experts' states) resumed as one process gives ep 2's
#    step 11 loss within 1e-6.
source "$2/tests/lib/dist_common.sh"
export TRAINER_TEST_EMULATED_FP8=1
moe=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.capacity_factor=1.0)
s=(--set model.seq_len=32 --set run.deterministic=true --set precision.compute=fp8 "${moe[@]}")
one_step=(--set checkpoint.every_steps=1 --set train.stop_after_steps=1)
layouts=(
  "dp2z3 2 4 --set parallel.zero=3"
  "ep2 2 4 --set parallel.ep=2"
  "dp4ep2 4 2 --set parallel.ep=2"
  "tp2sp 2 8 --set parallel.tp=2 --set parallel.sequence_parallel=true"
  "pp2 2 8 --set parallel.pp=2 --set parallel.pipeline.microbatches=2"
)
run_single ref 8 1 20 "${s[@]}"
run_single ref_1 8 1 20 "${s[@]}" "${one_step[@]}" --set checkpoint.dir=ck_ref
for layout in "${layouts[@]}"; do
  read -r name n mb args <<<"$layout"
  # shellcheck disable=SC2086  # (args: the layout's settings, word-split)
  run_launch $name $n $mb 1 20 "${s[@]}" $args
  run_launch ${name}_1 $n $mb 1 20 "${s[@]}" $args "${one_step[@]}" --set checkpoint.dir=ck_$name
  echo "$name vs one process:"
  /usr/bin/python3 - ck_ref/step_00000001/manifest.json ck_$name/step_00000001/manifest.json <<'PY' \
    || fail "$name's fp8 states after step 1 differ from one process's"
import json, sys
a, b = (json.load(open(p))["fp8_scaling"] for p in sys.argv[1:])
assert len(a) == len(b) == (2 * 4 + 2 * 4 * 2) * 36, (len(a), len(b))
worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
print(f"fp8 states after step 1: worst relative difference {worst:.3e}")
assert worst <= 1e-6
PY
  head -1 ref/metrics.jsonl >ref1.jsonl
  head -1 $name/metrics.jsonl >${name}_first.jsonl
  compare_metrics ref1.jsonl ${name}_first.jsonl --fields loss,moe_aux_loss,moe_dropped_fraction \
    --rtol 1e-6 --min-steps 1 || fail "fp8 $name's first loss differs from one process's"
  compare_metrics ref1.jsonl ${name}_first.jsonl --fields grad_norm --rtol 3e-5 --min-steps 1 \
    || fail "fp8 $name's first grad norm differs from one process's"
  compare_metrics ref/metrics.jsonl $name/metrics.jsonl --fields loss --rtol 3e-3 --min-steps 20 \
    || fail "fp8 $name drifts from one process"
done

ck=(--set checkpoint.dir=ck --set checkpoint.every_steps=10)
run_launch p1 2 4 1 20 "${s[@]}" --set parallel.ep=2 "${ck[@]}" --set train.stop_after_steps=10
run_launch p2 2 4 1 20 "${s[@]}" --set parallel.ep=2 "${ck[@]}" --resume auto
check_fp8_resumed p2 ck/step_00000010
check_resume_exact ep2/metrics.jsonl p1/metrics.jsonl p2/metrics.jsonl 20 "fp8 ep 2 run"
echo "fp8 ep 2: 20 losses bit-identical across the resume"
run_single one 8 1 20 "${s[@]}" --set checkpoint.dir=unused --resume ck/step_00000010
check_fp8_resumed one ck/step_00000010
grep '"step":11,' ep2/metrics.jsonl >ep2_11.jsonl
head -1 one/metrics.jsonl >one_11.jsonl
compare_metrics ep2_11.jsonl one_11.jsonl --fields loss --rtol 1e-6 --min-steps 1 \
  || fail "the ep 2 fp8 checkpoint resumed as one process differs at step 11"
