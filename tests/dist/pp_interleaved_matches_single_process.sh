# The interleaved pipeline schedule (parallel.pipeline.schedule = interleaved; each stage holds
# virtual_stages model chunks, stage s the chunks s, s + pp, ...; Megatron's interleaved 1F1B
# order, its exchanges batched around the ring of stages) reproduces the single-process run with
# the same global batch (8 sequences): losses, grad norms and val losses within 1e-5 relative over
# 20 steps, for
#  - pp 2 with 2 chunks of 1 layer and 4 pieces, and with 2 pieces (= pp: every forward is warm-up);
#  - pp 2 with 4 chunks of 1 layer (n_layer 8), and pp 4 with 2 chunks under full recompute;
#  - pp 2 x 2 chunks with selective recompute and grad_accum 2 (gradients accumulate over calls);
#  - dp 2 x pp 2 x 2 chunks at ZeRO 0 (the gradient buckets hear of a chunk's gradients only at its
#    last piece's backward) and ZeRO 1, and pp 2 x 2 chunks x tp 2 with sequence parallelism;
#  - bf16 (the cpu emulation): step 1 within 1e-5, the loss within 1e-3 over 20 steps.
# A checkpoint of an interleaved run resumes bit-identically as the same layout, and as 1f1b
# within 1e-5 (the checkpoint holds global tensors, whatever chunks the ranks held); a 1f1b
# checkpoint resumes as interleaved the same way. `trainer plan` predicts the first stage's
# activation bytes (a slot per piece in flight at once, of any chunk, and the inbox an output
# gradient waits in) as allocated, and its bubble, (pp - 1) / (v * pieces + pp - 1); the report
# says the schedule and the chunks, and `trainer compare` the bubble; a profiled step shows the
# batched exchanges as phases.
source "$2/tests/lib/dist_common.sh"
l4=(--set model.n_layer=4 --set train.eval_every=10 --set train.eval_batches=2)
l8=(--set model.n_layer=8 --set train.eval_every=10 --set train.eval_batches=2)
fields=(--fields loss,grad_norm,val_loss --rtol 1e-5 --min-steps 20)
il=(--set parallel.pipeline.schedule=interleaved)
v2=("${il[@]}" --set parallel.pipeline.virtual_stages=2)
run_single ref 8 1 20 "${l4[@]}"
run_launch pp2v2 2 8 1 20 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=4
compare_metrics ref/metrics.jsonl pp2v2/metrics.jsonl "${fields[@]}" || fail "pp 2 x 2 chunks differs"
run_launch pp2v2_m2 2 8 1 20 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=2
compare_metrics ref/metrics.jsonl pp2v2_m2/metrics.jsonl "${fields[@]}" \
  || fail "pp 2 x 2 chunks with 2 pieces (all warm-up) differs"
run_launch pp2v2_sel_ga2 2 4 2 20 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=2 --set activation_checkpointing=selective
compare_metrics ref/metrics.jsonl pp2v2_sel_ga2/metrics.jsonl "${fields[@]}" \
  || fail "pp 2 x 2 chunks with selective recompute and grad_accum 2 differs"
for z in 0 1; do
  run_launch dp2pp2v2_z$z 4 4 1 20 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
    --set parallel.pipeline.microbatches=2 --set parallel.zero=$z
  compare_metrics ref/metrics.jsonl dp2pp2v2_z$z/metrics.jsonl "${fields[@]}" \
    || fail "dp 2 x pp 2 x 2 chunks at zero $z differs"
done
run_launch pp2v2sp2 4 8 1 20 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=4 --set parallel.tp=2 --set parallel.sequence_parallel=true
compare_metrics ref/metrics.jsonl pp2v2sp2/metrics.jsonl "${fields[@]}" \
  || fail "pp 2 x 2 chunks x tp 2 with sequence parallelism differs"

run_single ref8 8 1 20 "${l8[@]}"
run_launch pp2v4 2 8 1 20 "${l8[@]}" "${il[@]}" --set parallel.pipeline.virtual_stages=4 \
  --set parallel.pp=2 --set parallel.pipeline.microbatches=4
compare_metrics ref8/metrics.jsonl pp2v4/metrics.jsonl "${fields[@]}" || fail "pp 2 x 4 chunks differs"
run_launch pp4v2_full 4 8 1 20 "${l8[@]}" "${v2[@]}" --set parallel.pp=4 \
  --set parallel.pipeline.microbatches=8 --set activation_checkpointing=full
compare_metrics ref8/metrics.jsonl pp4v2_full/metrics.jsonl "${fields[@]}" \
  || fail "pp 4 x 2 chunks with full recompute differs"

