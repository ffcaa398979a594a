# precision.compute: fp8 keeps delayed-scaling state (amax histories, scales) across steps; a
# checkpoint must carry it, or the resumed run quantizes its first step differently. On the cpu
# backend's fp8 emulation (the TRAINER_TEST_EMULATED_FP8 test hook), one process: 20 steps straight
# vs 10 steps + --resume auto for 10 more give bit-identical losses.
source "$2/tests/lib/dist_common.sh"
export TRAINER_TEST_EMULATED_FP8=1
det=(--set run.deterministic=true --set model.seq_len=32 --set precision.compute=fp8
  --set checkpoint.every_steps=20)
run_single full 8 1 20 "${det[@]}" --set checkpoint.dir=ck_full
run_single part1 8 1 20 "${det[@]}" --set checkpoint.dir=ck_part --set train.stop_after_steps=10
grep -q '"fp8_scaling"' ck_part/step_00000010/manifest.json || fail "no fp8 state in the manifest"
run_single part2 8 1 20 "${det[@]}" --set checkpoint.dir=ck_part --resume auto
check_fp8_resumed part2 ck_part/step_00000010
check_resume_exact full/metrics.jsonl part1/metrics.jsonl part2/metrics.jsonl 20 "fp8 run"
echo "20 fp8 losses bit-identical across the resume"
