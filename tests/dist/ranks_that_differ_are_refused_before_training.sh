# Ranks started by hand (torchrun's or srun's environment) that do not run the same thing are
# refused before any step, on every rank, with exit 2 and a message naming the rank and what
# differs: another train.lr (which would let the replicas drift apart silently), another
# WORLD_SIZE (gloo's internal check before), a second process with a RANK already taken (the whole
# group, when it comes before the run starts), another view of checkpoint.dir. Each case ends
# within seconds, not after distributed.timeout_s.
source "$2/tests/lib/dist_common.sh"
args=("$src/configs/tiny.yaml" "${small[@]}" --set train.steps=3 --set distributed.timeout_s=60)
# new_case: a fresh port and pid list, and the clock of the case's refusals. (Each refusal is
# timed on its own: the script's whole time, its training runs included, reached 50 s on a loaded
# 2-core machine while every refusal came within seconds.)
new_case() { port=$(free_port) pids=() case_start=$SECONDS; }
# in_time WHAT: fail unless the case so far took less than distributed.timeout_s (60) less a margin
in_time() {
  [ $((SECONDS - case_start)) -lt 45 ] \
    || fail "$1 took $((SECONDS - case_start)) s (distributed.timeout_s is 60): it waited the timeout"
}

# start_rank NAME RANK WORLD_SIZE [train args]: one rank in the background, its log in NAME.log
start_rank() {
  local name=$1 rank=$2 world=$3
  shift 3
  RANK=$rank WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" train "${args[@]}" --out "out_$port" "$@" >"$name.log" 2>&1 &
  pids+=($!)
}
# expect_refused WANT NAME...: each named rank exits 2 saying WANT; no step was trained.
expect_refused() {
  local want=$1
  shift
  local i=0
  for name in "$@"; do
    set +e
    wait "${pids[$i]}"
    local rc=$?
    set -e
    i=$((i + 1))
    [ "$rc" = 2 ] || { cat "$name.log"; fail "$name exited $rc, not 2"; }
    grep -qF -- "$want" "$name.log" || { cat "$name.log"; fail "$name did not say '$want'"; }
    ! grep -Eq "step +1/" "$name.log" || { cat "$name.log"; fail "$name trained a step"; }
  done
  in_time "the refusal of $*"
  echo "ok: $* -> $want"
}

new_case
start_rank lr0 0 2
start_rank lr1 1 2 --set train.lr=1e-3
expect_refused "rank 1 (" lr0 lr1
grep -qF "runs another config than rank 0: train.lr: 0.003 -> 0.001" lr1.log || { cat lr1.log; fail "the key is not named"; }

new_case
start_rank world0 0 2
start_rank world1 1 3
expect_refused "rank 1 (" world0 world1
grep -qF "has WORLD_SIZE 3, rank 0 has 2" world1.log || { cat world1.log; fail "WORLD_SIZE not named"; }

# RANK 1 twice and no RANK 2, before the run started: all three are refused at once (the group
# would otherwise wait distributed.timeout_s for the RANK 2 the launch left out).
new_case
start_rank twice0 0 3
start_rank twice1 1 3
sleep 0.5  # (the first RANK 1 usually claims it first)
start_rank twice1b 1 3
expect_refused "RANK 1 " twice0 twice1 twice1b
grep -qF "RANK 1 was started twice (" twice0.log || { cat twice0.log; fail "rank 0 does not name the duplicate"; }
# Which of the two claims RANK 1 first is a race (both retry the store's connection, with
# backoff, until rank 0 serves it: on a loaded machine the later one may connect first): the one
# that holds it learns that RANK 2 is missing, the other that RANK 1 is taken.
holder=twice1 dup=twice1b
grep -qF "RANK 1 is taken by another process" twice1.log && holder=twice1b dup=twice1
grep -qF "RANK 2 of WORLD_SIZE 3 has not come" $holder.log || { cat $holder.log; fail "the missing RANK 2 is not named"; }
grep -qF "RANK 1 is taken by another process" $dup.log || { cat $dup.log; fail "$dup is not told RANK 1 is taken"; }

# The first RANK 1 trains with rank 0; a second one, started once they train, is refused.
new_case
start_rank dup_zero 0 2 --set train.steps=400
start_rank dup_first 1 2 --set train.steps=400
for _ in $(seq 300); do grep -Eq "step +1/" dup_zero.log && break; sleep 0.1; done
grep -Eq "step +1/" dup_zero.log || { cat dup_zero.log; fail "rank 0 did not start training"; }
case_start=$SECONDS
start_rank dup_second 1 2 --set train.steps=400
set +e
wait "${pids[2]}"
rc=$?
set -e
[ "$rc" = 2 ] || { cat dup_second.log; fail "the second RANK 1 exited $rc, not 2"; }
in_time "the refusal of the second RANK 1"
grep -qF "RANK 1 is taken by another process" dup_second.log || { cat dup_second.log; fail "no duplicate RANK message"; }
wait "${pids[0]}" || { cat dup_zero.log; fail "rank 0 beside the first RANK 1 failed"; }
wait "${pids[1]}" || { cat dup_first.log; fail "the first RANK 1 failed"; }
[ -s "out_$port/report.json" ] || fail "the run of rank 0 and the first RANK 1 wrote no report"
echo "ok: a second RANK 1 is refused; the first trains"

