# Checkpoints of tensor-parallel runs: every rank saves its range of its own tp slice (wte's: its
# vocabulary rows), the tensors every tp rank holds whole (norms, row-parallel biases, wpe) on tp
# rank 0 only, so the checkpoint holds each element once; any grid reads the global elements it
# needs. Global batch 8
# sequences everywhere; steps 21..25 after a resume at step 20:
#  - a tp 2 checkpoint resumed as tp 2 is bit-identical to the uninterrupted tp 2 run;
#  - resumed as one process, as tp 4, as dp 2 x tp 2 at ZeRO 3 and as tp 2 with sequence
#    parallelism (online), and as one process after `ckpt reshard --to dp=1`: within 1e-5
#    relative of it;
#  - a one-process checkpoint resumed as tp 2, and as dp 2 x tp 2 at ZeRO 1 after
#    `ckpt reshard --to dp=2,tp=2,zero=1`: within 1e-5 of the uninterrupted one process;
#  - the exported weights of the tp 2 checkpoint and of its one-process reshard are the same file.
source "$2/tests/lib/dist_common.sh"
seq=(--set model.seq_len=32 --set checkpoint.every_steps=20 --set checkpoint.keep=5)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
source "$2/tests/lib/ckpt_common.sh"
run_launch ref 2 4 2 25 "${seq[@]}" --set parallel.tp=2 --set checkpoint.dir=ck
tail_of ref/metrics.jsonl >ref_tail.jsonl
ck=ck/step_00000020
"$bin" ckpt inspect $ck >inspect.txt || { cat inspect.txt; fail "ckpt inspect failed"; }
grep -q "tp 2" inspect.txt || { cat inspect.txt; fail "inspect does not say tp 2"; }
check_saved_once $ck/manifest.json
run_launch tp2 2 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=2 --resume $ck
check_resumed tp2 ref_tail.jsonl --exact
run_single one 4 2 25 "${seq[@]}" "${dst[@]}" --resume $ck
check_resumed one ref_tail.jsonl --rtol 1e-5
run_launch tp4 4 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=4 --resume $ck
check_resumed tp4 ref_tail.jsonl --rtol 1e-5
run_launch dp2tp2z3 4 2 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=2 --set parallel.zero=3 \
  --resume $ck
check_resumed dp2tp2z3 ref_tail.jsonl --rtol 1e-5
run_launch sp2 2 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=2 \
  --set parallel.sequence_parallel=true --resume $ck
check_resumed sp2 ref_tail.jsonl --rtol 1e-5
"$bin" ckpt reshard $ck --to dp=1 --out rs1 >rs1.txt || { cat rs1.txt; fail "reshard to dp=1 failed"; }
run_single off1 4 2 25 "${seq[@]}" "${dst[@]}" --resume rs1
check_resumed off1 ref_tail.jsonl --rtol 1e-5
"$bin" ckpt export $ck --out tp2.safetensors >/dev/null || fail "export of the tp 2 checkpoint failed"
"$bin" ckpt export rs1 --out one.safetensors >/dev/null || fail "export of the resharded one failed"
cmp tp2.safetensors one.safetensors || fail "the tp 2 checkpoint exports other weights than its reshard"

run_single single 4 2 25 "${seq[@]}" --set checkpoint.dir=ck1
tail_of single/metrics.jsonl >single_tail.jsonl
run_launch from_one 2 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=2 --resume ck1/step_00000020
check_resumed from_one single_tail.jsonl --rtol 1e-5
"$bin" ckpt reshard ck1/step_00000020 --to dp=2,tp=2,zero=1 --out rs4 >rs4.txt \
  || { cat rs4.txt; fail "reshard to dp=2,tp=2 failed"; }
[ "$(ls rs4/step_00000020/*.safetensors | wc -l)" = 4 ] || fail "reshard did not write 4 files"
run_launch off4 4 2 2 25 "${seq[@]}" "${dst[@]}" --set parallel.tp=2 --set parallel.zero=1 \
  --resume rs4
check_resumed off4 single_tail.jsonl --rtol 1e-5

# fp8 (the cpu emulation) at tp 2: the scaling states are the same on every rank (amaxes reduced
# over dp x tp), so rank 0's in the checkpoint resume every rank: 20 steps straight equal
# 10 + --resume auto + 10, bit for bit.
export TRAINER_TEST_EMULATED_FP8=1
f8=(--set run.deterministic=true --set precision.compute=fp8 --set parallel.tp=2)
run_launch f8_ref 2 4 2 20 "${seq[@]}" "${f8[@]}" --set checkpoint.dir=ck_f8_ref
run_launch f8_split 2 4 2 20 "${seq[@]}" "${f8[@]}" --set checkpoint.dir=ck_f8 \
  --set checkpoint.every_steps=10 --set train.stop_after_steps=10
run_launch f8_split 2 4 2 20 "${seq[@]}" "${f8[@]}" --set checkpoint.dir=ck_f8 \
  --set checkpoint.every_steps=10
grep -q "resumed from" f8_split.log || { cat f8_split.log; fail "fp8 tp 2 did not resume"; }
echo "fp8 tp 2 resumed (metrics.jsonl keeps steps 1..10 of the first half):"
compare_metrics f8_ref/metrics.jsonl f8_split/metrics.jsonl --exact --min-steps 20 \
  || fail "fp8 tp 2 resumed differs from the uninterrupted run"
