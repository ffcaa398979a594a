# Every config in configs/ is valid for the layout it documents (trainer plan), and the
# multi-rank examples train as their header says: `trainer launch --nproc-per-node 4` on
# dp4.yaml, zero3_dp4.yaml, tp2_dp2.yaml, pp2_dp2.yaml, pp2_dp2_interleaved.yaml and
# cp2_dp2.yaml, and `--nproc-per-node 2` on moe_ep2.yaml (a few steps), with the grid and batch
# they state in the report.
source "$2/tests/lib/common.sh"
declare -A ranks=([tiny]=1 [dp4]=4 [zero3_dp4]=4 [tp2_dp2]=4 [pp2_dp2]=4 [pp2_dp2_interleaved]=4
                  [cp2_dp2]=4 [moe_ep2]=2 [gpt2_small_cuda]=1)
for cfg in "$src"/configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  [ -n "${ranks[$name]:-}" ] || fail "configs/$name.yaml: add it to this test's table of layouts"
  gpu=cpu; [[ $name == *cuda* ]] && gpu=h200
  "$bin" plan "$cfg" --gpus "${ranks[$name]}" --gpu $gpu >plan_$name.txt 2>&1 \
    || { cat plan_$name.txt; fail "configs/$name.yaml is not valid for ${ranks[$name]} ranks"; }
  echo "configs/$name.yaml: $(head -1 plan_$name.txt)"
done
grep -q "124439808 params" plan_gpt2_small_cuda.txt \
  || { cat plan_gpt2_small_cuda.txt; fail "gpt2_small_cuda.yaml is not GPT-2 small (124,439,808 params)"; }

run_example() {  # run_example NAME DP ZERO GLOBAL_BATCH [TP [PP]]
  local name=$1
  "$bin" launch --nproc-per-node "${ranks[$name]}" "$src/configs/$name.yaml" --set train.steps=3 \
    --set train.eval_every=0 --set checkpoint.every_steps=0 --out $name >$name.log 2>&1 \
    || { cat $name.log; fail "trainer launch --nproc-per-node ${ranks[$name]} configs/$name.yaml failed"; }
  local got
  got=$(json_get $name/report.json \
    "'%d %d %d %d %d' % (d['parallel']['dp'], d['parallel']['zero_stage'], d['batch']['global_batch_sequences'], d['parallel']['tp'], d['parallel']['pp'])")
  [ "$got" = "$2 $3 $4 ${5:-1} ${6:-1}" ] \
    || fail "$name: report says dp/zero/global batch/tp/pp '$got', want '$2 $3 $4 ${5:-1} ${6:-1}'"
  echo "$name: dp $2, zero $3, global batch $4 sequences, tp ${5:-1}, pp ${6:-1}; $(grep -c '"step"' $name/metrics.jsonl) steps logged"
}
run_example dp4 4 0 32
run_example zero3_dp4 4 3 32
run_example tp2_dp2 2 1 16 2
run_example pp2_dp2 2 1 16 1 2
run_example pp2_dp2_interleaved 2 1 16 1 2
[ "$(json_get pp2_dp2_interleaved/report.json 'd["parallel"]["pipeline_schedule"], d["parallel"]["virtual_stages"]')" = "interleaved 2" ] \
  || fail "pp2_dp2_interleaved: $(json_get pp2_dp2_interleaved/report.json 'd["parallel"]')"
run_example cp2_dp2 2 1 8
[ "$(json_get cp2_dp2/report.json 'd["parallel"]["cp"], d["batch"]["seq_len"], d["batch"]["tokens_per_step"]')" = "2 512 4096" ] \
  || fail "cp2_dp2: $(json_get cp2_dp2/report.json 'd["parallel"], d["batch"]')"
run_example moe_ep2 2 0 16
[ "$(json_get moe_ep2/report.json 'd["parallel"]["ep"], d["model"]["num_experts"], d["model"]["top_k"]')" = "2 8 2" ] \
  || fail "moe_ep2: $(json_get moe_ep2/report.json 'd["parallel"], d["model"]')"
