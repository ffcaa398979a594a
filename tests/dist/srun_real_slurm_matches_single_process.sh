# Ranks started by a real `srun` (a private one-node Slurm started here) rendezvous from Slurm's own
# environment and reproduce the single-process run; one failing task makes srun fail fast.
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null; then
  echo "SKIPPED: slurm-wlm not installed"
  exit 77
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: the private Slurm needs root (slurmd runs tasks as their user)"
  exit 77
fi
source "$2/tests/lib/dist_common.sh"

# slurmstepd puts a Unix socket (107-byte path limit) in SlurmdSpoolDir, and the work dir lies under
# the clone's build tree, whose length we do not control: keep Slurm's own files in a short path.
slurm_dir=$(mktemp -d /tmp/tslurm.XXXXXX)
stop_slurm() {
  local f pid
  for f in "$slurm_dir"/slurmd.pid "$slurm_dir"/slurmctld.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
  done
  for f in "$slurm_dir"/slurmd.pid "$slurm_dir"/slurmctld.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
trap 'stop_slurm; rm -rf "$work" "$slurm_dir"' EXIT
# slurm_logs: what Slurm itself said, for a failure that Slurm reports rather than trainer.
slurm_logs() { tail -n 30 "$slurm_dir"/slurmd.log "$slurm_dir"/slurmctld.log 2>/dev/null || true; }

# A base port in [20001, 32000) (below the ephemeral range) with the next 3 ports free too: job J
# derives its rendezvous port 20000 + J % 20000 (launch_env.cpp), so FirstJobId=base-20000 gives
# this test's jobs base, base+1, ...
free_job_ports() {
  /usr/bin/python3 - <<'EOF'
import random, socket
for _ in range(200):
    base = random.randrange(20001, 31990)
    try:
        socks = [socket.socket() for _ in range(4)]
        for i, s in enumerate(socks):
            s.bind(("127.0.0.1", base + i))
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
EOF
}

write_slurm_conf() {
  mkdir -p "$slurm_dir/state" "$slurm_dir/spool"
  cat >"$slurm_dir/slurm.conf" <<EOF
ClusterName=trainertest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$slurm_dir/state
SlurmdSpoolDir=$slurm_dir/spool
SlurmctldPidFile=$slurm_dir/slurmctld.pid
SlurmdPidFile=$slurm_dir/slurmd.pid
SlurmctldLogFile=$slurm_dir/slurmctld.log
SlurmdLogFile=$slurm_dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
FirstJobId=$1
NodeName=localhost CPUs=16 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start_slurm() {
  local v
  for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done  # not inside an outer job
  export SLURM_CONF=$slurm_dir/slurm.conf
  slurmctld -D -i >"$slurm_dir/slurmctld.out" 2>&1 &
  echo $! >"$slurm_dir/slurmctld.pid"
  slurmd -D -N localhost >"$slurm_dir/slurmd.out" 2>&1 &
  echo $! >"$slurm_dir/slurmd.pid"
  for _ in $(seq 100); do
    [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ] && return 0
    sleep 0.1
  done
  cat "$slurm_dir"/*.log "$slurm_dir"/*.out 2>/dev/null
  fail "private slurm did not come up within 10 s"
}

base_port=$(free_job_ports)
[ -n "$base_port" ] || fail "no 4 consecutive free ports in [20001, 32000)"
write_slurm_conf $((base_port - 20000))
start_slurm

run_single ref 4 2 12
args=("$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12)
# run_srun OUT NTASKS MICRO_BATCH (global batch 8 as in ref): MASTER_* unset, so the ranks take
# the master from Slurm's node list and the port from its job id.
run_srun() {
  local out=$1 n=$2 mb=$3
  env -u MASTER_ADDR -u MASTER_PORT srun --kill-on-bad-exit=1 --overcommit -n "$n" \
    "$bin" train "${args[@]}" --set train.micro_batch="$mb" --out "$out" >"$out.log" 2>&1 \
    || { cat "$out.log"; slurm_logs; fail "srun -n $n run $out failed"; }
}
run_srun srun2 2 4
compare_metrics ref/metrics.jsonl srun2/metrics.jsonl --rtol 1e-5 --min-steps 12
run_srun srun4 4 2
compare_metrics ref/metrics.jsonl srun4/metrics.jsonl --rtol 1e-5 --min-steps 12

# Failure path: rank 1 throws at step 3 of a long run; srun must report failure well before the
# run could have finished (rank 0 alone would block in its next all-reduce).
start=$(date +%s.%N)
rc=0
env -u MASTER_ADDR -u MASTER_PORT TRAINER_TEST_FAULT="rank=1,step=3,kind=throw" \
  srun --kill-on-bad-exit=1 --overcommit -n 2 "$bin" train "${args[@]}" --set train.micro_batch=4 \
  --set train.steps=100000 \
  --out fault >fault.log 2>&1 || rc=$?
elapsed=$(/usr/bin/python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" \
  "$start" "$(date +%s.%N)")
echo "fault run: srun exit $rc after ${elapsed}s"
[ "$rc" != 0 ] || { cat fault.log; fail "srun exited 0 although rank 1 failed"; }
/usr/bin/python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 30)" "$elapsed" \
  || { cat fault.log; fail "srun took ${elapsed}s (>= 30 s) to end after rank 1 failed"; }
