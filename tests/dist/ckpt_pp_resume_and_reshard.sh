# Checkpoints of pipeline-parallel runs: every stage saves its own layers, and the first stage
# the embeddings (the last stage's copy of wte, tied to them, is not saved twice), so the
# checkpoint holds each element once; any grid reads the global elements it needs. Global batch 8
# sequences everywhere; steps 21..25 after a resume at step 20:
#  - a pp 2 checkpoint resumed as pp 2 is bit-identical to the uninterrupted pp 2 run;
#  - resumed as one process, as dp 2 x pp 2 at ZeRO 1, as pp 4 and as pp 2 x tp 2, and as one
#    process after `ckpt reshard --to dp=1`: within 1e-5 relative of it;
#  - a one-process checkpoint resumed as dp 2 x pp 2 at ZeRO 1 after
#    `ckpt reshard --to dp=2,pp=2,zero=1`: within 1e-5 of the uninterrupted one process;
#  - the exported weights of the pp 2 checkpoint and of its one-process reshard are the same file.
source "$2/tests/lib/dist_common.sh"
seq=(--set model.n_layer=4 --set model.seq_len=32 --set checkpoint.every_steps=20
     --set checkpoint.keep=5 --set parallel.pipeline.microbatches=2)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
source "$2/tests/lib/ckpt_common.sh"
run_launch ref 2 4 2 25 "${seq[@]}" --set parallel.pp=2 --set checkpoint.dir=ck
tail_of ref/metrics.jsonl >ref_tail.jsonl
ck=ck/step_00000020
"$bin" ckpt inspect $ck >inspect.txt || { cat inspect.txt; fail "ckpt inspect failed"; }
grep -q "pp 2" inspect.txt || { cat inspect.txt; fail "inspect does not say pp 2"; }
check_saved_once $ck/manifest.json
run_launch pp2 2 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.pp=2 --resume $ck
check_resumed pp2 ref_tail.jsonl --exact
run_single one 4 2 25 "${seq[@]}" "${dst[@]}" --resume $ck
check_resumed one ref_tail.jsonl --rtol 1e-5
run_launch dp2pp2z1 4 2 2 25 "${seq[@]}" "${dst[@]}" --set parallel.pp=2 --set parallel.zero=1 \
  --resume $ck
check_resumed dp2pp2z1 ref_tail.jsonl --rtol 1e-5
run_launch pp4 4 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.pp=4 --resume $ck
check_resumed pp4 ref_tail.jsonl --rtol 1e-5
run_launch pp2tp2 4 4 2 25 "${seq[@]}" "${dst[@]}" --set parallel.pp=2 --set parallel.tp=2 \
  --resume $ck
check_resumed pp2tp2 ref_tail.jsonl --rtol 1e-5
"$bin" ckpt reshard $ck --to dp=1 --out rs1 >rs1.txt || { cat rs1.txt; fail "reshard to dp=1 failed"; }
run_single off1 4 2 25 "${seq[@]}" "${dst[@]}" --resume rs1
check_resumed off1 ref_tail.jsonl --rtol 1e-5
"$bin" ckpt export $ck --out pp2.safetensors >/dev/null || fail "export of the pp 2 checkpoint failed"
"$bin" ckpt export rs1 --out one.safetensors >/dev/null || fail "export of the resharded one failed"
cmp pp2.safetensors one.safetensors || fail "the pp 2 checkpoint exports other weights than its reshard"

run_single single 4 2 25 "${seq[@]}" --set checkpoint.dir=ck1
tail_of single/metrics.jsonl >single_tail.jsonl
"$bin" ckpt reshard ck1/step_00000020 --to dp=2,pp=2,zero=1 --out rs4 >rs4.txt \
  || { cat rs4.txt; fail "reshard to dp=2,pp=2 failed"; }
[ "$(ls rs4/step_00000020/*.safetensors | wc -l)" = 4 ] || fail "reshard did not write 4 files"
run_launch off4 4 2 2 25 "${seq[@]}" "${dst[@]}" --set parallel.pp=2 --set parallel.zero=1 \
  --resume rs4
check_resumed off4 single_tail.jsonl --rtol 1e-5

# dp 3 x pp 2 at ZeRO 0 and 1: the end stages' copies of wte stay equal bit for bit (ZeRO 0 sums
# their gradients after the dp reduction; ZeRO 1 before it, and the last stage takes the first
# stage's weights after each update), so a resume, which loads the first stage's copy into
# both, continues exactly as the uninterrupted run. (dp 3: the dp reductions of the two copies run
# in buckets or shards of other shapes, so they add the three ranks' gradients in other orders.)
for z in 0 1; do
  d3=(--set model.n_layer=4 --set model.seq_len=32 --set model.vocab_size=1024 --set parallel.pp=2 --set parallel.zero=$z
      --set parallel.pipeline.microbatches=2 --set parallel.bucket_mb=0.05)
  run_launch d3z${z}_ref 6 2 1 10 "${d3[@]}"
  run_launch d3z$z 6 2 1 10 "${d3[@]}" --set checkpoint.dir=ck_d3z$z --set checkpoint.every_steps=5 \
    --set train.stop_after_steps=5
  run_launch d3z$z 6 2 1 10 "${d3[@]}" --set checkpoint.dir=ck_d3z$z --set checkpoint.every_steps=5
  grep -q "resumed from" d3z$z.log || { cat d3z$z.log; fail "dp 3 x pp 2 at zero $z did not resume"; }
  echo "dp 3 x pp 2, zero $z, resumed at step 5:"
  compare_metrics d3z${z}_ref/metrics.jsonl d3z$z/metrics.jsonl --exact --min-steps 10 \
    || fail "dp 3 x pp 2 at zero $z resumed differs from the uninterrupted run"
done
