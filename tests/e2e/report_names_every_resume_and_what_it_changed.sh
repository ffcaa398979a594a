# A run resumed twice, once with a new lr and once on two processes, reports both resumes with
# what each changed (the first carried through the second's checkpoint; a new stop_after_steps
# is bookkeeping, not a change), and `trainer compare` warns that its steps ran under both
# settings. A fresh run reports none. Each eval's tokens are recorded (the global batch's: at
# dp 2 with half the micro-batch the same 1024; one rank's would be 512).
source "$2/tests/lib/dist_common.sh"
c=(--set train.eval_every=4 --set train.eval_batches=2)
run_single fresh 4 1 12 "${c[@]}"
[ "$(json_get fresh/report.json 'd["run"]["resumes"]')" = "[]" ] || fail "a fresh run's resumes"
# eval tokens: eval_batches x micro_batch x dp x seq_len (128)
[ "$(json_get fresh/report.json 'd["data"]["val_tokens_per_eval"]')" = 1024 ] \
  || fail "val_tokens_per_eval: $(json_get fresh/report.json 'd["data"]')"

run_single twice 4 1 12 "${c[@]}" --set train.stop_after_steps=4
run_single twice 4 1 12 "${c[@]}" --set train.stop_after_steps=8 --set train.lr=1e-3
run_launch twice 2 2 1 12 "${c[@]}" --set train.lr=1e-3
resumes=$(json_get twice/report.json \
  '"; ".join("%d %d %s" % (r["at_step"], r["world_size"], ",".join(r["changes"])) for r in d["run"]["resumes"])')
expected="4 1 train.lr: 0.003 -> 0.001; 8 2 parallel.dp: 1 -> 2,train.micro_batch: 4 -> 2,world: 1 -> 2"
[ "$resumes" = "$expected" ] || fail "resumes: '$resumes', expected '$expected'"
[ "$(json_get twice/report.json 'd["loss"]["curve"][0][0]')" = 512 ] \
  || fail "the twice-resumed run's curve lost its first steps: $(json_get twice/report.json 'd["loss"]["curve"][:2]')"
[ "$(json_get twice/report.json 'd["data"]["val_tokens_per_eval"]')" = 1024 ] \
  || fail "val_tokens_per_eval at dp 2: $(json_get twice/report.json 'd["data"]')"

# A checkpoint resharded for 2 ranks (`ckpt reshard` rewrites its grid) still names the world
# that trained it: the resume on 2 processes changed the world from 1.
run_single one 4 1 12 "${c[@]}" --set train.stop_after_steps=4 --set checkpoint.dir=ck_one
"$bin" ckpt reshard ck_one --to dp=2 --out ck_rs >/dev/null || fail "reshard to dp=2 failed"
"$bin" ckpt inspect ck_rs | grep -q "resharded from a run of world 1" \
  || fail "inspect does not say the resharded checkpoint was trained by world 1"
run_launch one 2 2 1 12 "${c[@]}" --set checkpoint.dir=ck_rs --resume ck_rs
resumed=$(json_get one/report.json '",".join(d["run"]["resumes"][0]["changes"])')
[ "$resumed" = "parallel.dp: 1 -> 2,train.micro_batch: 4 -> 2,world: 1 -> 2" ] \
  || fail "the resume of a resharded checkpoint named: '$resumed'"

"$bin" compare fresh twice >compare.txt 2>&1 || { cat compare.txt; fail "compare failed"; }
grep -qF "warning: a run changed settings when it resumed (tiny (twice): at step 4 train.lr: 0.003 -> 0.001; tiny (twice): at step 8 parallel.dp: 1 -> 2, train.micro_batch: 4 -> 2, world: 1 -> 2)" compare.txt \
  || { cat compare.txt; fail "compare did not warn of the changes at the resumes"; }
echo "both resumes and their changes reported; compare warned"

# Another run's checkpoint resumed into this out_dir (--resume from elsewhere): fresh's lines of
# steps 1-4 are not this run's (their first names fresh's run_id, whatever report.json says), so metrics.jsonl and the report's curve start at step 5, said
# with a warning; the run keeps the checkpoint's run_id, and one resumed in its own out_dir
# (twice) has the same run_id as that out_dir's earlier report.
run_single other 4 1 12 "${c[@]}" --set train.stop_after_steps=4 --set checkpoint.dir=ck_other
: >fresh/report.json  # (lost: the metrics lines themselves name their run)
run_single fresh 4 1 12 "${c[@]}" --set checkpoint.dir=ck_other --resume ck_other/step_00000004
grep -q "fresh/metrics.jsonl held another run's steps" fresh.log || { cat fresh.log; fail "no warning"; }
[ "$(head -1 fresh/metrics.jsonl | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')" = 5 ] \
  || fail "metrics.jsonl kept another run's steps: $(head -2 fresh/metrics.jsonl)"
[ "$(json_get fresh/report.json 'd["loss"]["curve"][0][0]')" = 2560 ] \
  || fail "the curve starts at $(json_get fresh/report.json 'd["loss"]["curve"][0]'), not step 5"
[ "$(json_get fresh/report.json 'd["run"]["run_id"]')" = "$(json_get other/report.json 'd["run"]["run_id"]')" ] \
  || fail "the resumed run has another run_id than its checkpoint's run"
echo "another run's metrics were not spliced into the resumed run's curve"
