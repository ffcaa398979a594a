#!/usr/bin/python3
"""Random failures in random layouts: the promise DESIGN.md makes about a dead or hung rank, over
moments and layouts that no single test picks.

Each trial draws a layout as scripts/fuzz_layouts.py does (dp x pp x cp x tp, ep, ZeRO, sequence
parallelism, 1f1b or interleaved, MoE, shards, bf16) plus a checkpoint interval and sync or async
saves, and starts its ranks without a launcher (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, as
torchrun and srun start them: no launcher kills the group for them). A clean run of that layout
gives the reference and its duration; a second run gets one fault:

  kill   SIGKILL of a random rank at a random moment of the run (start-up, rendezvous, a step, a
         collective, a save, the eval, the report);
  stop   SIGSTOP of a random rank at a random moment: alive, sockets open, silent;
  throw  an exception in a random rank at the start of a random step (TRAINER_TEST_FAULT);
  exit   a random rank calls _Exit(3) at the start of a random step (no chance to report).

Checked after it, for every other rank: it exits by itself (no hang) within distributed.timeout_s
plus a margin of the fault; with an error (not a signal, not SIGPIPE's 141) whose text names the
rank that failed; or with 0 only if it had finished the run. And the checkpoints: the last one
that rank 0 reported saved exists, `--resume auto` on the same layout loads it or a newer
complete one (never an incomplete write), and the resumed run's losses and grad norms equal the
clean run's exactly from the step after it (run.deterministic).

usage: scripts/fuzz_faults.py [--trials N] [--seed S] [--max-world W] [--timeout-s T] [--keep DIR]
       [--only T ...] [--trainer BIN]; env BUILD_DIR (default build/). Exits 1 if any trial failed; failing
       trials' logs stay under --keep (default /tmp/fuzz_faults).
"""
import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_layouts as layouts  # noqa: E402  (the layout draws, shared with the layout fuzzer)

STEPS = 12
MARGIN_S = 15  # after the timeout: the grace to name the rank, and a loaded 2-core machine


def free_port_pair():
    """A port free together with the next one (a torchrun-style run puts the store on +1)."""
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(10000, 20000)
        try:
            for q in (p, p + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
        except OSError:
            continue
        return p
    raise RuntimeError("no free port pair")


class Group:
    """The ranks of one run, started as torchrun would start them, each with its own log."""

    def __init__(self, tdir, name, world, settings, env, extra=()):
        port = free_port_pair()
        self.logs = [os.path.join(tdir, f"{name}.{r}.log") for r in range(world)]
        # (one run.out_dir for all: ranks that differ in it are refused, run_agreement.h)
        self.outs = [os.path.join(tdir, name)] * world
        self.start = time.monotonic()
        self.procs = []
        for r in range(world):
            cmd = [layouts.BIN, "train", layouts.CONFIG, *layouts.args_of(settings), "--out",
                   self.outs[r], *extra]
            renv = dict(env, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))
            with open(self.logs[r], "w") as f:
                f.write(f"RANK={r} WORLD_SIZE={world} MASTER_PORT={port} " + " ".join(cmd) + "\n")
                f.flush()
                # (in the trial's directory: a core dump, where enabled, stays with its logs)
                self.procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                                   env=renv, cwd=tdir))
        self.ended = [None] * world  # monotonic time each rank exited

    def poll(self):
        for r, p in enumerate(self.procs):
            if self.ended[r] is None and p.poll() is not None:
                self.ended[r] = time.monotonic()

    def wait(self, ranks, deadline):
        """Waits until `ranks` have exited or `deadline` (monotonic) passes."""
        while True:
            self.poll()
            if all(self.ended[r] is not None for r in ranks) or time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()


def log_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def metrics_of(out):
    path = os.path.join(out, "metrics.jsonl")
    return layouts.metrics(path) if os.path.exists(path) else {}


def backtraces(pid, path):
    """A hung rank's threads, for the failure's logs (where gdb is installed)."""
    if shutil.which("gdb"):
        with open(path, "w") as f:
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=120)


def names_rank(text, rank):
    """Whether an error text names global rank `rank` (the forms failure_report.cpp writes)."""
    if re.search(rf"\brank {rank}\b", text):
        return True
    return any(rank in [int(x) for x in m.split(", ")]
               for m in re.findall(r"(?:did not arrive: |rank\(s\) )(\d+(?:, \d+)*)", text))


def last_reported_save(text, ck):
    steps = [int(m) for m in re.findall(r"checkpoint saved: " + re.escape(ck) + r"/step_(\d+)", text)]
    return max(steps, default=0)


