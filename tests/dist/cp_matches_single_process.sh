# Context parallelism (parallel.cp: each sequence cut into 2 * cp chunks, rank r running chunks r
# and 2cp - 1 - r; each block's qkv all-gathered over cp for attention, its gradient
# reduce-scattered back; the gradients reduced over dp x cp) reproduces the single-process run
# with the same global batch (8 sequences of 32 tokens): losses, grad norms and val losses within
# 1e-5 relative over 20 steps, for
#  - cp 2 and cp 4 (8 chunks of 4 tokens);
#  - cp 2 with selective recompute and grad_accum 2, and with full recompute;
#  - dp 2 x cp 2 at ZeRO 0 and ZeRO 1 (the optimizer sharded over the 4 replicas), and cp 2 at
#    ZeRO 3 (sharded over the cp pair);
#  - cp 2 x tp 2 with sequence parallelism, and cp 2 x pp 2 (1f1b);
#  - bf16 (the cpu emulation): step 1 within 1e-5, the loss within 1e-3 over 20 steps.
# A cp 2 checkpoint resumes bit-identically as cp 2, and as one process within 1e-5 (the cp ranks
# are replicas: the checkpoint holds the same global tensors); `ckpt reshard --to
# dp=2,cp=2,zero=1` writes it as that grid's 4 ranks own it, and it resumes so within 1e-5. `trainer plan` predicts the
# activation bytes a cp rank allocates (its T / cp tokens, the probabilities over the whole
# sequence, the gathered qkv); the report says cp.
source "$2/tests/lib/dist_common.sh"
s=(--set model.seq_len=32 --set train.eval_every=10 --set train.eval_batches=2)
fields=(--fields loss,grad_norm,val_loss --rtol 1e-5 --min-steps 20)
run_single ref 8 1 20 "${s[@]}"
check_cp() { check_layout "$@"; }  # NAME NPROC MICRO_BATCH GRAD_ACCUM [args] against ref
check_cp cp2 2 8 1 --set parallel.cp=2
check_cp cp4 4 8 1 --set parallel.cp=4
check_cp cp2_sel_ga2 2 4 2 --set parallel.cp=2 --set activation_checkpointing=selective
check_cp cp2_full 2 8 1 --set parallel.cp=2 --set activation_checkpointing=full
for z in 0 1; do
  check_cp dp2cp2_z$z 4 4 1 --set parallel.cp=2 --set parallel.zero=$z
done
check_cp cp2_z3 2 8 1 --set parallel.cp=2 --set parallel.zero=3
check_cp cp2tp2sp 4 8 1 --set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true
check_cp cp2pp2 4 8 1 --set parallel.cp=2 --set parallel.pp=2 --set parallel.pipeline.microbatches=2

b=(--set run.deterministic=true --set precision.compute=bf16)
run_single ref_bf16 8 1 20 "${s[@]}" "${b[@]}"
run_launch cp2_bf16 2 8 1 20 "${s[@]}" "${b[@]}" --set parallel.cp=2
compare_metrics ref_bf16/metrics.jsonl cp2_bf16/metrics.jsonl --first-steps 1 --rtol 1e-5 \
  || fail "bf16 cp 2 differs from one process at step 1"
compare_metrics ref_bf16/metrics.jsonl cp2_bf16/metrics.jsonl --fields loss --rtol 1e-3 \
  --min-steps 20 || fail "bf16 cp 2 drifts from one process"

[ "$(json_get cp2/report.json 'd["parallel"]["cp"], d["parallel"]["dp"], d["batch"]["tokens_per_step"]')" = "2 1 256" ] \
  || fail "cp 2 report: $(json_get cp2/report.json 'd["parallel"], d["batch"]')"
grep -q "grid: world 2 = dp 1 x pp 1 x cp 2 x tp 1" cp2.log || { cat cp2.log; fail "no cp grid line"; }

# Resume: steps 21..25 after a checkpoint at step 20, global batch 8 (4 x grad_accum 2).
source "$2/tests/lib/ckpt_common.sh"
ck=(--set model.seq_len=32 --set checkpoint.every_steps=20 --set checkpoint.keep=5)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
run_launch ck_cp2 2 4 2 25 "${ck[@]}" --set parallel.cp=2 --set checkpoint.dir=ck_cp2
tail_of ck_cp2/metrics.jsonl >cp2_tail.jsonl
check_saved_once ck_cp2/step_00000020/manifest.json
run_launch cp2_from_cp2 2 4 2 25 "${ck[@]}" --set parallel.cp=2 "${dst[@]}" --resume ck_cp2/step_00000020
check_resumed cp2_from_cp2 cp2_tail.jsonl --exact
"$bin" train "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=25 --set train.micro_batch=4 \
  --set train.grad_accum=2 "${ck[@]}" "${dst[@]}" --resume ck_cp2/step_00000020 --out one_from_cp2 \
  >one_from_cp2.log 2>&1 || { cat one_from_cp2.log; fail "one process from the cp 2 checkpoint failed"; }
check_resumed one_from_cp2 cp2_tail.jsonl --rtol 1e-5
# resharded for dp 2 x cp 2 at ZeRO 1 (the optimizer in 4 shards over the dp x cp replicas)
"$bin" ckpt reshard ck_cp2/step_00000020 --to dp=2,cp=2,zero=1 --out rs >rs.txt \
  || { cat rs.txt; fail "reshard to dp=2,cp=2,zero=1 failed"; }
check_saved_once rs/step_00000020/manifest.json
run_launch dp2cp2_from_rs 4 2 2 25 "${ck[@]}" --set parallel.cp=2 --set parallel.zero=1 \
  "${dst[@]}" --resume rs/step_00000020
check_resumed dp2cp2_from_rs cp2_tail.jsonl --rtol 1e-5

# plan: a cp rank's activations as allocated (the cp2 run's rank 0), and its cp traffic
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${s[@]}" --set parallel.cp=2 \
  --set train.micro_batch=8 >plan.txt || { cat plan.txt; fail "plan of cp 2 failed"; }
planned=$(sed -n 's/^activations per rank (micro_batch 8 x 16 tokens (seq_len \/ cp.*: \([0-9]*\) B .*/\1/p' plan.txt)
[ -n "$planned" ] || { cat plan.txt; fail "plan does not give a cp rank's activations"; }
[ "$planned" = "$(json_get cp2/report.json 'd["memory"]["breakdown"]["activations"]')" ] \
  || fail "plan says $planned activation bytes; the run allocated $(json_get cp2/report.json 'd["memory"]["breakdown"]')"
grep -q "^cp traffic per rank per step: 6 collectives" plan.txt \
  || { cat plan.txt; fail "plan does not count the cp collectives (2 blocks x 3)"; }
echo "cp: all layouts match one process; resumes and plan agree"
