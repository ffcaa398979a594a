# Mixture of experts with tensor parallelism (sequence parallel, as Megatron requires): attention
# and the dense tensors split over tp as for a dense model, each tp rank routes the whole
# sequences of its rows to experts it holds whole, and the router's and experts' gradients sum
# over tp. Against the single-process run of the same model (4 experts, top 2, capacity factor 1:
# some choices dropped) and global batch (8 sequences of 32 tokens): losses, grad norms, the
# balance loss and the dropped share within 1e-5 relative over 20 steps, at tp 2, tp 4, tp 2 with
# full and with selective recompute, dp 2 x tp 2 with ep 2 (ZeRO 0 and 1), and tp 2 on each of 2
# pipeline stages; bf16 (the cpu emulation) at tp 2 within 1e-5 of one process at step 1.
# A tp 2 checkpoint holds every tensor once and resumes within 1e-5 as one process, as tp 2 x ep 2,
# and resharded for dp 2 x tp 2 x ep 2 at ZeRO 1. `trainer plan` predicts a tp rank's model state
# and activations; bad layouts are refused naming the key.
source "$2/tests/lib/moe_common.sh"  # moe, s, ref, check_moe
sp=(--set parallel.sequence_parallel=true)
check_moe tp2 2 8 1 "${sp[@]}" --set parallel.tp=2
check_moe tp4 4 8 1 "${sp[@]}" --set parallel.tp=4
check_moe tp2_full 2 8 1 "${sp[@]}" --set parallel.tp=2 --set activation_checkpointing=full
check_moe tp2_sel_ga2 2 4 2 "${sp[@]}" --set parallel.tp=2 --set activation_checkpointing=selective
check_moe dp2tp2ep2 4 4 1 "${sp[@]}" --set parallel.tp=2 --set parallel.ep=2
check_moe dp2tp2ep2_z1 4 4 1 "${sp[@]}" --set parallel.tp=2 --set parallel.ep=2 --set parallel.zero=1
check_moe pp2tp2 4 8 1 "${sp[@]}" --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=2
[ "$(json_get tp2/report.json 'd["parallel"]["tp"], d["model"]["num_experts"]')" = "2 4" ] \
  || fail "tp 2 report: $(json_get tp2/report.json 'd["parallel"], d["model"]')"

# plan: a tp rank's model state and activations (its sequences' expert slots) as allocated
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${s[@]}" "${sp[@]}" \
  --set parallel.tp=2 --set train.micro_batch=8 >plan.txt || { cat plan.txt; fail "plan of tp 2 failed"; }
plan_matches_run plan.txt tp2/report.json || fail "plan's tp 2 rank differs from the run's"

b=(--set run.deterministic=true --set precision.compute=bf16)
run_single ref_bf16 8 1 20 "${s[@]}" "${b[@]}"
run_launch tp2_bf16 2 8 1 20 "${s[@]}" "${b[@]}" "${sp[@]}" --set parallel.tp=2
compare_metrics ref_bf16/metrics.jsonl tp2_bf16/metrics.jsonl --first-steps 1 --rtol 1e-5 \
  || fail "bf16 tp 2 differs from one process at step 1"

# Resume: steps 21..25 after a checkpoint at step 20, global batch 8 (4 x grad_accum 2).
source "$2/tests/lib/ckpt_common.sh"
ck=(--set model.seq_len=32 "${moe[@]}" --set checkpoint.every_steps=20 --set checkpoint.keep=5)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
run_launch ck_tp2 2 4 2 25 "${ck[@]}" "${sp[@]}" --set parallel.tp=2 --set checkpoint.dir=ck_tp2
tail_of ck_tp2/metrics.jsonl >tp2_tail.jsonl
check_saved_once ck_tp2/step_00000020/manifest.json
"$bin" train "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=25 --set train.micro_batch=4 \
  --set train.grad_accum=2 "${ck[@]}" "${dst[@]}" --resume ck_tp2/step_00000020 --out one_from_tp2 \
  >one_from_tp2.log 2>&1 || { cat one_from_tp2.log; fail "one process from the tp 2 checkpoint failed"; }
check_resumed one_from_tp2 tp2_tail.jsonl --rtol 1e-5
run_launch tp2ep2_from_tp2 4 2 2 25 "${ck[@]}" "${sp[@]}" --set parallel.tp=2 --set parallel.ep=2 \
  "${dst[@]}" --resume ck_tp2/step_00000020
check_resumed tp2ep2_from_tp2 tp2_tail.jsonl --rtol 1e-5
"$bin" ckpt reshard ck_tp2/step_00000020 --to dp=2,tp=2,ep=2,zero=1 --out rs >rs.txt \
  || { cat rs.txt; fail "reshard to dp=2,tp=2,ep=2,zero=1 failed"; }
check_saved_once rs/step_00000020/manifest.json
run_launch tp2ep2z1_from_rs 4 2 2 25 "${ck[@]}" "${sp[@]}" --set parallel.tp=2 --set parallel.ep=2 \
  --set parallel.zero=1 "${dst[@]}" --resume rs/step_00000020
check_resumed tp2ep2z1_from_rs tp2_tail.jsonl --rtol 1e-5

# refused, naming the key
set +e
"$bin" train "$src/configs/tiny.yaml" "${small[@]}" "${s[@]}" --set parallel.tp=2 >nosp.txt 2>&1
rc_nosp=$?
"$bin" plan "$src/configs/tiny.yaml" --gpus 4 "${small[@]}" "${s[@]}" "${sp[@]}" \
  --set parallel.tp=4 --set train.micro_batch=2 >odd.txt 2>&1
rc_odd=$?
set -e
[ "$rc_nosp" = 2 ] && grep -q "parallel.tp = 2 needs parallel.sequence_parallel = true" nosp.txt \
  || { cat nosp.txt; fail "tp 2 without sequence parallelism: exit $rc_nosp"; }
[ "$rc_odd" = 2 ] && grep -q "train.micro_batch = 2) must be divisible by parallel.tp" odd.txt \
  || { cat odd.txt; fail "2 sequences over tp 4: exit $rc_odd"; }
echo "moe tp: all layouts match one process; resumes agree"