def draw_trial(rng, max_world, shards):
    """(settings, world, description) of a layout with checkpoints, or None."""
    model = layouts.draw_model(rng)
    grid = layouts.draw_grid(rng, model, max_world)
    if grid is None:
        return None
    train = layouts.draw_training(rng, grid, "model.moe.num_experts" in model)
    if train is None:
        return None
    data = layouts.draw_data(rng, shards)
    settings = {**layouts.COMMON, **model, **data, **grid, **train, "train.steps": STEPS,
                "checkpoint.every_steps": rng.choice([2, 3, 5]),
                "checkpoint.async": rng.choice(["true", "false"]), "checkpoint.keep": 2}
    shown = {**model, **grid, **train, "every": settings["checkpoint.every_steps"],
             "async": settings["checkpoint.async"]}
    if data:
        shown["data"] = "shards" + (" shuffled" if data["data.shuffle"] == "true" else "")
    desc = " ".join(f"{k.split('.')[-1]}={v}" for k, v in shown.items())
    return settings, layouts.world_of(grid), desc


def exit_times(group, ranks, fault_at):
    """'rank: seconds' from the fault to each rank's exit, for the order of events in a failure."""
    return ", ".join(f"{r}: {group.ended[r] - fault_at:.2f}" for r in ranks
                     if group.ended[r] is not None)


def check_survivors(group, victim, fault_at, timeout_s):
    """The first broken promise among the ranks other than `victim`, or None; and the slowest
    rank's seconds from the fault to its exit."""
    world = len(group.procs)
    others = [r for r in range(world) if r != victim]
    group.wait(others, fault_at + timeout_s + MARGIN_S)
    slowest = 0.0
    for r in others:
        if group.ended[r] is None:
            backtraces(group.procs[r].pid, group.logs[r] + ".hung.txt")
            return f"rank {r} still running {timeout_s + MARGIN_S:.0f} s after the fault (hung)", None
        slowest = max(slowest, group.ended[r] - fault_at)
        rc = group.procs[r].returncode
        text = log_text(group.logs[r])
        if rc < 0:
            return f"rank {r} died of signal {-rc} instead of exiting with an error", slowest
        if rc == 141:
            return f"rank {r} exited 141 (SIGPIPE) instead of naming rank {victim}", slowest
        if rc == 0:
            # the fault came after the last step (rank 0 logs each step as the group ends it)
            last = max(metrics_of(group.outs[0]), default=0)
            if last != STEPS:
                return f"rank {r} exited 0, but the run logged steps up to {last} of {STEPS}", slowest
            continue
        if not names_rank(text, victim):
            err = [l for l in text.splitlines() if "error" in l.lower()]
            return (f"rank {r} exited {rc} without naming rank {victim}: "
                    f"{err[-1] if err else text.splitlines()[-1:]} "
                    f"(exits after the fault, s: {exit_times(group, others, fault_at)})"), slowest
    return None, slowest


