# `trainer ckpt export` (HF safetensors and llm.c) then model.init_from gives the same weights:
# with a negligible lr (1e-30) the first step's val loss of each init_from run equals the
# exporting run's val loss at its last step (at tp 2 and pp 2 too); a fresh init does not. The llm.c file
# has exactly the size its header implies; a file of another model shape is refused naming the
# key.
source "$2/tests/lib/dist_common.sh"
c=(--set model.seq_len=32 --set train.eval_batches=4)
run_single src 8 1 20 "${c[@]}" --set train.eval_every=20 --set checkpoint.every_steps=20 \
  --set checkpoint.dir=ck
"$bin" ckpt export ck --out m.safetensors >/dev/null
"$bin" ckpt export ck --out m.bin --format llmc >/dev/null
/usr/bin/python3 - <<'PY' || fail "llm.c file size differs from its header"
import os, struct
h = struct.unpack("<256i", open("m.bin", "rb").read(1024))
assert h[0] == 20240326 and h[1] == 3, h[:8]
maxT, V, L, NH, C, Vp = h[2:8]
n = Vp*C + maxT*C + L*(2*C + 3*C*C + 3*C + C*C + C + 2*C + 4*C*C + 4*C + 4*C*C + C) + 2*C
want, got = 1024 + 4*n, os.path.getsize("m.bin")
print(f"llm.c file: header implies {want} bytes, file has {got}")
assert want == got
PY
val() { json_get $1/report.json "d['loss']['val_loss']"; }
lr=(--set train.lr=1e-30 --set train.eval_every=1)
run_single hf 8 1 1 "${c[@]}" "${lr[@]}" --set model.init_from=m.safetensors
run_single llmc 8 1 1 "${c[@]}" "${lr[@]}" --set model.init_from=m.bin
run_single fresh 8 1 1 "${c[@]}" "${lr[@]}"
/usr/bin/python3 - "$(val src)" "$(val hf)" "$(val llmc)" "$(val fresh)" <<'PY' || fail "val losses"
import sys
src, hf, llmc, fresh = map(float, sys.argv[1:])
print(f"val loss: exporting run {src!r}, init_from hf {hf!r}, llmc {llmc!r}, fresh init {fresh!r}")
for name, v in (("hf", hf), ("llmc", llmc)):
    assert abs(v - src) <= 1e-6 * abs(src), name
assert abs(fresh - src) > 1e-3 * abs(src), "fresh init matches too: the check cannot fail"
PY
compare_metrics hf/metrics.jsonl llmc/metrics.jsonl --exact || fail "hf and llmc imports differ"
# At tp 2 each rank takes its slice of the file's tensors: the same first step as one process.
run_launch hf_tp2 2 8 1 1 "${c[@]}" "${lr[@]}" --set model.init_from=m.safetensors --set parallel.tp=2
compare_metrics hf/metrics.jsonl hf_tp2/metrics.jsonl --fields loss,grad_norm,val_loss --rtol 1e-5 \
  || fail "init_from at tp 2 differs from one process"
# At pp 2 each stage takes its layers, the last stage the file's wte for its head too.
run_launch hf_pp2 2 8 1 1 "${c[@]}" "${lr[@]}" --set model.init_from=m.safetensors --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=2
compare_metrics hf/metrics.jsonl hf_pp2/metrics.jsonl --fields loss,grad_norm,val_loss --rtol 1e-5 \
  || fail "init_from at pp 2 differs from one process"
expect_exit_2 'model.init_from = "m.bin"' bad train "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" \
  --set model.n_layer=3 --set model.init_from=m.bin --out bad
grep -q "n_layer" exit2.log || { cat exit2.log; fail "error does not name n_layer"; }
echo "other shape refused: $(grep -m1 error exit2.log)"
# trainer plan refuses what train refuses (from the file's header), and a truncated llm.c file.
for f in m.bin m.safetensors; do
  expect_exit_2 "model.n_layer is 2 in the file, 3 in the config" "" plan \
    "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set model.n_layer=3 --set model.init_from=$f
