# Mixture of experts (model.moe: 4 experts per block, top 2, capacity factor 1: some choices are
# dropped) reproduces the single-process run with the same global batch (8 sequences of 32 tokens):
# losses, grad norms, the load-balancing loss and the dropped share within 1e-5 relative over 20
# steps, for
#  - the experts replicated (ep 1) on dp 2 at ZeRO 0, 1 and 3, and on pp 2 (1f1b, and
#    interleaved with 2 chunks a stage: 4 layers against a 4-layer run);
#  - expert parallelism: ep 2 (each rank holds 2 experts; tokens reach the others' by
#    all-to-all), dp 4 x ep 2 (the expert gradients summed over the edp pairs), ep 4, ep 2 with
#    grad_accum 2 and selective recompute, with full recompute, and ep 2 on each of 2 pipeline
#    stages;
#  - bf16 (the cpu emulation) at ep 2: step 1 within 1e-5 of one process, and every step equal
#    to dp 2 with the experts replicated (see below).
# An ep 2 checkpoint holds every tensor once (ep rank 1 saves its experts only) and resumes
# bit-identically as ep 2, and as one process and as ep 4 within 1e-5; `ckpt reshard --to
# dp=4,ep=2` writes it as that grid's ranks own it, and it resumes so. `trainer plan` predicts
# the model state and the activations an ep rank allocates, and counts the all-to-alls.
source "$2/tests/lib/moe_common.sh"  # moe, s, ref, check_moe
for z in 0 1 3; do
  check_moe dp2_z$z 2 4 1 --set parallel.zero=$z
done
check_moe pp2 2 8 1 --set parallel.pp=2 --set parallel.pipeline.microbatches=2
run_single ref4 8 1 20 "${s[@]}" --set model.n_layer=4
run_launch pp2_interleaved 2 8 1 20 "${s[@]}" --set model.n_layer=4 --set parallel.pp=2 \
  --set parallel.pipeline.schedule=interleaved --set parallel.pipeline.virtual_stages=2 \
  --set parallel.pipeline.microbatches=2
echo "pp2_interleaved:"
compare_metrics ref4/metrics.jsonl pp2_interleaved/metrics.jsonl "${fields[@]}" \
  || fail "pp2_interleaved differs from one process"
check_moe ep2 2 4 1 --set parallel.ep=2
check_moe dp4ep2 4 2 1 --set parallel.ep=2
check_moe ep4 4 2 1 --set parallel.ep=4
check_moe ep2_sel_ga2 2 2 2 --set parallel.ep=2 --set activation_checkpointing=selective
check_moe ep2_full 2 4 1 --set parallel.ep=2 --set activation_checkpointing=full
check_moe pp2ep2 4 4 1 --set parallel.ep=2 --set parallel.pp=2 --set parallel.pipeline.microbatches=2

# the statistics are there and say something: the balance loss near its floor (aux_loss_coef x
# n_layer x 1 when balanced), and some choices dropped
/usr/bin/python3 - ref/metrics.jsonl <<'PY' || fail "ref's mixture-of-experts statistics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
aux = [r["moe_aux_loss"] for r in rows]
dropped = [r["moe_dropped_fraction"] for r in rows]
assert all(0.02 <= a < 0.04 for a in aux), aux
assert max(dropped) > 0 and all(0 <= d < 0.5 for d in dropped), dropped
PY
[ "$(json_get ep2/report.json 'd["stability"]["moe"]["dropped_fraction"]["max"] > 0')" = True ] \
  || fail "ep 2 report: $(json_get ep2/report.json 'd["stability"]')"
[ "$(json_get ep2/report.json 'd["parallel"]["ep"], d["model"]["num_experts"], d["model"]["top_k"], d["model"]["capacity_factor"]')" = "2 4 2 1.0" ] \
  || fail "ep 2 report: $(json_get ep2/report.json 'd["parallel"], d["model"]')"
grep -q "experts: 4 per block, top 2 per token" ep2.log || { cat ep2.log; fail "no experts line"; }