def faulted_run(tdir, world, settings, env, fault, ck, timeout_s):
    """Runs the layout with `fault` (kind, victim, step, delay in s) and checks the others.
    Returns (the broken promise or None, the slowest survivor's seconds to exit, the fault in
    words, the last step rank 0 reported saved)."""
    kind, victim, step, delay = fault
    fenv = dict(env)
    what = f"{kind} rank {victim}"
    if kind in ("throw", "exit"):
        fenv["TRAINER_TEST_FAULT"] = f"rank={victim},step={step},kind={kind}"
        what += f" at step {step}"
    else:
        what += f" at {delay:.2f} s"
    run = Group(tdir, "fault", world, {**settings, "checkpoint.dir": ck}, fenv)
    if kind in ("kill", "stop"):
        time.sleep(max(0.0, run.start + delay - time.monotonic()))
        run.procs[victim].send_signal(signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        fault_at = time.monotonic()
    else:
        run.wait([victim], time.monotonic() + 600)
        fault_at = run.ended[victim] or time.monotonic()
    why, slowest = check_survivors(run, victim, fault_at, timeout_s)
    run.kill_all()
    reported = last_reported_save(log_text(run.logs[0]), ck)
    if why is None and reported and not os.path.exists(f"{ck}/step_{reported:08d}/manifest.json"):
        why = f"step {reported} was reported saved but {ck}/step_{reported:08d} is incomplete"
    return why, slowest, what, reported


def check_resume(tdir, world, settings, env, ck, reported, ref):
    """`--resume auto` on the same layout must load `reported` or a newer complete checkpoint and
    log the clean run's losses from the step after it, bit for bit. Returns (the broken promise
    or None, the step it loaded)."""
    res = Group(tdir, "resumed", world, {**settings, "checkpoint.dir": ck,
                                         "checkpoint.every_steps": 0}, env, ["--resume", "auto"])
    res.wait(range(world), time.monotonic() + 600)
    rcs = [p.returncode for p in res.procs]
    res.kill_all()
    m = re.search(r"resumed from " + re.escape(ck) + r"/step_(\d+)", log_text(res.logs[0]))
    loaded = int(m.group(1)) if m else 0
    rows = metrics_of(res.outs[0])
    if any(rc != 0 for rc in rcs):
        return f"the resumed run failed, rcs {rcs}", loaded
    if loaded < reported:
        return f"step {reported} was reported saved, but the resume loaded {loaded or 'nothing'}", \
            loaded
    if loaded < STEPS and min(rows, default=0) != loaded + 1:  # (== STEPS: nothing to train)
        return f"resumed from step {loaded}, but logged steps {sorted(rows)}", loaded
    for s in range(loaded + 1, STEPS + 1):
        for field in ("loss", "grad_norm", "val_loss"):
            a, b = ref.get(s, {}).get(field), rows.get(s, {}).get(field)
            if a != b:
                return f"step {s} {field}: clean {a}, resumed {b}", loaded
    return None, loaded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--max-world", type=int, default=8)
    ap.add_argument("--timeout-s", type=float, default=5.0, help="distributed.timeout_s")
    ap.add_argument("--keep", default="/tmp/fuzz_faults")
    ap.add_argument("--only", type=int, nargs="+", help="run only these trials (same draws)")
    ap.add_argument("--trainer", default=layouts.BIN, help="the binary (default: $BUILD_DIR/trainer)")
    a = ap.parse_args()
    layouts.BIN = a.trainer
    rng = random.Random(a.seed)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    os.makedirs(a.keep, exist_ok=True)
    shards = os.path.join(a.keep, "shards")
    layouts.write_shards(shards, a.seed)
    passed, refused, failed, latencies = 0, 0, [], []
    print(f"fuzz_faults: seed {a.seed}, {a.trials} trials, timeout_s {a.timeout_s}, {layouts.BIN}",
          flush=True)
    for t in range(a.trials):
        drawn = draw_trial(rng, a.max_world, shards)
        if drawn is None:
            continue
        settings, world, desc = drawn
        settings["distributed.timeout_s"] = a.timeout_s
        # the fault, drawn before anything runs (so that --only replays a trial's draws)
        kind = rng.choices(["kill", "stop", "throw", "exit"], [45, 25, 15, 15])[0]
        victim = rng.randrange(world)
        step = rng.randint(1, STEPS)  # throw, exit: at the start of this step
        moment = rng.random()  # kill, stop: at this fraction of the clean run's duration
        if a.only is not None and t not in a.only:
            continue
        tdir = os.path.join(a.keep, f"trial_{t:03d}")
        shutil.rmtree(tdir, ignore_errors=True)
        os.makedirs(tdir)
        # 1. The clean run: the reference and how long a run takes.
        clean = Group(tdir, "clean", world, {**settings, "checkpoint.dir": f"{tdir}/ck_clean"}, env)
        clean.wait(range(world), time.monotonic() + 600)
        rcs = [p.returncode for p in clean.procs]
        clean.kill_all()
        if rcs[0] == 2:
            refused += 1
            shutil.rmtree(tdir)
            print(f"trial {t}: refused: {desc}", flush=True)
            continue
        duration = max(clean.ended) - clean.start
        if any(rc != 0 for rc in rcs):
            failed.append((t, f"the clean run failed, rcs {rcs}: {desc}"))
            print(f"trial {t}: FAILED (clean run rcs {rcs}): {desc}", flush=True)
            continue
        ref = layouts.metrics(os.path.join(clean.outs[0], "metrics.jsonl"))
        # 2. The faulted run; 3. the last checkpoint it reported saved must resume exactly.
        ck = f"{tdir}/ck"
        fault = (kind, victim, step, moment * duration)
        why, slowest, what, reported = faulted_run(tdir, world, settings, env, fault, ck,
                                                   a.timeout_s)
        if slowest is not None:
            latencies.append(slowest)
        desc = f"{what}{f' of {duration:.2f} s' if kind in ('kill', 'stop') else ''}: {desc}"
        if why is None:
            why, loaded = check_resume(tdir, world, settings, env, ck, reported, ref)
            desc += f" (saved {reported}, resumed {loaded})"
        if why is None:
            passed += 1
            shutil.rmtree(tdir)
            print(f"trial {t}: ok, {slowest:.1f} s: {desc}", flush=True)
        else:
            failed.append((t, f"{why}: {desc}"))
            print(f"trial {t}: FAILED ({why}): {desc}", flush=True)
    lat = sorted(latencies)
    print(f"\n{passed} passed, {refused} refused, {len(failed)} failed (seed {a.seed}); the slowest "
          f"surviving rank's exit after the fault: median {lat[len(lat) // 2] if lat else 0:.1f} s, "
          f"max {lat[-1] if lat else 0:.1f} s (timeout_s {a.timeout_s})")
    for t, why in failed:
        print(f"FAILED trial {t}: {why}\n    logs: {os.path.join(a.keep, f'trial_{t:03d}')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
