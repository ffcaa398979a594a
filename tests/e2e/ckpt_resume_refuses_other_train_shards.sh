# A checkpoint's loader position (shard, token, pass) continues only over the train shards it was
# saved reading. A shard sorted in before the one it was reading (a glob that now matches one file
# more) is refused with exit 2, naming the shard; a shard added after it resumes and trains as the
# uninterrupted run on all of them does, bit for bit; under data.shuffle (each pass's order takes
# in every shard) any change is refused.
source "$2/tests/lib/dist_common.sh"
mkdir s
/usr/bin/python3 - <<'PY'
import random, struct
def shard(name, seed, n=1300):
    rng = random.Random(seed)
    t = [rng.randrange(256) for _ in range(n)]
    open(name, "wb").write(struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253) + struct.pack(f"<{n}H", *t))
for i in (0, 10, 20):
    shard(f"s/a_{i:04d}.bin", i)
shard("val.bin", 99)
shard("extra.bin", 7)
PY
args=(--set run.deterministic=true --set data.train='s/a_*.bin' --set data.val=val.bin
      --set model.seq_len=64 --set train.eval_every=0 --set checkpoint.every_steps=6)
run_single part1 4 1 20 "${args[@]}" --set checkpoint.dir=ck --set train.stop_after_steps=12
# (stopped in shard 3 of 3)

cp extra.bin s/a_0015.bin  # sorts in before a_0020.bin, the shard step 12 was reading
expect_exit_2 "shard 3 is a_0015.bin (1300 tokens) now, a_0020.bin (1300 tokens) then" "" \
  train "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=20 --set train.micro_batch=4 \
  "${args[@]}" --set checkpoint.dir=ck --out refused
grep -qF "Its position (pass 1, shard 3, token 512) would read other tokens" exit2.log \
  || { cat exit2.log; fail "the refusal does not say the saved position"; }

mv s/a_0015.bin s/a_0030.bin  # after it: read once a_0020.bin is done
run_single part2 4 1 20 "${args[@]}" --set checkpoint.dir=ck
grep -q "resumed from ck/step_00000012" part2.log || { cat part2.log; fail "no resume"; }
run_single full 4 1 20 "${args[@]}" --set checkpoint.dir=ck_full
check_resume_exact full/metrics.jsonl part1/metrics.jsonl part2/metrics.jsonl 20 \
  "run over an appended shard"

run_single shuf 4 1 20 "${args[@]}" --set data.shuffle=true --set train.stop_after_steps=6 \
  --set checkpoint.dir=ck_shuf
rm s/a_0030.bin
expect_exit_2 "3 shard(s) now, 4 then (data.shuffle orders each pass over all of them)" "" train "$src/configs/tiny.yaml" "${small[@]}" \
  --set train.steps=20 --set train.micro_batch=4 "${args[@]}" --set data.shuffle=true \
  --set checkpoint.dir=ck_shuf --out shuf2
echo "other train shards refused; an appended shard resumes exactly"