# bf16: a weight one bf16 step apart (the dp sum's order) can flip a token's choice or a
# capacity drop, after which the runs part like any two seeds would; so step 1 against one
# process, and ep 2 against the same dp 2 with every expert on each rank, bit for bit (the
# tokens' rows cross ranks, and come back, unchanged; without clipping, since the two sum the
# gradient's norm in different orders, and a clipped step would carry that last bit into the
# weights).
b=(--set run.deterministic=true --set precision.compute=bf16 --set train.grad_clip=0)
run_single ref_bf16 8 1 20 "${s[@]}" "${b[@]}"
run_launch dp2_bf16 2 4 1 20 "${s[@]}" "${b[@]}"
run_launch ep2_bf16 2 4 1 20 "${s[@]}" "${b[@]}" --set parallel.ep=2
compare_metrics ref_bf16/metrics.jsonl ep2_bf16/metrics.jsonl --first-steps 1 --rtol 1e-5 \
  || fail "bf16 ep 2 differs from one process at step 1"
compare_metrics dp2_bf16/metrics.jsonl ep2_bf16/metrics.jsonl --exact --min-steps 20 \
  --fields loss,val_loss,moe_aux_loss,moe_dropped_fraction || fail "bf16 ep 2 differs from dp 2"
compare_metrics dp2_bf16/metrics.jsonl ep2_bf16/metrics.jsonl --fields grad_norm --rtol 1e-7 \
  --min-steps 20 || fail "bf16 ep 2's grad norm differs from dp 2's"

# Resume: steps 21..25 after a checkpoint at step 20, global batch 8 (4 x grad_accum 2).
source "$2/tests/lib/ckpt_common.sh"
ck=(--set model.seq_len=32 "${moe[@]}" --set checkpoint.every_steps=20 --set checkpoint.keep=5)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
run_launch ck_ep2 2 2 2 25 "${ck[@]}" --set parallel.ep=2 --set checkpoint.dir=ck_ep2
tail_of ck_ep2/metrics.jsonl >ep2_tail.jsonl
check_saved_once ck_ep2/step_00000020/manifest.json
run_launch ep2_from_ep2 2 2 2 25 "${ck[@]}" --set parallel.ep=2 "${dst[@]}" --resume ck_ep2/step_00000020
check_resumed ep2_from_ep2 ep2_tail.jsonl --exact
"$bin" train "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=25 --set train.micro_batch=4 \
  --set train.grad_accum=2 "${ck[@]}" "${dst[@]}" --resume ck_ep2/step_00000020 --out one_from_ep2 \
  >one_from_ep2.log 2>&1 || { cat one_from_ep2.log; fail "one process from the ep 2 checkpoint failed"; }
check_resumed one_from_ep2 ep2_tail.jsonl --rtol 1e-5
run_launch ep4_from_ep2 4 1 2 25 "${ck[@]}" --set parallel.ep=4 "${dst[@]}" --resume ck_ep2/step_00000020
check_resumed ep4_from_ep2 ep2_tail.jsonl --rtol 1e-5
# resharded for dp 4 x ep 2 (ranks 0 and 1 own the two halves of the experts, rank 0 the rest)
"$bin" ckpt reshard ck_ep2/step_00000020 --to dp=4,ep=2 --out rs >rs.txt \
  || { cat rs.txt; fail "reshard to dp=4,ep=2 failed"; }
check_saved_once rs/step_00000020/manifest.json
"$bin" ckpt inspect rs/step_00000020 >inspect.txt || { cat inspect.txt; fail "inspect of rs failed"; }
grep -q "ep 2, zero 0" inspect.txt || { cat inspect.txt; fail "the resharded grid does not say ep 2"; }
run_launch dp4ep2_from_rs 4 1 2 25 "${ck[@]}" --set parallel.ep=2 "${dst[@]}" --resume rs/step_00000020
check_resumed dp4ep2_from_rs ep2_tail.jsonl --rtol 1e-5

