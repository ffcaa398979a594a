# Pipeline parallelism (each stage n_layer / pp consecutive blocks, the first also the embeddings,
# the last the final norm and the head on a copy of wte; each micro-batch cut into
# parallel.pipeline.microbatches pieces that flow through the stages, their boundary activations
# and gradients sent between neighbours) reproduces the single-process run with the same global
# batch (micro_batch x grad_accum x dp = 8 sequences): losses, grad norms and val losses within
# 1e-5 relative over 20 steps (the pieces' GEMMs sum fewer rows each: fp32 rounding), for
#  - pp 2 with 1F1B and 4 pieces, pp 4 with full recompute, pp 2 with GPipe, pp 2 with selective
#    recompute and grad_accum 2;
#  - dp 2 x pp 2 at ZeRO 0 and 1, and pp 2 x tp 2 with sequence parallelism;
#  - the tied embedding: the first and the last stage's wte gradients are summed (without the
#    sum the copies part and the loss differs by step 2), and the norm counts it once; above pp 2
#    through a buffer a chunk at a time (a 40000-token vocabulary at d_model 128: two chunks);
#  - bf16 (the cpu emulation): step 1 within 1e-5, the loss within 1e-3 over 20 steps.
# 1F1B keeps at most pp - stage pieces' activations on a stage, GPipe all of them: at 4 pieces the
# first stage of pp 2 holds half the activation bytes under 1F1B, and `trainer plan` predicts
# those bytes exactly.
source "$2/tests/lib/dist_common.sh"
l4=(--set model.n_layer=4 --set train.eval_every=10 --set train.eval_batches=2)
fields=(--fields loss,grad_norm,val_loss --rtol 1e-5 --min-steps 20)
pp2=(--set parallel.pp=2 --set parallel.pipeline.microbatches=4)
run_single ref 8 1 20 "${l4[@]}"
run_launch pp2 2 8 1 20 "${l4[@]}" "${pp2[@]}"
compare_metrics ref/metrics.jsonl pp2/metrics.jsonl "${fields[@]}" || fail "pp 2 (1f1b) differs"
run_launch pp4_full 4 8 1 20 "${l4[@]}" --set parallel.pp=4 --set parallel.pipeline.microbatches=8 \
  --set activation_checkpointing=full
compare_metrics ref/metrics.jsonl pp4_full/metrics.jsonl "${fields[@]}" \
  || fail "pp 4 with full recompute differs"
# Above pp 2 the end stages exchange their wte gradients through a buffer of 4 Mi floats, a chunk
# at a time: a vocabulary of 40000 at d_model 128 (40064 x 128 floats) takes two chunks. Uniform
# tokens, so that the second chunk's rows are read by the embedding (a row no token reads would
# hide a chunk left unsummed).
big_vocab=(--set model.vocab_size=40000 --set model.d_model=128 --set model.seq_len=32 "${l4[@]}"
  --set train.eval_every=0 --set data.train=synthetic:uniform --set data.val=synthetic:uniform)
run_single ref_v40k 8 1 8 "${big_vocab[@]}"
run_launch pp4_v40k 4 8 1 8 "${big_vocab[@]}" --set parallel.pp=4 --set parallel.pipeline.microbatches=4
compare_metrics ref_v40k/metrics.jsonl pp4_v40k/metrics.jsonl --fields loss,grad_norm --rtol 1e-5 \
  --min-steps 8 || fail "pp 4 with the tied gradient in two chunks differs"
run_launch pp2_gpipe 2 8 1 20 "${l4[@]}" "${pp2[@]}" --set parallel.pipeline.schedule=gpipe
compare_metrics ref/metrics.jsonl pp2_gpipe/metrics.jsonl "${fields[@]}" || fail "pp 2 (gpipe) differs"
run_launch pp2_sel_ga2 2 4 2 20 "${l4[@]}" --set parallel.pp=2 --set parallel.pipeline.microbatches=2 \
  --set activation_checkpointing=selective
compare_metrics ref/metrics.jsonl pp2_sel_ga2/metrics.jsonl "${fields[@]}" \
  || fail "pp 2 with selective recompute and grad_accum 2 differs"
for z in 0 1; do
  run_launch dp2pp2_z$z 4 4 1 20 "${l4[@]}" --set parallel.pp=2 --set parallel.pipeline.microbatches=2 \
    --set parallel.zero=$z
  compare_metrics ref/metrics.jsonl dp2pp2_z$z/metrics.jsonl "${fields[@]}" \
    || fail "dp 2 x pp 2 at zero $z differs"
