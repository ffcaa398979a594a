# scripts/fuzz_faults.py on five trials of seed 3, each a random layout whose ranks start as
# torchrun starts them (no launcher to end the group) and one of them killed or stopped at a random
# moment of the run. Every other rank must exit by itself within distributed.timeout_s + 15 s,
# with an error naming that rank, and the last checkpoint reported saved must resume the clean
# run's losses exactly. The five are the script's first failures, fixed since: a ZeRO-3 survivor
# that died in std::terminate (trials 8, 12); rank 0 killed while the groups connect, blamed on
# itself by the survivors (11); a rank stopped while the groups connect, which held the others for
# 5 timeouts (10); and a rank stopped mid-step, blamed on the ranks blocked behind it (18: the
# chain 0 -> 2 -> 3 -> 7). Run alone (RUN_SERIAL): a fault's timing is what it tests.
source "$2/tests/lib/common.sh"
/usr/bin/python3 "$src/scripts/fuzz_faults.py" --seed 3 --trials 19 --only 8 10 11 12 18 \
  --trainer "$bin" --keep "$work/fuzz" >fuzz.log 2>&1 || { cat fuzz.log; fail "a fault broke a promise"; }
cat fuzz.log
grep -q "^5 passed, 0 refused, 0 failed" fuzz.log || fail "not all five trials ran"