# plan: an ep rank's model state and activations as allocated (the ep2 run's rank 0), and its
# all-to-alls (2 blocks x 4)
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${s[@]}" --set parallel.ep=2 \
  --set train.micro_batch=4 >plan.txt || { cat plan.txt; fail "plan of ep 2 failed"; }
planned=$(sed -n 's/^activations per rank (micro_batch 4 x 32 tokens.*: \([0-9]*\) B .*/\1/p' plan.txt)
[ -n "$planned" ] || { cat plan.txt; fail "plan does not give an ep rank's activations"; }
[ "$planned" = "$(json_get ep2/report.json 'd["memory"]["breakdown"]["activations"]')" ] \
  || fail "plan says $planned activation bytes; the run allocated $(json_get ep2/report.json 'd["memory"]["breakdown"]')"
params=$(sed -n 's/^memory per rank .*: params \([0-9]*\) B, .*/\1/p' plan.txt)
[ "$params" = "$(json_get ep2/report.json 'd["memory"]["breakdown"]["params"]')" ] \
  || fail "plan says $params param bytes; the run allocated $(json_get ep2/report.json 'd["memory"]["breakdown"]')"
[ "$params" -lt "$(json_get dp2_z0/report.json 'd["memory"]["breakdown"]["params"]')" ] \
  || fail "an ep 2 rank holds as many parameters as an ep 1 rank"
grep -q "^ep traffic per rank per step: 8 all-to-alls" plan.txt \
  || { cat plan.txt; fail "plan does not count the all-to-alls (2 blocks x 4)"; }

# Dropless (model.moe.capacity_factor: null, Megatron's dropless): every choice kept, an expert
# taking up to a whole sequence. At ep 2 every step equals capacity factor 2 (= E / top_k: the
# same capacity of T a sequence) bit for bit, with nothing dropped; its checkpoint says null and
# resumes bit-identically.
dl=(--set model.seq_len=32 --set model.moe.num_experts=4 --set model.moe.top_k=2
    --set parallel.ep=2)
run_launch dropless 2 4 1 20 "${dl[@]}" --set model.moe.capacity_factor=null \
  --set checkpoint.every_steps=10 --set checkpoint.dir=ck_dl
run_launch capacity2 2 4 1 20 "${dl[@]}" --set model.moe.capacity_factor=2
compare_metrics capacity2/metrics.jsonl dropless/metrics.jsonl --exact --min-steps 20 \
  --fields loss,grad_norm,moe_aux_loss,moe_dropped_fraction || fail "dropless differs from capacity 2"
[ "$(json_get dropless/report.json 'd["stability"]["moe"]["dropped_fraction"]["max"]')" = 0.0 ] \
  || fail "dropless dropped choices: $(json_get dropless/report.json 'd["stability"]["moe"]')"
[ "$(json_get dropless/report.json 'd["model"]["capacity_factor"], d["model"]["top_k"]')" = "None 2" ] \
  || fail "dropless report: $(json_get dropless/report.json 'd["model"]')"
[ "$(json_get ck_dl/step_00000010/manifest.json 'd["model"]["moe"]["capacity_factor"]')" = None ] \
  || fail "the dropless checkpoint's capacity factor: $(json_get ck_dl/step_00000010/manifest.json 'd["model"]')"
run_launch dropless_resumed 2 4 1 20 "${dl[@]}" --set model.moe.capacity_factor=null \
  --set checkpoint.dir=unused --set checkpoint.every_steps=0 --resume ck_dl/step_00000010
grep -q "resumed from" dropless_resumed.log || { cat dropless_resumed.log; fail "no resume"; }
tail -10 dropless/metrics.jsonl >dropless_tail.jsonl
compare_metrics dropless_tail.jsonl dropless_resumed/metrics.jsonl --exact --min-steps 10 \
  || fail "the resumed dropless run differs from the uninterrupted one"
echo "moe: all layouts match one process; resumes and plan agree"
