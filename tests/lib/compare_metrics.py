#!/usr/bin/python3
"""Compares the loss and grad-norm curves of two metrics.jsonl files.

usage: compare_metrics.py REFERENCE.jsonl CANDIDATE.jsonl --rtol 1e-5 [--min-steps 30] [--exact]
                          [--fields loss,grad_norm] [--first-steps N]
Exits 1, printing both curves side by side, when any logged step differs by more than rtol
(relative) in a field, or when the files do not log the same steps (--first-steps N: only the
first N logged steps of each file count). A field absent from both
files at a step (val_loss off the eval steps) is skipped there; a null (non-finite) value never
matches; each field must have a value in some step of the reference.
"""
import argparse
import json
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows[r["step"]] = r
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--min-steps", type=int, default=1)
    ap.add_argument("--exact", action="store_true", help="losses must be bit-identical")
    ap.add_argument("--fields", default="loss,grad_norm")
    ap.add_argument("--first-steps", type=int, default=0, help="compare only the first N steps")
    a = ap.parse_args()
    ref, cand = load(a.reference), load(a.candidate)
    if a.first_steps > 0:
        ref = {s: ref[s] for s in sorted(ref)[: a.first_steps]}
        cand = {s: cand[s] for s in sorted(cand)[: a.first_steps]}
    fields = a.fields.split(",")
    ok = sorted(ref) == sorted(cand) and len(ref) >= a.min_steps
    worst = 0.0
    lines = []
    for step in sorted(set(ref) | set(cand)):
        r, c = ref.get(step), cand.get(step)
        cells = []
        for k in fields:
            if k not in (r or {}) and k not in (c or {}):  # e.g. val_loss off the eval steps
                continue
            # (a non-finite value is written as null: it never matches)
            rv = r.get(k) if r else None
            cv = c.get(k) if c else None
            if rv is None or cv is None:
                ok = False
                cells.append(f"{k} {rv} | {cv} <-- ")
                continue
            rel = abs(rv - cv) / max(abs(rv), 1e-30)
            worst = max(worst, rel)
            bad = (rv != cv) if a.exact else (rel > a.rtol)
            ok = ok and not bad
            cells.append(f"{k} {rv:.9g} | {cv:.9g} (rel {rel:.2e}){' <-- ' if bad else ''}")
        lines.append(f"step {step:5d}: " + "; ".join(cells))
    for k in fields:  # a field asked for must be compared somewhere
        if not any(r.get(k) is not None for r in ref.values()):
            ok = False
            lines.append(f"{k}: in no step of the reference")
    if not ok:
        print(f"curves differ (rtol {a.rtol}, exact {a.exact}, steps {len(ref)} vs {len(cand)}, "
              f"need >= {a.min_steps}): reference {a.reference} | candidate {a.candidate}")
        print("\n".join(lines))
        return 1
    print(f"curves match over {len(ref)} steps: worst relative difference {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
