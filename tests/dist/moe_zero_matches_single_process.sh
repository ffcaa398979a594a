# ZeRO 1, 2 and 3 under expert parallelism (the dense tensors' state sharded over dp, the experts'
# over the edp ranks that hold the same experts; stage 1 is Megatron's distributed optimizer with
# expert groups, stage 2 reduce-scatters each block's dense and expert parts as backward finishes
# them, stage 3 also gathers them as each block runs) reproduce the single-process run of the same mixture of experts (4 experts, top 2,
# capacity factor 1) and global batch: losses, grad norms, the balance loss and the dropped share
# within 1e-5 relative over 20 steps, at ep 2 (edp 1: the experts are not sharded), dp 4 x ep 2
# (edp 2), ep 4, ep 2 with grad_accum 2 (the reduce-scatters of every micro-batch), and (stage 1)
# ep 2 on each of 2 pipeline stages.
# A ZeRO 1 checkpoint holds every element once, each of the 4 ranks a quarter of the dense
# tensors, and resumes bit-identically under the same grid, within 1e-5 as ep 2 at ZeRO 0 and as
# ZeRO 2 and 3; a ZeRO 0 ep 2 checkpoint resumes under it, and `ckpt reshard --to dp=4,ep=2,zero=1`
# writes what its ranks own. `trainer plan` predicts the optimizer state and staging a rank
# allocates at each stage.
source "$2/tests/lib/moe_common.sh"  # moe, s, ref, check_moe
for z in 1 2 3; do
  zs=(--set parallel.zero=$z)
  check_moe ep2_z$z 2 4 1 --set parallel.ep=2 "${zs[@]}"
  check_moe dp4ep2_z$z 4 2 1 --set parallel.ep=2 "${zs[@]}"
  check_moe ep4_z$z 4 2 1 --set parallel.ep=4 "${zs[@]}"
  check_moe ep2_z${z}_ga2 2 2 2 --set parallel.ep=2 "${zs[@]}"
  for name in ep2_z$z dp4ep2_z$z ep4_z$z ep2_z${z}_ga2; do
    [ "$(json_get "$name/report.json" 'd["parallel"]["zero_stage"]')" = $z ] \
      || fail "$name's report does not say ZeRO $z"
  done
done
check_moe pp2ep2_z1 4 4 1 --set parallel.ep=2 --set parallel.pp=2 \
  --set parallel.pipeline.microbatches=2 --set parallel.zero=1

# ZeRO 1-3 hold less optimizer state than ZeRO 0 at the same grid, 2 and 3 fewer gradients (at
# stage 3 the two blocks and the embedding this small model has are all live at the peak: its
# params are not fewer)
run_launch dp4ep2_z0 4 2 1 2 "${s[@]}" --set parallel.ep=2
/usr/bin/python3 - dp4ep2_z{0,1,2,3}/report.json <<'PY' || fail "ZeRO under ep 2 does not shard the state"
import json, sys
z = [json.load(open(p))["memory"]["breakdown"] for p in sys.argv[1:]]
for k in ("params", "grads", "optimizer"):
    print(f"dp 4 x ep 2 {k} bytes per rank, ZeRO 0-3:", " / ".join(str(b[k]) for b in z))
# dense over 4 ranks, experts over 2: between a quarter and a half of ZeRO 0's
assert 0.25 * z[0]["optimizer"] < z[1]["optimizer"] == z[2]["optimizer"] == z[3]["optimizer"] \
    < 0.5 * z[0]["optimizer"]
assert z[2]["grads"] < z[1]["grads"] == z[0]["grads"]
assert z[3]["params"] <= z[2]["params"] == z[0]["params"]
PY

# plan: the optimizer state and staging of a dp 4 x ep 2 rank, as the runs allocated
for z in 1 2 3; do
  "$bin" plan "$src/configs/tiny.yaml" --gpus 4 "${small[@]}" "${s[@]}" --set parallel.ep=2 \
    --set parallel.zero=$z --set train.micro_batch=2 >plan_z$z.txt \
    || { cat plan_z$z.txt; fail "plan zero $z failed"; }
  /usr/bin/python3 - plan_z$z.txt dp4ep2_z$z/report.json <<'PY' \
    || fail "plan's state differs from the run's at zero $z"
