# Ranks started by a real `torchrun --no_python` (PyTorch's elastic agent, which itself listens on
# MASTER_PORT, so our store takes MASTER_PORT + 1) reproduce the single-process run.
# scripts/setup-deps.sh installs torchrun (Debian's python3-torch); skips where it is absent.
if ! command -v torchrun >/dev/null; then
  echo "SKIPPED: torchrun not installed (Debian: python3-torch)"
  [ "${CI:-}" = true ] && { echo "FAIL: CI installs python3-torch (scripts/setup-deps.sh)"; exit 1; }
  exit 77
fi
source "$2/tests/lib/dist_common.sh"

run_single ref 4 2 12
args=("$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 --set train.micro_batch=4)
# `-r 9:1 -t 9:1` name a local rank that does not exist: Debian's torchrun (torch 1.13) crashes at
# start on Python 3.11 when these options are left at their defaults.
timeout 120 torchrun -r 9:1 -t 9:1 --nproc_per_node 2 --master_addr 127.0.0.1 \
  --master_port "$(free_port)" --log_dir torchrun_logs --no_python \
  "$bin" train "${args[@]}" --out torchrun >torchrun.log 2>&1 \
  || { cat torchrun.log; fail "torchrun run failed"; }
compare_metrics ref/metrics.jsonl torchrun/metrics.jsonl --rtol 1e-5 --min-steps 12
