# checkpoint.dir's free space is judged before the first step: a run that saves is refused (exit
# 2, naming checkpoint.dir, its free space and one checkpoint's size) when not even one checkpoint
# fits, and warned when the later ones may not; the size it states is what a checkpoint takes.
# The step_N.tmp an interrupted save left is removed at the next start. TRAINER_TEST_FREE_BYTES
# stands in for a small filesystem.
source "$2/tests/lib/dist_common.sh"
c=(--set model.seq_len=32 --set checkpoint.every_steps=5 --set checkpoint.dir=ck)
run_launch fits 2 4 1 10 "${c[@]}"
line=$(grep -m1 'checkpoints: about' fits.log) || { cat fits.log; fail "no checkpoint size logged"; }
echo "$line"
# the stated size against the files of the checkpoint of step 10: never less (a bound, with the
# headers, the manifest and the last blocks), and within 6% for this small model of 1.4 MB
/usr/bin/python3 - "$line" ck/step_00000010 <<'PY' || fail "the stated size is not a checkpoint's"
import os, re, sys
m = re.search(r"about ([0-9.]+) (B|KiB|MiB|GiB) each, saves to come: (\d+), keep 2", sys.argv[1])
assert m, sys.argv[1]
stated = float(m[1]) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(m[2])
on_disk = sum(os.path.getsize(os.path.join(sys.argv[2], f)) for f in os.listdir(sys.argv[2]))
print(f"stated {stated:.0f} bytes, on disk {on_disk} bytes, {m[3]} saves")
assert m[3] == "2" and on_disk <= stated * 1.005 and stated < 1.06 * on_disk
PY
# trainer plan states the same size
"$bin" plan "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set train.steps=10 >plan.txt \
  || { cat plan.txt; fail "plan failed"; }
size=$(echo "$line" | grep -o 'about [0-9.]* [KMG]*i*B each')
grep -q "checkpoints: $size (fp32 weights" plan.txt || { cat plan.txt; fail "plan does not say $size"; }

# an interrupted save's step_N.tmp (a killed run's) is removed when the run starts again
mkdir ck/step_00000012.tmp && echo partial >ck/step_00000012.tmp/rank_00000.safetensors
run_launch resumed 2 4 1 15 "${c[@]}" --resume auto
grep -q 'removed an interrupted save, ck/step_00000012.tmp' resumed.log \
  || { cat resumed.log; fail "the interrupted save was not removed"; }
[ ! -e ck/step_00000012.tmp ] || fail "ck/step_00000012.tmp is still there"
[ -d ck/step_00000015 ] || fail "no step 15 checkpoint: $(ls ck)"

# not even one checkpoint fits: refused before any step or file of the run
set +e
TRAINER_TEST_FREE_BYTES=100000 "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" \
  "${small[@]}" "${c[@]}" --set train.steps=10 --set checkpoint.dir=ck_small --out small >small.log 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || { cat small.log; fail "exit $rc with 100000 bytes free, want 2"; }
grep -q 'checkpoint.dir = "ck_small": 97.66 KiB free on its filesystem, and one checkpoint of this model takes about' small.log \
  || { cat small.log; fail "the refusal does not name checkpoint.dir and the sizes"; }
! grep -q 'step      1' small.log || fail "a step ran before the refusal"
[ ! -e small/metrics.jsonl ] || fail "the refused run wrote metrics.jsonl"
[ -z "$(ls ck_small)" ] || fail "the refused run wrote in ck_small: $(ls ck_small)"

# no periodic saves, but train.stop_after_steps saves at its step for certain: refused too
set +e
TRAINER_TEST_FREE_BYTES=100000 "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" \
  "${small[@]}" --set train.steps=10 --set train.stop_after_steps=5 --set checkpoint.dir=ck_stop \
  --out stop >stop.log 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || { cat stop.log; fail "stop_after_steps: exit $rc with 100000 bytes free, want 2"; }
grep -q 'and the run saves 1 time' stop.log || { cat stop.log; fail "stop_after_steps: $(tail -2 stop.log)"; }

# the first checkpoint fits, not the three that keep 2 holds at once: a warning, and the run goes on
bytes=$(( $(du -sb ck/step_00000015 | cut -f1) * 3 / 2 ))
TRAINER_TEST_FREE_BYTES=$bytes run_launch tight 2 4 1 10 "${c[@]}" --set checkpoint.dir=ck_tight
grep -q 'a later save may fail for want of space' tight.log || { cat tight.log; fail "no warning"; }
# no periodic saves: a stop signal's save alone is at stake, a warning
TRAINER_TEST_FREE_BYTES=100000 run_launch no_saves 2 4 1 3 --set checkpoint.dir=ck_none
grep -q 'a save at a stop signal would fail' no_saves.log || { cat no_saves.log; fail "no warning"; }
echo "the free space was judged before the first step"