done
run_launch pp2sp2 4 8 1 20 "${l4[@]}" "${pp2[@]}" --set parallel.tp=2 \
  --set parallel.sequence_parallel=true
compare_metrics ref/metrics.jsonl pp2sp2/metrics.jsonl "${fields[@]}" \
  || fail "pp 2 x tp 2 with sequence parallelism differs"
grep -q "grid: world 4 = dp 2 x pp 2 x cp 1 x tp 1, zero 1" dp2pp2_z1.log \
  || fail "the banner does not state the grid: $(head -5 dp2pp2_z1.log)"
[ "$(json_get pp2/report.json 'd["parallel"]["pp"], d["parallel"]["pipeline_schedule"], d["parallel"]["microbatches"], d["batch"]["global_batch_sequences"]')" = "2 1f1b 4 8" ] \
  || fail "pp 2 report: $(json_get pp2/report.json 'd["parallel"], d["batch"]')"
/usr/bin/python3 - pp2/report.json pp2_gpipe/report.json <<'PY' || fail "1f1b does not keep fewer activations"
import json, sys
f1b, gpipe = (json.load(open(p))["memory"]["breakdown"]["activations"] for p in sys.argv[1:])
print("first stage's activation bytes at 4 pieces: 1f1b %d, gpipe %d (%.2fx)" % (f1b, gpipe, f1b / gpipe))
assert 0.45 < f1b / gpipe < 0.55, (f1b, gpipe)
PY

p=(--set run.deterministic=true --set model.seq_len=32 --set precision.compute=bf16 "${l4[@]}")
run_single ref_bf16 8 1 20 "${p[@]}"
run_launch pp2_bf16 2 8 1 20 "${p[@]}" "${pp2[@]}"
compare_metrics ref_bf16/metrics.jsonl pp2_bf16/metrics.jsonl --first-steps 1 --rtol 1e-5 \
  || fail "bf16 pp 2 differs from one process at step 1"
compare_metrics ref_bf16/metrics.jsonl pp2_bf16/metrics.jsonl --fields loss --rtol 1e-3 \
  --min-steps 20 || fail "bf16 pp 2 drifts from one process"

# plan: the activations it predicts for the heaviest stage (here the first: 2 of the 4 pieces in
# flight) are what that stage's rank allocated (rank 0's report).
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${l4[@]}" "${pp2[@]}" \
  --set train.micro_batch=8 >plan.txt || { cat plan.txt; fail "plan of pp 2 failed"; }
grep -q "bubble 20.0% of a step" plan.txt || { cat plan.txt; fail "plan does not state the bubble"; }
planned=$(sed -n 's/^activations per rank (2 pieces in flight on stage 0, .*: \([0-9]*\) B .*/\1/p' plan.txt)
[ -n "$planned" ] || { cat plan.txt; fail "plan does not give stage 0's activations"; }
[ "$planned" = "$(json_get pp2/report.json 'd["memory"]["breakdown"]["activations"]')" ] \
  || fail "plan says $planned activation bytes; the pp 2 run allocated $(json_get pp2/report.json 'd["memory"]["breakdown"]')"
# and the gradients it says that stage holds: its layers' and the other end's wte gradient
planned=$(sed -n 's/^model state per rank as this runtime holds it .*: params [0-9]* B, grads \([0-9]*\) B.*/\1/p' plan.txt)
[ -n "$planned" ] && [ "$planned" = "$(json_get pp2/report.json 'd["memory"]["breakdown"]["grads"]')" ] \
  || fail "plan says grads '$planned' B; the pp 2 run held $(json_get pp2/report.json 'd["memory"]["breakdown"]')"

# A profiled pp step shows the time a stage waits in its exchanges (and the tied sum) as phases.
run_launch pp2_prof 2 8 1 6 "${l4[@]}" "${pp2[@]}" --set logging.profile_steps=2 --set parallel.zero=0
/usr/bin/python3 - pp2_prof/report.json <<'PY' || fail "the pp profile lacks the exchange phases"
import json, sys
names = {p["name"] for p in json.load(open(sys.argv[1]))["profile"]["phases"]}
want = {"pp.recv_backward", "pp.send_forward", "pp.send_forward_recv_backward"}
assert want <= names, sorted(names)
print("pp phases in the first stage's profile:", sorted(n for n in names if n.startswith("pp")))
PY
