# `trainer plan`'s activation estimate is what a run allocates: for tiny.yaml on the cpu, in fp32
# and bf16 and under each activation_checkpointing mode, the plan's "activations per rank" bytes
# equal report.json's memory.breakdown.activations of a one-step run of the same settings. And
# the bf16 and recompute variants really are smaller than fp32 without recompute. At tp 2 (two
# ranks) the same holds for activations and params, and the activations are smaller than one
# process's.
source "$2/tests/lib/common.sh"
# plan_bytes NAME [plan args]: sets $plan to the activation bytes `trainer plan` prints for tiny.yaml.
plan_bytes() {
  local name=$1
  shift
  "$bin" plan "$src/configs/tiny.yaml" "$@" >plan_$name.txt 2>&1 \
    || { cat plan_$name.txt; fail "$name: plan failed (TRAINER_ATTENTION='${TRAINER_ATTENTION:-}')"; }
  plan=$(sed -n 's/^activations per rank .*: \([0-9]*\) B .*/\1/p' plan_$name.txt)
  [ -n "$plan" ] || { cat plan_$name.txt; fail "$name: plan prints no activation bytes"; }
}
declare -A planned
for precision in fp32 bf16; do
  for recompute in none selective full; do
    name=${precision}_$recompute
    sets=(--set precision.compute=$precision --set activation_checkpointing=$recompute)
    plan_bytes $name "${sets[@]}"
    "$bin" train "$src/configs/tiny.yaml" "${sets[@]}" --set train.steps=1 --set train.eval_every=0 \
      --set checkpoint.every_steps=0 --out $name >$name.log 2>&1 \
      || { cat $name.log; fail "$name: the run failed"; }
    measured=$(json_get $name/report.json 'd["memory"]["breakdown"]["activations"]')
    echo "$name: plan $plan B, measured $measured B"
    [ "$plan" = "$measured" ] || fail "$name: plan says $plan activation bytes, the run allocated $measured"
    planned[$name]=$plan
  done
done
for name in bf16_none fp32_selective fp32_full; do
  [ "${planned[$name]}" -lt "${planned[fp32_none]}" ] \
    || fail "$name (${planned[$name]} B) is not below fp32 without recompute (${planned[fp32_none]} B)"
done
# On a GPU the flash kernels keep row statistics instead of the probabilities, unless
# TRAINER_ATTENTION=reference (the same variable, and the same check, as the cuda backend's).
plan_bytes h200_flash --gpu h200
flash=$plan
TRAINER_ATTENTION=reference plan_bytes h200_reference --gpu h200
reference=$plan
echo "h200: flash $flash B, reference kernels $reference B"
[ "$flash" -lt "$reference" ] || fail "flash's row statistics ($flash B) are not below the probabilities ($reference B)"
grep -q "attention keeps T x T probabilities: TRAINER_ATTENTION=reference)" plan_h200_reference.txt \
  || { cat plan_h200_reference.txt; fail "the plan does not say why it keeps the probabilities"; }
# Under context parallelism as well (the flash kernels over a cp rank's chunks of the sequence).
plan_bytes h200_cp2 --gpu h200 --gpus 2 --set parallel.cp=2
cp_flash=$plan
TRAINER_ATTENTION=reference plan_bytes h200_cp2_reference --gpu h200 --gpus 2 --set parallel.cp=2
echo "h200, cp 2: flash $cp_flash B, reference kernels $plan B"
[ "$cp_flash" -lt "$plan" ] || fail "cp 2: flash's row statistics ($cp_flash B) are not below the probabilities ($plan B)"
grep -q "attention keeps row log-sum-exps)" plan_h200_cp2.txt \
  || { cat plan_h200_cp2.txt; fail "cp 2 on a GPU plans the probabilities"; }
# Head size 128 (d_model 128, 1 head) has flash kernels; 48 (d_model 192, 4 heads) has none, and
# the plan says so.
plan_bytes h200_hs128 --gpu h200 --set model.n_head=1
grep -q "attention keeps row log-sum-exps)" plan_h200_hs128.txt \
  || { cat plan_h200_hs128.txt; fail "head size 128 plans the probabilities"; }
plan_bytes h200_hs48 --gpu h200 --set model.d_model=192 --set model.n_head=4
grep -q "attention keeps T x T probabilities: head size 48 has no flash kernel (they take 16, 32, 64, 80, 96 and 128)" \
  plan_h200_hs48.txt \
  || { cat plan_h200_hs48.txt; fail "head size 48: the plan does not say why it keeps the probabilities"; }
TRAINER_ATTENTION=fast "$bin" plan "$src/configs/tiny.yaml" --gpu h200 >bad_env.txt 2>&1 \
  && fail "plan accepted TRAINER_ATTENTION=fast"