import json, re, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("model state per rank as this runtime"))
plan = {k: int(v) for k, v in re.findall(r"(optimizer|ZeRO staging) (\d+) B", line)}
b = json.load(open(sys.argv[2]))["memory"]["breakdown"]
run = {"optimizer": b["optimizer"], "ZeRO staging": b["zero_staging"]}
print(f"plan {plan}, run {run}")
sys.exit(0 if plan == run else 1)
PY
done

# Resume: steps 21..25 after a checkpoint at step 20, global batch 8 (grad_accum 2).
source "$2/tests/lib/ckpt_common.sh"
ck=(--set model.seq_len=32 "${moe[@]}" --set checkpoint.every_steps=20 --set checkpoint.keep=5)
dst=(--set checkpoint.dir=unused --set checkpoint.every_steps=0)
z1=(--set parallel.ep=2 --set parallel.zero=1)  # (from here: ep 2 too)
run_launch ck_z1 4 1 2 25 "${ck[@]}" "${z1[@]}" --set checkpoint.dir=ck_z1
tail_of ck_z1/metrics.jsonl >z1_tail.jsonl
check_saved_once ck_z1/step_00000020/manifest.json
/usr/bin/python3 - ck_z1/step_00000020/manifest.json <<'PY' || fail "the dense tensors are not sharded over dp"
import json, sys
m = json.load(open(sys.argv[1]))
dense = {f["rank"]: sum(p["range"][1] - p["range"][0] for p in f["pieces"]
                        if ".experts." not in p["tensor"]) for f in m["shards"]}
print("dense elements saved per rank", dense)
assert sorted(dense) == [0, 1, 2, 3] and max(dense.values()) - min(dense.values()) < 64, dense
PY
run_launch z1_from_z1 4 1 2 25 "${ck[@]}" "${z1[@]}" "${dst[@]}" --resume ck_z1/step_00000020
check_resumed z1_from_z1 z1_tail.jsonl --exact
run_launch ep2z0_from_z1 2 2 2 25 "${ck[@]}" --set parallel.ep=2 "${dst[@]}" \
  --resume ck_z1/step_00000020
check_resumed ep2z0_from_z1 z1_tail.jsonl --rtol 1e-5
for z in 2 3; do
  run_launch z${z}_from_z1 4 1 2 25 "${ck[@]}" --set parallel.ep=2 --set parallel.zero=$z \
    "${dst[@]}" --resume ck_z1/step_00000020
  check_resumed z${z}_from_z1 z1_tail.jsonl --rtol 1e-5
done
# from ZeRO 0 at ep 2, directly and through reshard
run_launch ck_z0 2 2 2 25 "${ck[@]}" --set parallel.ep=2 --set checkpoint.dir=ck_z0
run_launch z1_from_z0 4 1 2 25 "${ck[@]}" "${z1[@]}" "${dst[@]}" --resume ck_z0/step_00000020
check_resumed z1_from_z0 z1_tail.jsonl --rtol 1e-5
"$bin" ckpt reshard ck_z0/step_00000020 --to dp=4,ep=2,zero=1 --out rs >rs.txt \
  || { cat rs.txt; fail "reshard to dp=4,ep=2,zero=1 failed"; }
check_saved_once rs/step_00000020/manifest.json
/usr/bin/python3 - rs/step_00000020/manifest.json ck_z1/step_00000020/manifest.json <<'PY' \
  || fail "the resharded files do not hold what the ZeRO 1 ranks save"
import json, sys
per_rank = [[sorted((p["tensor"], tuple(p["range"])) for p in f["pieces"])
             for f in sorted(json.load(open(a))["shards"], key=lambda f: f["rank"])]
            for a in sys.argv[1:]]
assert per_rank[0] == per_rank[1], "reshard and the run cut the state differently"
PY
run_launch z1_from_rs 4 1 2 25 "${ck[@]}" "${z1[@]}" "${dst[@]}" --resume rs/step_00000020
check_resumed z1_from_rs z1_tail.jsonl --rtol 1e-5
echo "moe zero 1: all layouts match one process; resumes and plan agree"
