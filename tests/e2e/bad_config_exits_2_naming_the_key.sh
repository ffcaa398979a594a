# Bad input stops the run with exit status 2 and one message naming the key, the value and what
# is allowed, before any output file is created.
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
expect_error() {  # expect_error "message part" train args...
  local want=$1
  shift
  expect_exit_2 "$want" out train run.yaml --set run.out_dir=out "$@"
}
expect_error "train.lrr" --set train.lrr=1
expect_error "did you mean 'train.lr'" --set train.lrr=1
expect_error "train.lr" --set train.lr=-1
expect_error "abc" --set train.lr=abc
expect_error "model.seq_len" --set model.seq_len=0
expect_error "model.n_head" --set model.n_head=5
expect_error "train.schedule" --set train.schedule=cosin
expect_error "no_such_shard" --set data.train=no_such_shard_*.bin
expect_error "parallel" --set parallel.dp=3
expect_error "train.micro_batch = 0" --set train.micro_batch=0
expect_error "parallel.zero = 5" --set parallel.zero=5
expect_error "precision.compute = fp8 needs hardware.device = cuda" --set precision.compute=fp8
expect_error "multiples of 16" --set precision.compute=fp8 --set hardware.device=cuda \
  --set model.d_model=136 --set model.n_head=4
expect_error "model.d_model = 130" --set model.d_model=130
expect_error "train.steps = -1" --set train.steps=-1
expect_error "logging.level" --set logging.level=loud
expect_error "logging.profile_steps" --set logging.profile_steps=-1
expect_error "distributed.timeout_s" --set distributed.timeout_s=0
expect_error "checkpoint.keep = 0" --set checkpoint.keep=0
expect_error "expected key.path=value" --set train.lr
expect_error "model.moe.num_experts = 8 with parallel.tp = 2 needs parallel.sequence_parallel = true" \
  --set model.moe.num_experts=8 --set parallel.tp=2
expect_error "model.moe.top_k = 3 exceeds model.moe.num_experts = 2" \
  --set model.moe.num_experts=2 --set model.moe.top_k=3
expect_error "distributed.backend = gloo needs hardware.device = cpu" --set hardware.device=cuda \
  --set distributed.backend=gloo
expect_error "make_vocab_size_divisible_by = 2147483647: must be in [1, 65536]" \
  --set model.make_vocab_size_divisible_by=2147483647
expect_error "distributed.timeout_s = 1e+300: must be in [0.001, 604800]" \
  --set distributed.timeout_s=1e300
expect_error "tokens per step" --set train.micro_batch=2000000000 --set train.grad_accum=2000000000
# A GPU asked for where there is none (or a binary without CUDA): bad input, naming the key.
if [ ! -e /dev/nvidiactl ]; then
  expect_error "hardware.device = cuda: " --set hardware.device=cuda
fi
touch a_file
expect_error "checkpoint.dir = \"a_file/ck\"" --set checkpoint.dir=a_file/ck \
  --set checkpoint.every_steps=10
# Config files that are not one YAML mapping, and usage errors: status 2 as well.
mkdir -p a_dir
expect_exit_2 "is a directory" out train a_dir --out out
: > empty.yaml
expect_exit_2 "the file is empty" out train empty.yaml --out out
printf 'train:\n  lr: 1.0e-3\n  lr: 5\n' > twice.yaml
expect_exit_2 "'train.lr' is given twice (line 3)" out train twice.yaml --out out
printf 'model: {n_layer: 2}\n---\nmodel: {n_layer: 9}\n' > two_docs.yaml
expect_exit_2 "holds 2 YAML documents" out train two_docs.yaml --out out
expect_exit_2 "config is required" out train
expect_exit_2 "--bogus" out train run.yaml --bogus --out out
expect_exit_2 "must not be empty" out train run.yaml --out ""
expect_exit_2 "not in range" out plan run.yaml --gpus 0
expect_exit_2 "more than the 842496 parameters a rank holds" out plan run.yaml --gpus 1048576
expect_exit_2 "unknown verb 'tarin'; did you mean 'train'?" out tarin run.yaml
expect_exit_2 "trainer ckpt: unknown verb 'bogus' (trainer ckpt takes one of: inspect," out \
  ckpt bogus out
expect_exit_2 "trainer data needs a verb: one of prepare" out data
expect_exit_2 "trainer: unknown option '--bogus' (trainer takes one of: train," out --bogus train
expect_exit_2 "fp8 needs a Hopper GPU" out plan "$src/configs/gpt2_small_cuda.yaml" --gpu a100 \
  --set precision.compute=fp8
expect_exit_2 "--grace-s nan must be in [0, 3600]" out launch --nproc-per-node 1 --grace-s nan \
  run.yaml --out out
expect_exit_2 "--master-port 70000 must be in [1, 65535]" out launch --nproc-per-node 1 \
  --master-port 70000 run.yaml --out out
expect_exit_2 "--nproc-per-node is a launch option but comes after RUN.yaml" out launch run.yaml \
  --nproc-per-node 2 --out out