done
head -c 5000 m.bin >cut.bin
expect_exit_2 "cut.bin: 5000 bytes, the header implies" "" plan "$src/configs/tiny.yaml" \
  "${small[@]}" "${c[@]}" --set model.init_from=cut.bin
# A token shard (data) or a text file given as weights says what it is and what is expected.
"$bin" data prepare --input "$src/README.md" --output shards >prepare.log 2>&1 || { cat prepare.log; fail "data prepare"; }
shard=$(ls shards/*.bin | head -1)
expect_exit_2 "an llm.c token shard (data, magic 20240520), not weights" "" plan \
  "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set model.init_from=$shard
expect_exit_2 "neither an llm.c model file (magic 20240326) nor a safetensors file" "" plan \
  "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set model.init_from=$src/README.md

# Bad paths and specs for the ckpt verbs exit 2 naming them, and leave nothing behind.
mkdir -p a_dir
expect_exit_2 "no_such: no such file" "" ckpt export no_such --out x.safetensors
expect_exit_2 "no checkpoint" "" ckpt inspect a_dir
expect_exit_2 "is a directory" "" ckpt export ck --out a_dir
expect_exit_2 "does not exist" "" ckpt export ck --out no_dir/x.safetensors
expect_exit_2 "dp is given twice" "" ckpt reshard ck --to dp=2,dp=3 --out rs
expect_exit_2 "step_00000020 exists already" "" ckpt reshard ck --to dp=2 --out ck
expect_exit_2 'ckpt reshard --out = "": expected a directory path' "" ckpt reshard ck --to dp=2 --out ""
# a grid the model does not split over: refused before --out is made (no lock file left)
expect_exit_2 "tp must divide the model's n_head" rs ckpt reshard ck --to tp=3 --out rs
# nor below a later checkpoint, which --resume auto there would take instead
mkdir -p later && cp -r ck/step_00000020 later/step_00000030
expect_exit_2 "it holds step_00000030, past step 20" "" ckpt reshard ck --to dp=2 --out later
[ "$(ls later)" = step_00000030 ] || fail "a refused reshard wrote into later: $(ls later)"
# A root whose newest step is an incomplete write: the verbs use the newest complete one and say
# what they skipped; a root with only incomplete ones says that, not "no step_* dirs".
mkdir -p partial/step_00000040 only_partial/step_00000010.tmp only_partial/step_00000040 \
  only_partial/step_00000030
cp -r ck/step_00000020 partial/
"$bin" ckpt inspect partial >inspect.log 2>&1 || { cat inspect.log; fail "inspect of partial"; }
grep -q "ignoring incomplete write partial/step_00000040" inspect.log \
  || { cat inspect.log; fail "inspect did not name the incomplete step it skipped"; }
expect_exit_2 "no complete checkpoint: only_partial/step_00000040 (and 2 more) has no manifest.json" "" \
  ckpt inspect only_partial
expect_exit_2 "is a checkpoint's step directory; write the export elsewhere" "" \
  ckpt export ck --out ck/step_00000020/rank_00000.safetensors
"$bin" ckpt inspect ck >/dev/null || fail "an export refused over a checkpoint's file damaged it"
! compgen -G "a_dir.tmp*" >/dev/null && [ ! -e rs ] && [ ! -e no_dir ] \
  || fail "a refused ckpt command left output"
[ "$(ls ck)" = step_00000020 ] || fail "reshard into its own root touched the source: $(ls ck)"
# A model llm.c has no file for (MLP width 2C) is bad input: exit 2 before any weight is read.
run_single f2 8 1 1 "${c[@]}" --set model.ffn_mult=2 --set checkpoint.every_steps=1 \
  --set checkpoint.dir=ck2
expect_exit_2 "llm.c export needs model.ffn_mult 4 (this model has 2)" m2.bin ckpt export ck2 \
  --out m2.bin --format llmc
echo "bad ckpt arguments refused"