# A second RANK 0 cannot serve the store on the port the first one holds: refused (exit 2, not
# a bare "Address already in use" with exit 1), naming the likely causes.
new_case
start_rank zero_first 0 2 --set train.steps=400
start_rank zero_one 1 2 --set train.steps=400
for _ in $(seq 300); do grep -Eq "step +1/" zero_first.log && break; sleep 0.1; done
case_start=$SECONDS
start_rank zero_second 0 2 --set train.steps=400
set +e
wait "${pids[2]}"
rc=$?
took=$((SECONDS - case_start))
kill "${pids[0]}" "${pids[1]}" 2>/dev/null
wait "${pids[0]}" "${pids[1]}"
set -e
case_start=$((SECONDS - took)) in_time "the refusal of the second RANK 0"
[ "$rc" = 2 ] || { cat zero_second.log; fail "the second RANK 0 exited $rc, not 2"; }
grep -qF "a second process started as RANK 0" zero_second.log \
  || { cat zero_second.log; fail "the second RANK 0 is not told why"; }
echo "ok: a second RANK 0 is refused"

# Ranks that see different checkpoints in checkpoint.dir (here a relative checkpoint.dir taken
# from two working directories; on a cluster a node-local path, or a network filesystem's cached
# listing just after a commit): every rank resumes from rank 0's pick, and a rank that does not
# see it refuses the run, naming it. (Listing on its own, rank 1 resumed from step 2 beside rank
# 0's step 4, and the two trained on as two different models.)
mkdir -p cwd0 cwd1
(cd cwd0 && "$bin" train "${args[@]}" --set train.steps=4 --set checkpoint.every_steps=2 \
  --set checkpoint.dir=ck --out o >../views_first.log 2>&1) || { cat views_first.log; fail "first run"; }
cp -r cwd0/ck cwd1/ && rm -r cwd1/ck/step_00000004
new_case
for r in 0 1; do
  (cd cwd$r && RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train \
    "${args[@]}" --set train.steps=8 --set checkpoint.dir=ck --out o >../views$r.log 2>&1) &
  pids+=($!)
done
expect_refused "the checkpoint rank 0 resumes from: every rank must see the same checkpoint.dir" \
  views0 views1
grep -qF "rank 1 does not see ck/step_00000004" views1.log || { cat views1.log; fail "rank 1 not named"; }

# A fresh run whose checkpoint.dir is not one directory for all ranks (again relative, from two
# working directories; on a cluster a node-local disk) is refused at the start, naming the rank
# that does not see it; not at its first save, after the training before it.
new_case
for r in 0 1; do
  (cd cwd$r && RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train \
    "${args[@]}" --set checkpoint.every_steps=2 --set checkpoint.dir=apart --out o2 \
    --set distributed.timeout_s=6 >../apart$r.log 2>&1) &
  pids+=($!)
done
expect_refused "rank 1 of 2 does not see the file rank 0 created in apart (on rank 0: $(pwd -P)/cwd0/apart)" \
  apart0 apart1
[ "$(ls -A cwd0/apart)" = .trainer.lock ] || { ls -A cwd0/apart; fail "rank 0's check file stays"; }

# Train shards that differ on one rank (again a relative data.train from two working directories,
# the second holding one shard more; on a cluster a stale node-local copy): every rank refuses,
# naming that rank and the first difference, before any checkpoint is read. (Each rank reading
# its own list, rank 1 went on into a shard rank 0 does not have, or started another pass.)
/usr/bin/python3 - <<'PY'
import random, struct
def shard(name, seed, n=5000):
    rng = random.Random(seed)
    t = [rng.randrange(256) for _ in range(n)]
    open(name, "wb").write(struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253) + struct.pack(f"<{n}H", *t))
for d in ("cwd0", "cwd1"):
    for i in (0, 10):
        shard(f"{d}/sh_{i:04d}.bin", i)
PY
start_pair() {  # start_pair NAME [args]: ranks 0 and 1 from cwd0 and cwd1
  local name=$1 top=$PWD
  shift
  new_case
  for r in 0 1; do
    (cd cwd$r && RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train \
      "${args[@]}" --set train.micro_batch=4 --set data.train='sh_*.bin' \
      --set checkpoint.dir="$top/ck_sh" --set checkpoint.every_steps=4 --out "$top/$name" "$@" \
      >../$name$r.log 2>&1) &
    pids+=($!)
  done
}
start_pair sh_first --set train.steps=6  # steps 5 and 6 read the second shard
for p in "${pids[@]}"; do wait $p || { cat sh_first*.log; fail "the run on shards failed"; }; done
cp cwd0/sh_0010.bin cwd1/sh_0005.bin  # sorted in before the shard step 6 was reading, on rank 1
start_pair sh_second --set train.steps=8
expect_refused "rank 1 sees other shards than rank 0: shard 2 is sh_0005.bin (5000 tokens) on rank 1, sh_0010.bin (5000 tokens) on rank 0" \
  sh_second0 sh_second1
