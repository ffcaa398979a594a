# `trainer launch` exits with a failing rank's own exit code and names the rank: every rank of a
# bad config exits like the single-process run does, and the launcher reports the first of them.
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
set +e
"$bin" train run.yaml --set train.lrr=1 --set run.out_dir=out >single.log 2>&1
single_rc=$?
"$bin" launch --nproc-per-node 2 run.yaml --set train.lrr=1 --set run.out_dir=out >launch.log 2>&1
launch_rc=$?
set -e
[ "$single_rc" != 0 ] || fail "the bad config did not fail in one process"
[ "$launch_rc" = "$single_rc" ] || { cat launch.log; fail "launch exited $launch_rc, one process $single_rc"; }
grep -qE "^launch: rank [01] exited with code $single_rc\$" launch.log ||
  { cat launch.log; fail "no 'launch: rank R exited with code $single_rc' line"; }
grep -q "^\[rank [01]\] .*train.lrr" launch.log || { cat launch.log; fail "rank's message not prefixed"; }
echo "ok: launch exited $launch_rc like the single process"

# Options the launcher does not know, before RUN.yaml, are refused with status 2.
set +e; "$bin" launch --nproc-per-node 2 --bogus run.yaml >bogus.log 2>&1; rc=$?; set -e
[ "$rc" = 2 ] && grep -q -- "--bogus" bogus.log || { cat bogus.log; fail "--bogus gave $rc"; }
echo "ok: unknown launch option refused"
