# `trainer ckpt export` (HF safetensors and llm.c) then model.init_from gives the same weights:
# with a negligible lr (1e-30) the first step's val loss of each init_from run equals the
# exporting run's val loss at its last step; a fresh init does not. The llm.c file has exactly
# the size its header implies; a file of another model shape is refused naming the key.
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
set +e
"$bin" train "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set model.n_layer=3 \
  --set model.init_from=m.bin --out bad >bad.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat bad.log; fail "other shape: exit $rc, not 2"; }
grep -q "model.init_from = \"m.bin\": .*n_layer" bad.log || { cat bad.log; fail "error does not name the key and n_layer"; }
echo "other shape refused: $(grep -m1 error bad.log)"

# Bad paths and specs for the ckpt verbs exit 2 naming them, and leave nothing behind.
ckpt_refused() {  # ckpt_refused "message part" ckpt-args...
  local want=$1; shift
  set +e
  "$bin" ckpt "$@" >ck.log 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { cat ck.log; fail "ckpt $* exited $rc, not 2"; }
  grep -qF -- "$want" ck.log || { cat ck.log; fail "ckpt $* did not say '$want'"; }
}
mkdir -p a_dir
ckpt_refused "no_such: no such file" export no_such --out x.safetensors
ckpt_refused "no checkpoint" inspect a_dir
ckpt_refused "is a directory" export ck --out a_dir
ckpt_refused "does not exist" export ck --out no_dir/x.safetensors
ckpt_refused "dp is given twice" reshard ck --to dp=2,dp=3 --out rs
ckpt_refused "step_00000020 exists already" reshard ck --to dp=2 --out ck
[ ! -e a_dir.tmp ] && [ ! -e rs ] && [ ! -e no_dir ] || fail "a refused ckpt command left output"
[ "$(ls ck)" = step_00000020 ] || fail "reshard into its own root touched the source: $(ls ck)"
echo "bad ckpt arguments refused"