expect_exit_2 "--grace-s is a launch option but comes after RUN.yaml" out launch \
  --nproc-per-node 1 run.yaml --out out --grace-s=5
expect_exit_2 "--nproc-per-node N is required" out launch run.yaml --out out
expect_exit_2 "model.seq_len = 6 is not divisible by 2 * parallel.cp = 4 (context parallelism" \
  out plan run.yaml --gpus 2 --set parallel.cp=2 --set model.seq_len=6
expect_exit_2 "parallel.ep = 2 needs experts, but model.moe.num_experts = 0" out train \
  run.yaml --set parallel.ep=2 --out out
expect_exit_2 "parallel.zero = 2 with parallel.pp = 2: pipeline parallelism runs with zero 0 or 1" \
  out train run.yaml --set parallel.pp=2 --set parallel.zero=2 --out out
expect_exit_2 "parallel.pipeline.microbatches = 3 is not divisible by parallel.pp = 2 (the interleaved" \
  "" plan run.yaml --gpus 2 --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved \
  --set parallel.pipeline.virtual_stages=2 --set train.micro_batch=6 \
  --set parallel.pipeline.microbatches=3
expect_exit_2 "model.seq_len / parallel.cp = 9 is not divisible by parallel.tp = 2" out plan \
  run.yaml --gpus 2 --set parallel.tp=2 --set parallel.sequence_parallel=true --set model.seq_len=9
TRAINER_ATTENTION=fast expect_exit_2 "TRAINER_ATTENTION = 'fast'" "" plan run.yaml --gpu h100
printf 'model: {n_layer: 2}\nbogus_section: 1\n' > bad.yaml
set +e; "$bin" train bad.yaml >log 2>&1; rc=$?; set -e
[ "$rc" = 2 ] && grep -q bogus_section log || { cat log; fail "unknown section not refused"; }
# Bad input found mid-run (a token past the vocabulary in the second shard, read at step 3) is
# still bad input: exit 2 naming the shard, and the report says failed at that step.
/usr/bin/python3 - <<'PY'
import struct
for name, bad in (("mid_000", False), ("mid_001", True)):
    t = [i % 256 for i in range(2100)]
    if bad:
        t[100] = 300
    header = struct.pack("<3i", 20240520, 1, len(t)) + bytes(4 * 253)
    open(name + ".bin", "wb").write(header + struct.pack(f"<{len(t)}H", *t))
PY
expect_exit_2 "shard mid_001.bin has token 300" "" train run.yaml --set data.train='mid_*.bin' \
  --set train.eval_every=0 --set model.n_layer=1 --out midbad
[ "$(json_get midbad/report.json 'd["run"]["status"], d["run"]["steps_completed"]')" = "failed 2" ] \
  || fail "report of the run that met bad data: $(cat midbad/report.json)"
# `trainer plan` opens token shards as train does: one too small for a global batch is refused.
expect_exit_2 'data.train = "mid_000.bin": shard mid_000.bin has 2100 tokens, fewer than one global batch' \
  "" plan run.yaml --set data.train=mid_000.bin --set train.eval_every=0 --set train.micro_batch=64
# Shards to train on and the default, synthetic, val data: the val loss would measure the
# synthetic source.
expect_error 'data.val = "synthetic:markov" while data.train = "mid_000.bin"' \
  --set data.train=mid_000.bin
# data.val is checked, and read, only where evals run.
expect_exit_2 "data.val = \"nowhere_*.bin\": no file matches" "" train run.yaml \
  --set data.val='nowhere_*.bin' --out noval
"$bin" train run.yaml --set data.val='nowhere_*.bin' --set train.eval_every=0 --set train.steps=1 \
  --set model.n_layer=1 --out noval >noval.log 2>&1 || { cat noval.log; fail "data.val refused with evals off"; }
# Input that once passed or ran away: an empty key (it named the document itself), a bad value
# set through a section (blamed on the file), pp x virtual_stages past an int (it wrapped to a
# divisor), a huge n_layer (plan grew to GBs), experts left out of the size cap (the count
# wrapped), and a file that states no size as weights (a wrapped header size).
printf '"": {run: {name: zz}}\n' >empty_key.yaml
expect_exit_2 'an empty key ("") is not a config key' "" plan empty_key.yaml
expect_error "--set 'train={lr: -1}': train.lr = -1.0: must be > 0" --set 'train={lr: -1}'
expect_exit_2 "virtual_stages = 4294967294" "" plan run.yaml --gpus 2 --set model.n_layer=2 \
  --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved \
  --set parallel.pipeline.virtual_stages=2147483647
expect_error "model.n_layer = 2147483647: must be in [1, 65536]" --set model.n_layer=2147483647 \
  --set model.d_model=1 --set model.n_head=1 --set model.ffn_mult=1
expect_error "the parameter count (from model.n_layer, d_model, ffn_mult, moe.num_experts" \
  --set model.n_layer=1 --set model.d_model=65536 --set model.n_head=1 --set model.ffn_mult=1 \
  --set model.moe.num_experts=2147483647 --set model.moe.top_k=1
expect_error "bad header size" --set model.init_from=/proc/self/status
echo "bad configs refused"
