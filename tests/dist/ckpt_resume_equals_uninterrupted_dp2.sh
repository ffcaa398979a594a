# dp=2 under every ZeRO stage (0-3), and ZeRO-3 in bf16 compute (the bf16 weight copy is rebuilt
# from the loaded fp32 shards), run.deterministic: 40 steps straight vs 20 (stop_after_steps) +
# --resume auto 20: bit-identical losses and final weights.
source "$2/tests/lib/dist_common.sh"
det=(--set run.deterministic=true --set model.seq_len=32 --set checkpoint.every_steps=40)
stages=(0 1 2 3 3b)  # every stage must resume exactly: none may drop out of the test ("b": bf16)
echo "zero stages covered: ${stages[*]}"
for z in "${stages[@]}"; do
  zz=(--set parallel.zero=${z%b})
  [ "$z" = "${z%b}" ] || zz+=(--set precision.compute=bf16)
  run_launch full_$z 2 4 1 40 "${det[@]}" "${zz[@]}" --set checkpoint.dir=ckf_$z
  run_launch p1_$z 2 4 1 40 "${det[@]}" "${zz[@]}" --set checkpoint.dir=ckp_$z \
    --set train.stop_after_steps=20
  run_launch p2_$z 2 4 1 40 "${det[@]}" "${zz[@]}" --set checkpoint.dir=ckp_$z --resume auto
  grep -q "resumed from ckp_$z/step_00000020" p2_$z.log || { cat p2_$z.log; fail "zero $z: no resume"; }
  cat p1_$z/metrics.jsonl p2_$z/metrics.jsonl > joined_$z.jsonl
  compare_metrics full_$z/metrics.jsonl joined_$z.jsonl --exact --min-steps 40 \
    || fail "zero $z: resumed run differs from the uninterrupted one"
  "$bin" ckpt export ckf_$z --out f_$z.safetensors >/dev/null
  "$bin" ckpt export ckp_$z --out p_$z.safetensors >/dev/null
  cmp f_$z.safetensors p_$z.safetensors || fail "zero $z: final weights differ"
  echo "zero $z: 40 losses bit-identical, final weights identical"
done