grep -q "TRAINER_ATTENTION = 'fast': allowed are tensor_core (the default), tensor_core_32, wmma, flash, reference, cudnn" bad_env.txt \
  || { cat bad_env.txt; fail "the error does not name TRAINER_ATTENTION, its value and what is allowed"; }
# Model state too: with a padded vocabulary (300 -> 384 rows) the plan's params bytes at ZeRO 0
# are what the run allocated (the padding rows are memory, though not parameters).
pad=(--set model.vocab_size=300 --set model.make_vocab_size_divisible_by=128)
"$bin" plan "$src/configs/tiny.yaml" "${pad[@]}" >plan_pad.txt 2>&1 || { cat plan_pad.txt; fail "plan failed"; }
plan=$(sed -n 's/^memory per rank .*: params \([0-9]*\) B,.*/\1/p' plan_pad.txt)
"$bin" train "$src/configs/tiny.yaml" "${pad[@]}" --set train.steps=1 --set train.eval_every=0 \
  --out pad >pad.log 2>&1 || { cat pad.log; fail "padded run failed"; }
measured=$(json_get pad/report.json 'd["memory"]["breakdown"]["params"]')
echo "padded vocab: plan params $plan B, measured $measured B"
[ -n "$plan" ] && [ "$plan" = "$measured" ] || { cat plan_pad.txt; fail "plan params $plan B, run $measured B"; }
# Tensor parallel: a tp 2 rank holds its slice of the activations and of the weights (the
# embeddings and norms whole), and the plan for 2 devices says so, in fp32 and bf16, with and
# without sequence parallelism (which keeps only this rank's rows of the residual stream).
for precision in fp32 bf16; do
  for seqpar in false true; do
    name=tp2_${precision}_sp$seqpar
    sets=(--set parallel.tp=2 --set precision.compute=$precision --set parallel.sequence_parallel=$seqpar)
    plan_bytes $name --gpus 2 "${sets[@]}"
    plan_params=$(sed -n 's/^model state per rank as this runtime holds it .*: params \([0-9]*\) B,.*/\1/p' \
      plan_$name.txt)
    "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${sets[@]}" --set train.steps=1 \
      --set train.eval_every=0 --out $name >$name.log 2>&1 || { cat $name.log; fail "$name run failed"; }
    measured=$(json_get $name/report.json 'd["memory"]["breakdown"]["activations"]')
    measured_params=$(json_get $name/report.json 'd["memory"]["breakdown"]["params"]')
    echo "$name: plan activations $plan B, params $plan_params B; measured $measured B, $measured_params B"
    [ "$plan" = "$measured" ] || fail "$name: plan says $plan activation bytes, the run allocated $measured"
    [ -n "$plan_params" ] && [ "$plan_params" = "$measured_params" ] \
      || { cat plan_$name.txt; fail "$name: plan params $plan_params B, run $measured_params B"; }
    planned[$name]=$plan
  done
  [ "${planned[tp2_${precision}_spfalse]}" -lt "${planned[${precision}_none]}" ] \
    || fail "tp 2 $precision activations are not below one process's (${planned[${precision}_none]} B)"
  [ "${planned[tp2_${precision}_sptrue]}" -lt "${planned[tp2_${precision}_spfalse]}" ] \
    || fail "sequence parallelism does not lower tp 2 $precision activations"
done
# And the tp collectives the plan counts per step are the ones a run makes (its profile's
# fwd/bwd/recompute.tp_* calls), with full recompute rerunning the forward's.
for seqpar in false true; do
  sets=(--set parallel.tp=2 --set activation_checkpointing=full --set train.grad_accum=2
        --set parallel.sequence_parallel=$seqpar)
  "$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${sets[@]}" >plan_traffic_$seqpar.txt 2>&1 \
    || { cat plan_traffic_$seqpar.txt; fail "plan failed"; }
  planned_calls=$(sed -n 's/^tp traffic per rank per step: \([0-9]*\) collectives.*/\1/p' \
    plan_traffic_$seqpar.txt)
  "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${sets[@]}" --set train.steps=1 \
    --set train.eval_every=0 --set logging.profile_steps=1 --out traffic_$seqpar \
    >traffic_$seqpar.log 2>&1 || { cat traffic_$seqpar.log; fail "tp 2 profiled run failed"; }
  made=$(json_get traffic_$seqpar/report.json \
    'int(round(sum(p["calls_per_step"] for p in d["profile"]["phases"] if p["name"].split(".")[-1] in ("tp_all_reduce", "tp_all_gather", "tp_reduce_scatter"))))')
  echo "tp 2, sequence_parallel $seqpar, full recompute, grad_accum 2: plan $planned_calls collectives per step, the run made $made"
  [ -n "$planned_calls" ] && [ "$planned_calls" = "$made" ] \
    || { cat plan_traffic_$seqpar.txt; fail "plan counts $planned_calls tp collectives, the run made $made"; }
done
