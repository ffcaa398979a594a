# A run resumed twice, once with a new lr and once on two processes, reports both resumes with
# what each changed (the first carried through the second's checkpoint; a new stop_after_steps
# is bookkeeping, not a change), and `trainer compare` warns that its steps ran under both
# settings. A fresh run reports none. Each eval's tokens are recorded (they grow with dp).
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
[ "$(json_get twice/report.json 'd["data"]["val_tokens_per_eval"]')" = 1024 ] \
  || fail "val_tokens_per_eval at dp 2: $(json_get twice/report.json 'd["data"]')"

"$bin" compare fresh twice >compare.txt 2>&1 || { cat compare.txt; fail "compare failed"; }
grep -qF "warning: a run changed settings when it resumed (tiny (twice): at step 4 train.lr: 0.003 -> 0.001; tiny (twice): at step 8 parallel.dp: 1 -> 2, train.micro_batch: 4 -> 2, world: 1 -> 2)" compare.txt \
  || { cat compare.txt; fail "compare did not warn of the changes at the resumes"; }
echo "both resumes and their changes reported; compare warned"
