#!/usr/bin/python3
"""Random layouts against one process: the property the dist tests check case by case, over the
combinations no single test spells out.

Each trial draws a model (dense or MoE), a grid (dp x pp x cp x tp, ep, ZeRO stage, sequence
parallelism, 1f1b or interleaved pipeline) and training options (grad_accum, recompute, bucket
overlap, fp32 or emulated bf16, the built-in Markov source or token shards of uneven sizes read
in order or shuffled), runs it with `trainer launch` and compares its losses, grad norms and val
losses with the single-process run of the same model on the same global batch (rtol 1e-4 in fp32,
as DESIGN.md's dist tests; bf16 rounds partial sums in a different order, so its losses get 2e-3
and no grad-norm check). Half the trials also stop at a checkpoint and resume it under a second
random grid (the loader resharded), whose steps must match the same reference. And `trainer
plan` of the first grid must print the bytes its run allocated (report.json's memory.breakdown;
per pipeline stage; see plan_mismatch for what it leaves out).

A layout the config validation refuses (exit 2) is counted and its message kept, not failed: the
summary lists the refusals so that a refusal of a combination that should run is visible.

usage: scripts/fuzz_layouts.py [--trials N] [--seed S] [--max-world W] [--keep DIR] [--trainer BIN]
       env BUILD_DIR (default build/). Exits 1 after the trials if any trial mismatched or crashed;
       the failing trials' commands and logs stay under --keep (default /tmp/fuzz_layouts).
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "trainer")
CONFIG = os.path.join(ROOT, "configs", "tiny.yaml")
STEPS = 8
RESUME_AT = 4


def draw_model(rng):
    # vocab 250: padded to 256 (the default multiple, 128), so the vocabulary-parallel head
    # carries padding rows; n_head 8: head size 8
    m = {"model.n_layer": rng.choice([2, 4]), "model.d_model": 64, "model.n_head": rng.choice([4, 8]),
         "model.seq_len": rng.choice([16, 32]), "model.vocab_size": rng.choice([256, 250])}
    if rng.random() < 0.35:
        m["model.moe.num_experts"] = rng.choice([2, 4])
        m["model.moe.top_k"] = rng.choice([1, 2])
        m["model.moe.capacity_factor"] = rng.choice(["1.0", "1.5", "null"])
    return m


def write_shards(dirname, seed):
    """Three train shards of uneven sizes and a val shard in llm.c's format (uint16 tokens)."""
    os.makedirs(dirname, exist_ok=True)
    rng = random.Random(seed)
    for name, n in [("train_0", 3585), ("train_1", 6145), ("train_2", 2561), ("val_0", 4097)]:
        toks = [(i * 7 + (i // 3) * rng.randrange(1, 50)) % 250 for i in range(n)]  # any vocab
        with open(os.path.join(dirname, name + ".bin"), "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack("<%dH" % n, *toks))


def draw_data(rng, shards):
    """The built-in Markov source, or token shard files read in order or shuffled."""
    if rng.random() < 0.7:
        return {}
    return {"data.train": os.path.join(shards, "train_*.bin"),
            "data.val": os.path.join(shards, "val_0.bin"),
            "data.shuffle": rng.choice(["true", "false"])}


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def draw_grid(rng, model, max_world):
    """A grid for `model` that the validation should accept, or None when none was drawn."""
    experts = model.get("model.moe.num_experts", 0)
    for _ in range(50):
        dp, tp, pp, cp = (rng.choice(v) for v in ([1, 2, 4], [1, 2, 4], [1, 2], [1, 2, 4]))
        if dp * tp * pp * cp > max_world or dp * tp * pp * cp == 1:
            continue
        if model["model.seq_len"] % (2 * cp):
            continue
        g = {"parallel.dp": dp, "parallel.tp": tp, "parallel.pp": pp, "parallel.cp": cp,
             # zero 2/3 with pp is refused by design (validate_layout.cpp says why)
             "parallel.zero": rng.choice([0, 1] if pp > 1 else [0, 1, 2, 3]) if dp * cp > 1 else 0,
             "parallel.overlap_grad_reduce": rng.choice(["true", "false"]),
             "parallel.bucket_mb": rng.choice(["0.05", "25"])}
        if tp > 1:  # MoE at tp > 1 routes each tp rank's own rows (validation requires it)
            g["parallel.sequence_parallel"] = "true" if experts else rng.choice(["true", "false"])
        if experts:
            g["parallel.ep"] = rng.choice([e for e in divisors(dp) if experts % e == 0])
        if pp > 1:
            g["parallel.pipeline.microbatches"] = rng.choice([1, 2, 4])
            # interleaved: a multiple of pp pieces (it runs the forwards pp at a time)
            if model["model.n_layer"] % (2 * pp) == 0 and rng.random() < 0.4:
                g["parallel.pipeline.microbatches"] = rng.choice([2, 4])
                g["parallel.pipeline.schedule"] = "interleaved"
                g["parallel.pipeline.virtual_stages"] = 2
        return g
    return None


def sequences_fit(micro_batch, grid, moe):
    """micro_batch cuts into the pipeline's pieces, and (MoE: each tp rank routes its own
    sequences) a piece's sequences divide over tp."""
    mbs = grid.get("parallel.pipeline.microbatches", 1)
    return micro_batch % mbs == 0 and (not moe or (micro_batch // mbs) % grid["parallel.tp"] == 0)


def draw_training(rng, grid, moe):
    fits = [m for m in [2, 4, 8] if sequences_fit(m, grid, moe)]
    if not fits:
        return None
    micro = rng.choice(fits)
    return {"train.micro_batch": micro, "train.grad_accum": rng.choice([1, 2]),
            "activation_checkpointing": rng.choice(["none", "full", "selective"]),
            "precision.compute": "bf16" if rng.random() < 0.2 else "fp32"}


def second_grid(rng, model, max_world, sequences):
    """A grid and options to resume on, with the same `sequences` per accumulation step."""
    for _ in range(50):
        g = draw_grid(rng, model, max_world)
        if g is None or sequences % g["parallel.dp"]:
            continue
        t = draw_training(rng, g, "model.moe.num_experts" in model)
        mb = sequences // g["parallel.dp"]
        if t is None or not sequences_fit(mb, g, "model.moe.num_experts" in model):
            continue
        t["train.micro_batch"] = mb
        return g, t
    return None, None


def args_of(settings):
    out = []
    for k, v in settings.items():
        out += ["--set", f"{k}={v}"]
    return out


COMMON = {"train.eval_every": 4, "train.eval_batches": 2, "train.warmup_steps": 2,
          "logging.every_steps": 1, "run.deterministic": "true"}


def run(cmd, log, env):
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=600).returncode


def refusal(log):
    """The validation's message in a refused run's log (its last error line)."""
    lines = [l.strip() for l in open(log) if "error" in l.lower()]
    return lines[-1] if lines else "?"


def metrics(path):
    rows = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            rows[r["step"]] = r
    return rows


# How far the balance loss of two fp32 layouts may differ from rounding alone: the router's mean
# probabilities are summed in another order under cp and tp (1.1e-7 relative at cp 4 x tp 2 x
# pp 2, fuzz_layouts seed 27, trial 8, with the losses 2e-8 apart). A token routed differently
# moves it by a whole token's share, ~1e-5 relative or more.
AUX_ROUNDING = 1e-6
# A resumed run starts from weights that already carry the first layout's rounding drift (fuzz
# seed 7328 trial 1: tp 2 x cp 2 reached 9.6e-7 at step 4 and 1.2e-6 at step 5, the same in a
# single-process resume of its checkpoint), so its tolerance grows with the drift carried over.
AUX_CARRIED_GROWTH = 4


def aux_drift(ref, cand, step):
    """The relative balance-loss difference at `step` (0 when either run lacks it)."""
    a, b = ref.get(step, {}).get("moe_aux_loss"), cand.get(step, {}).get("moe_aux_loss")
    return 0.0 if a is None or b is None or a == 0 else abs(a - b) / abs(a)


def routing_flip(ref, cand, steps, aux_tol=AUX_ROUNDING):
    """The first step at which an fp32 MoE run routed a token differently from the reference, or
    None. Reduction order differs between layouts by a few ulps (the losses agree to ~1e-8), and a
    router score that close to a tie (top-k, or the capacity cut) can go either way: the balance
    loss, whose counts are whole tokens, then jumps by ~1e-5 relative, or the dropped share moves."""
    for s in steps:
        a, b = ref.get(s, {}), cand.get(s, {})
        if "moe_aux_loss" not in a or "moe_aux_loss" not in b:
            return None
        if a.get("moe_dropped_fraction") != b.get("moe_dropped_fraction") or \
                abs(a["moe_aux_loss"] - b["moe_aux_loss"]) > aux_tol * abs(a["moe_aux_loss"]):
            return s
    return None


def compare(ref, cand, steps, bf16, aux_tol=AUX_ROUNDING):
    """(the first mismatch as text or None, the step a routing flip ended the comparison at or
    None). A flip is told from a bug by its signature: the runs agree to rounding on the loss
    (1e-7) and the balance loss (AUX_ROUNDING) at every step before it, the flip step's loss still
    within 1e-4,
    and it is not among the first two compared steps (a drift that a bug starts shows there: the
    same weights on the same tokens, then one update). After it the two runs follow different,
    equally right trajectories: the later steps are not compared."""
    flip = None if bf16 else routing_flip(ref, cand, steps, aux_tol)
    if flip is not None and flip in steps[:2]:
        return f"step {flip}: routed differently within the first two compared steps", flip
    for s in steps:
        if s not in cand or s not in ref:
            return f"step {s} missing ({'reference' if s not in ref else 'candidate'})", flip
        fields = [("loss", 2e-3), ("val_loss", 2e-3)] if bf16 else \
            [("loss", 1e-4), ("grad_norm", 1e-4), ("val_loss", 1e-4)]
        if flip is not None:
            fields = [("loss", 1e-4)] if s == flip else \
                fields + [("loss", 1e-7), ("moe_aux_loss", aux_tol)]
        for field, rtol in fields:
            if field not in ref[s] and field not in cand[s]:
                continue  # val_loss off the eval steps
            a, b = ref[s].get(field), cand[s].get(field)
            if a is None or b is None or abs(a - b) > rtol * max(abs(a), 1e-12):
                return f"step {s} {field}: reference {a}, layout {b} (rtol {rtol})", flip
        if s == flip:
            break
    return None, flip


def plan_mismatch(settings, world, report_path, log):
    """`trainer plan`'s bytes per rank against the run's report, or None: at pp > 1 the plan
    gives the stage that needs the most, the report each stage's (memory.breakdown_by_stage).
    The model state only at ZeRO 0 and 1: at 2 and 3 the cpu backend holds the pages of the
    units in flight, which the plan counts by the unit, not by the page (a few KB apart, more
    in small models: dist.zero_memory_falls_as_formula bounds it)."""
    cmd = [BIN, "plan", CONFIG, "--gpus", str(world), *args_of(settings)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        return f"plan rc {r.returncode}"
    state = next((l for l in r.stdout.splitlines() if l.startswith("model state per rank as")), "")
    plan = {k: int(v) for k, v in re.findall(r"(params|grads|optimizer|ZeRO staging) (\d+) B", state)}
    act = re.search(r"^activations per rank .*: (\d+) B", r.stdout, re.M)
    if len(plan) != 4 or not act:
        return "plan printed no byte counts"
    plan["zero_staging"] = plan.pop("ZeRO staging")
    plan["activations"] = int(act.group(1))
    if settings.get("parallel.zero", 0) >= 2:
        plan = {"activations": plan["activations"]}
    stage = re.search(r"per rank below: stage (\d+)", r.stdout)
    run = json.load(open(report_path))["memory"]["breakdown_by_stage"][int(stage.group(1)) if stage else 0]
    diff = {k: (v, run.get(k)) for k, v in plan.items() if run.get(k) != v}
    where = f"stage {stage.group(1)} " if stage else ""
    return f"plan vs run bytes, {where}(plan, run): {diff}" if diff else None


def launch_cmd(world, settings, out, extra=()):
    return [BIN, "launch", "--nproc-per-node", str(world), CONFIG, *args_of(settings), "--out", out,
            *extra]


def world_of(grid):
    return grid["parallel.dp"] * grid["parallel.tp"] * grid["parallel.pp"] * grid["parallel.cp"]


def main():
    global BIN
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--max-world", type=int, default=8)
    ap.add_argument("--keep", default="/tmp/fuzz_layouts")
    ap.add_argument("--trainer", default=BIN, help="the binary (default: $BUILD_DIR/trainer)")
    a = ap.parse_args()
    BIN = a.trainer
    rng = random.Random(a.seed)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    os.makedirs(a.keep, exist_ok=True)
    refs, passed, refused, failed, flips = {}, 0, [], [], []
    shards = os.path.join(a.keep, "shards")
    write_shards(shards, a.seed)
    print(f"fuzz_layouts: seed {a.seed}, {a.trials} trials, {BIN}", flush=True)
    for t in range(a.trials):
        model = draw_model(rng)
        grid = draw_grid(rng, model, a.max_world)
        if grid is None:
            continue
        train = draw_training(rng, grid, "model.moe.num_experts" in model)
        if train is None:  # no micro-batch this grid can cut
            continue
        dp = grid["parallel.dp"]
        base = {**COMMON, **model, **draw_data(rng, shards), "train.steps": STEPS,
                "precision.compute": train["precision.compute"],
                "train.grad_accum": train["train.grad_accum"]}
        # The reference: one process, the global batch as one micro-batch per accumulation step.
        ref_settings = {**base, "train.micro_batch": train["train.micro_batch"] * dp}
        key = json.dumps(ref_settings, sort_keys=True)
        tdir = os.path.join(a.keep, f"trial_{t:03d}")
        shutil.rmtree(tdir, ignore_errors=True)
        os.makedirs(tdir)
        if key not in refs:
            rdir = os.path.join(a.keep, f"ref_{len(refs):03d}")
            shutil.rmtree(rdir, ignore_errors=True)
            rc = run([BIN, "train", CONFIG, *args_of(ref_settings), "--out", rdir], rdir + ".log", env)
            if rc != 0:
                failed.append((t, f"reference run failed rc {rc}: {rdir}.log"))
                print(f"trial {t}: reference FAILED rc {rc}", flush=True)
                continue
            refs[key] = metrics(os.path.join(rdir, "metrics.jsonl"))
        ref = refs[key]
        settings = {**base, **grid, **train}
        resume = rng.random() < 0.5
        shown = {**model, **grid, **train}
        if "data.shuffle" in base:
            shown["data"] = "shards" + (" shuffled" if base["data.shuffle"] == "true" else "")
        desc = " ".join(f"{k.split('.')[-1]}={v}" for k, v in shown.items())
        out = os.path.join(tdir, "run")
        extra = {}
        if resume:
            extra = {"checkpoint.every_steps": RESUME_AT, "checkpoint.dir": os.path.join(tdir, "ck"),
                     "train.stop_after_steps": RESUME_AT,
                     "checkpoint.async": rng.choice(["true", "false"])}
        rc = run(launch_cmd(world_of(grid), {**settings, **extra}, out), os.path.join(tdir, "run.log"),
                 env)
        if rc == 2:
            refused.append((desc, refusal(os.path.join(tdir, "run.log"))))
            shutil.rmtree(tdir)
            print(f"trial {t}: refused: {desc}", flush=True)
            continue
        why = None if rc == 0 else f"rc {rc}"
        bf16 = train["precision.compute"] == "bf16"
        first = range(1, (RESUME_AT if resume else STEPS) + 1)
        flip, carried = None, 0.0
        if why is None:
            first_run = metrics(os.path.join(out, "metrics.jsonl"))
            why, flip = compare(ref, first_run, first, bf16)
            carried = aux_drift(ref, first_run, RESUME_AT)
            if flip is not None:
                flips.append(t)
                desc += f" (routing flipped at step {flip}: later steps not compared)"
        if why is None:
            why = plan_mismatch(settings, world_of(grid), os.path.join(out, "report.json"),
                                os.path.join(tdir, "plan.log"))
        if why is None and resume and flip is not None:
            desc += " (its resume not compared)"
        elif why is None and resume:
            g2, t2 = second_grid(rng, model, a.max_world, train["train.micro_batch"] * dp)
            if g2 is None:
                g2, t2 = grid, dict(train)
            s2 = {**base, **g2, **t2, "precision.compute": train["precision.compute"],
                  "train.grad_accum": train["train.grad_accum"],
                  "checkpoint.every_steps": 0, "checkpoint.dir": os.path.join(tdir, "ck2")}
            shown = {k: s2[k] for k in [*g2, *t2]}
            desc += " | resumed as " + " ".join(f"{k.split('.')[-1]}={v}" for k, v in shown.items())
            out2 = os.path.join(tdir, "resumed")
            rc = run(launch_cmd(world_of(g2), s2, out2, ["--resume", os.path.join(tdir, "ck")]),
                     os.path.join(tdir, "resumed.log"), env)
            if rc == 2:
                refused.append((desc, refusal(os.path.join(tdir, "resumed.log"))))
                desc += " (resume refused)"
            elif rc != 0:
                why = f"resumed run rc {rc}"
            else:
                resumed = metrics(os.path.join(out2, "metrics.jsonl"))
                # a run that started afresh would match the reference too
                if min(resumed, default=0) != RESUME_AT + 1:
                    why = f"the resumed run logged steps {sorted(resumed)}, not from {RESUME_AT + 1}"
                else:
                    why, flip = compare(ref, resumed, range(RESUME_AT + 1, STEPS + 1), bf16,
                                        max(AUX_ROUNDING, AUX_CARRIED_GROWTH * carried))
                    if flip is not None:
                        flips.append(t)
                        desc += f" (routing flipped at step {flip}: later steps not compared)"
        if why is None:
            passed += 1
            shutil.rmtree(tdir)
            print(f"trial {t}: ok: {desc}", flush=True)
        else:
            failed.append((t, f"{why}: {desc}"))
            print(f"trial {t}: FAILED ({why}): {desc}", flush=True)
    print(f"\n{passed} passed, {len(refused)} refused, {len(failed)} failed (seed {a.seed}); "
          f"{len(set(flips))} MoE trial(s) compared only up to a routing flip")
    for desc, msg in refused:
        print(f"refused: {desc}\n    {msg}")
    for t, why in failed:
        print(f"FAILED trial {t}: {why}\n    logs: {os.path.join(a.keep, f'trial_{t:03d}')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
