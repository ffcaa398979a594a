# One process, run.deterministic: 40 steps straight vs 20 steps (stop_after_steps) + --resume auto
# for 20 more give bit-identical losses at every step and byte-identical exported weights.
source "$2/tests/lib/dist_common.sh"
det=(--set run.deterministic=true --set model.seq_len=32 --set checkpoint.every_steps=40)
run_single full 8 1 40 "${det[@]}" --set checkpoint.dir=ck_full
run_single part1 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --set train.stop_after_steps=20
[ -d ck_part/step_00000020 ] || fail "stop_after_steps=20 wrote no checkpoint: $(ls ck_part)"
run_single part2 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --resume auto
grep -q "resumed from ck_part/step_00000020" part2.log || { cat part2.log; fail "part2 did not resume"; }
cat part1/metrics.jsonl part2/metrics.jsonl > joined.jsonl
compare_metrics full/metrics.jsonl joined.jsonl --exact --min-steps 40 \
  || fail "resumed run differs from the uninterrupted one"
"$bin" ckpt export ck_full --out full.safetensors >/dev/null
"$bin" ckpt export ck_part --out part.safetensors >/dev/null
cmp full.safetensors part.safetensors || fail "final weights differ"
echo "40 losses bit-identical; final weights identical"