p=(--set run.deterministic=true --set model.seq_len=32 --set precision.compute=bf16 "${l4[@]}")
run_single ref_bf16 8 1 20 "${p[@]}"
run_launch pp2v2_bf16 2 8 1 20 "${p[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=4
compare_metrics ref_bf16/metrics.jsonl pp2v2_bf16/metrics.jsonl --first-steps 1 --rtol 1e-5 \
  || fail "bf16 pp 2 x 2 chunks differs from one process at step 1"
compare_metrics ref_bf16/metrics.jsonl pp2v2_bf16/metrics.jsonl --fields loss --rtol 1e-3 \
  --min-steps 20 || fail "bf16 pp 2 x 2 chunks drifts from one process"

[ "$(json_get pp2v2/report.json 'd["parallel"]["pipeline_schedule"], d["parallel"]["virtual_stages"], d["parallel"]["microbatches"]')" = "interleaved 2 4" ] \
  || fail "pp 2 x 2 chunks report: $(json_get pp2v2/report.json 'd["parallel"]')"
"$bin" compare ref/report.json pp2v2/report.json >compare.txt || { cat compare.txt; fail "compare failed"; }
grep -q "| interleaved x2, 4 pieces, bubble 11.1%" compare.txt \
  || { cat compare.txt; fail "compare does not state the schedule, its chunks and its bubble"; }

# Resume: steps 21..25 after a checkpoint at step 20, global batch 8 (4 x grad_accum 2).
source "$2/tests/lib/ckpt_common.sh"
seq=(--set model.n_layer=4 --set model.seq_len=32 --set checkpoint.every_steps=20
     --set checkpoint.keep=5 --set parallel.pipeline.microbatches=2 --set parallel.pp=2)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
run_launch ck_v2 2 4 2 25 "${seq[@]}" "${v2[@]}" --set checkpoint.dir=ck_v2
tail_of ck_v2/metrics.jsonl >v2_tail.jsonl
check_saved_once ck_v2/step_00000020/manifest.json
run_launch v2_from_v2 2 4 2 25 "${seq[@]}" "${v2[@]}" "${dst[@]}" --resume ck_v2/step_00000020
check_resumed v2_from_v2 v2_tail.jsonl --exact
run_launch f1b_from_v2 2 4 2 25 "${seq[@]}" "${dst[@]}" --resume ck_v2/step_00000020
check_resumed f1b_from_v2 v2_tail.jsonl --rtol 1e-5
run_launch ck_f1b 2 4 2 25 "${seq[@]}" --set checkpoint.dir=ck_f1b
tail_of ck_f1b/metrics.jsonl >f1b_tail.jsonl
run_launch v2_from_f1b 2 4 2 25 "${seq[@]}" "${v2[@]}" "${dst[@]}" --resume ck_f1b/step_00000020
check_resumed v2_from_f1b f1b_tail.jsonl --rtol 1e-5

# plan: stage 0's activations (5 slots: at most 5 pieces of its two chunks are in flight at once,
# Megatron's (pp - 1) * 2 + (v - 1) * pp warm-up forwards and one) and the bubble,
# (2 - 1) / (2 * 4 + 2 - 1) = 11.1%, against the pp2v2 run's rank 0.
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${l4[@]}" "${v2[@]}" \
  --set parallel.pp=2 --set parallel.pipeline.microbatches=4 --set train.micro_batch=8 \
  >plan.txt || { cat plan.txt; fail "plan of pp 2 x 2 chunks failed"; }
grep -q "in 2 chunks of 1 .*interleaved over 4 pieces .*bubble 11.1% of a step" plan.txt \
  || { cat plan.txt; fail "plan does not state the chunks and the bubble"; }
planned=$(sed -n 's/^activations per rank (5 pieces in flight on stage 0 over its 2 chunks, .*: \([0-9]*\) B .*/\1/p' plan.txt)
[ -n "$planned" ] || { cat plan.txt; fail "plan does not give stage 0's activations"; }
[ "$planned" = "$(json_get pp2v2/report.json 'd["memory"]["breakdown"]["activations"]')" ] \
  || fail "plan says $planned activation bytes; the run allocated $(json_get pp2v2/report.json 'd["memory"]["breakdown"]')"

run_launch pp2v2_prof 2 8 1 6 "${l4[@]}" "${v2[@]}" --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=4 --set logging.profile_steps=2
/usr/bin/python3 - pp2v2_prof/report.json <<'PY' || fail "the profile lacks the batched exchanges"
import json, sys
names = {p["name"] for p in json.load(open(sys.argv[1]))["profile"]["phases"]}
want = {"pp.send_forward_send_backward_recv_forward_recv_backward", "pp.send_forward_recv_forward"}
assert want <= names, sorted(names)
print("pp phases in the first stage's profile:", sorted(n for n in names if n.startswith("pp")))
PY
echo "interleaved: all layouts match one process; resumes and plan agree"
