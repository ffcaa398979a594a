# Ranks started without `trainer launch`, as torchrun and srun start them (their environment
# variables only), rendezvous and reproduce the single-process run.
source "$2/tests/lib/dist_common.sh"
run_single ref 4 2 12
args=("$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 --set train.micro_batch=4)

# torchrun: its agent already listens on MASTER_PORT (TORCHELASTIC_RUN_ID set), so ours takes +1.
port=$(free_port)
/usr/bin/python3 -c 'import socket,time,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(60)' $port &
agent=$!
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  TORCHELASTIC_RUN_ID=test "$bin" train "${args[@]}" --out torchrun >torchrun.$r.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { cat torchrun.*.log; fail "torchrun-style rank failed"; }; done
kill $agent 2>/dev/null || true
compare_metrics ref/metrics.jsonl torchrun/metrics.jsonl --rtol 1e-5 --min-steps 12

# srun: SLURM_* only; the master is the first host of the node list, the port derives from the job id.
# The runtime derives the port 20000 + job % 20000: pick a job whose port is free, below the
# kernel's ephemeral ports (32768 up), where another test's outgoing connection may take the
# port as its own end between this check and rank 0's bind (Address already in use), and below
# the ports trainer launch picks (from 24000).
job=$(( $(free_port 20000 24000) - 20000 ))
pids=()
for r in 0 1; do
  env -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NNODES=1 \
    SLURM_NTASKS_PER_NODE=2 SLURM_NODEID=0 SLURM_NODELIST='localhost' SLURM_JOB_ID=$job \
    "$bin" train "${args[@]}" --out slurm >slurm.$r.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { cat slurm.*.log; fail "slurm-style rank failed"; }; done
compare_metrics ref/metrics.jsonl slurm/metrics.jsonl --rtol 1e-5 --min-steps 12

# Where Gloo listens, set to what this machine lacks: every rank exits 2 naming the variable and
# its value before any step (Gloo itself dereferences an unfilled address for a host name that
# does not resolve: every rank died of SIGSEGV without a word).
# (198.51.100.1, TEST-NET-2: resolves, but no address of this machine)
for bad in TRAINER_GLOO_HOST=no.such.host.invalid TRAINER_GLOO_HOST=198.51.100.1 \
  GLOO_SOCKET_IFNAME=no_such_if0; do
  port=$(free_port)
  pids=()
  for r in 0 1; do
    env "$bad" RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin" train "${args[@]}" --out bad_gloo >gloo.$r.log 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    rc=0
    wait "${pids[$r]}" || rc=$?
    [ "$rc" = 2 ] || { cat gloo.$r.log; fail "$bad: rank $r exited $rc, not 2"; }
    grep -qF "${bad%%=*} = \"${bad#*=}\"" gloo.$r.log \
      || { cat gloo.$r.log; fail "$bad: rank $r did not name the variable and its value"; }
  done
  [ ! -e bad_gloo/metrics.jsonl ] || fail "$bad: a step ran"
  echo "ok: $bad -> $(grep -m1 error gloo.0.log)"
done
