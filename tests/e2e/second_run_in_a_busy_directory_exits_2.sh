# A second run in a directory another run is using (its run.out_dir, or its checkpoint.dir) is
# refused with exit status 2 naming the directory and the run that holds it, before it writes
# anything; under `trainer launch` every rank refuses so; so is `ckpt reshard --out` into its
# checkpoint.dir. The first run goes on, and its directory is free once it ends.
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
# The first run plans no save (every_steps 0): a stop signal still saves into its checkpoint.dir,
# which it holds all the same.
"$bin" train run.yaml --out first --set train.steps=100000 --set checkpoint.every_steps=0 \
  >first.log 2>&1 &
first=$!
trap 'kill -9 $first 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  grep -q "step " first.log 2>/dev/null && break
  kill -0 $first 2>/dev/null || { cat first.log; fail "the first run ended early"; }
  sleep 0.1
done
grep -q "step " first.log || fail "the first run logged no step in 60 s"
grep -q "^pid $first on " first/.trainer.lock || fail "first/.trainer.lock: $(cat first/.trainer.lock)"

report_before=$(sha256sum first/report.json)  # (the first run's: status running)
expect_exit_2 "run.out_dir = \"first\" is in use by another run (pid $first on " "" \
  train run.yaml --out first --set train.steps=2
[ "$(sha256sum first/report.json)" = "$report_before" ] || fail "the refused run wrote first/report.json"
expect_exit_2 "is in use by another run (pid $first on " "" \
  launch --nproc-per-node 2 run.yaml --out first --set train.steps=2
# Another out_dir, but the first run's checkpoints (inside its out_dir) as checkpoint.dir.
expect_exit_2 "checkpoint.dir = \"first/checkpoints\" is in use by another run (pid $first on " \
  third train run.yaml --out third --set train.steps=2 --set checkpoint.dir=first/checkpoints \
  --set checkpoint.every_steps=1
# `ckpt reshard --out` into the run's checkpoint.dir: the run would prune what it wrote, or its
# requeue resume another run's checkpoint.
"$bin" train run.yaml --out other --set train.steps=2 --set checkpoint.every_steps=2 >other.log 2>&1 \
  || { cat other.log; fail "the run to reshard failed"; }
expect_exit_2 "ckpt reshard --out = \"first/checkpoints\" is in use by another run (pid $first on " \
  "first/checkpoints/step_00000002" ckpt reshard other/checkpoints --to dp=2,zero=1 --out first/checkpoints
kill -0 $first || fail "the first run died"

kill -TERM $first  # it checkpoints, reports and exits 0
wait $first || { cat first.log; fail "the first run exited $? after SIGTERM"; }
ls first/checkpoints | grep -q '^step_' || fail "the first run saved no checkpoint on SIGTERM"
"$bin" train run.yaml --out first --set train.steps=2 --resume none \
  --set checkpoint.dir=fresh_ck >again.log 2>&1 ||
  { cat again.log; fail "the directory is still held after its run ended"; }
echo "ok: the directory is free once its run ended"
