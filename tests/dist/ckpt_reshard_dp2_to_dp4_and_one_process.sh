# A dp=2 zero=1 checkpoint at step 20 continues under dp=4 (zero 0, 1 and 3) and as one process, online
# (each rank reads the slices it needs) and after `trainer ckpt reshard`: steps 21..25 match the
# uninterrupted dp=2 run within 1e-5 relative. Global batch 8 sequences everywhere.
source "$2/tests/lib/dist_common.sh"
seq=(--set model.seq_len=32 --set checkpoint.every_steps=20 --set checkpoint.keep=5)
run_launch ref 2 4 1 25 "${seq[@]}" --set parallel.zero=1 --set checkpoint.dir=ck
ck=ck/step_00000020
[ -d $ck ] || fail "no checkpoint at step 20: $(ls ck)"
# keep only steps 21..25 of the reference
/usr/bin/python3 -c "
import json,sys
for l in open('ref/metrics.jsonl'):
    if json.loads(l)['step'] > 20: print(l, end='')" > ref_tail.jsonl
check() {  # check NAME: its metrics vs the reference tail
  grep -q "resumed from" $1.log || { cat $1.log; fail "$1 did not resume"; }
  echo "$1:"; compare_metrics ref_tail.jsonl $1/metrics.jsonl --rtol 1e-5 --min-steps 5 \
    || fail "$1 differs from the uninterrupted dp=2 zero=1 run"
}
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
run_launch dp4 4 2 1 25 "${seq[@]}" "${dst[@]}" --resume $ck; check dp4
run_launch dp4z1 4 2 1 25 "${seq[@]}" "${dst[@]}" --set parallel.zero=1 --resume $ck; check dp4z1
run_launch dp4z3 4 2 1 25 "${seq[@]}" "${dst[@]}" --set parallel.zero=3 --resume $ck; check dp4z3
run_single one 8 1 25 "${seq[@]}" "${dst[@]}" --resume $ck; check one
"$bin" ckpt reshard $ck --to dp=4,zero=1 --out rs4 > rs4.txt || fail "reshard to dp=4 failed"
"$bin" ckpt inspect rs4 | grep -q "dp 4" || fail "resharded manifest does not say dp 4"
[ "$(ls rs4/step_00000020/*.safetensors | wc -l)" = 4 ] || fail "reshard did not write 4 files"
run_launch off4 4 2 1 25 "${seq[@]}" "${dst[@]}" --set parallel.zero=1 --resume rs4; check off4
"$bin" ckpt reshard $ck --to dp=1 --out rs1 > rs1.txt || fail "reshard to dp=1 failed"
run_single off1 8 1 25 "${seq[@]}" "${dst[@]}" --resume rs1; check off1
