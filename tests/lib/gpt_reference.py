#!/usr/bin/python3
"""An independent float64 PyTorch GPT-2 trainer, to check trainer's training math against.

It shares no code with trainer: the model is standard torch ops differentiated by autograd, the
optimizer is torch.optim.AdamW, clipping is torch.nn.utils.clip_grad_norm_. What it copies from
trainer are only the conventions it documents (llm.c's): the lr schedule, which tensors decay, how
token shards are cut into steps and evals. With --num-experts every block's MLP is a mixture of
experts as README.md describes it (router, top_k gates, per-sequence capacity in GShard's order,
Switch's balance loss; moe_mlp below). Subcommands:

  init     write a random GPT-2 init as Hugging Face safetensors (the names and [in, out] Conv1D
           layout `trainer ckpt export` writes and `model.init_from` reads)
  train    train from such a file on llm.c token shards; writes per-step loss, grad_norm, lr,
           val_loss (JSON) and the final weights (npz)
  compare  check a trainer run's metrics.jsonl (and optionally its exported final weights)
           against the output of `train`, field by field, with stated relative tolerances
"""
import argparse
import glob
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Files: safetensors and llm.c token shards, read and written with struct/numpy only.


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{path}: {name} is {info['dtype']}, expected F32"
        start, end = info["data_offsets"]
        data = np.frombuffer(blob[8 + n + start:8 + n + end], dtype="<f4")
        out[name] = data.reshape(info["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    header, offset, chunks = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        chunks.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned, as the safetensors library does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def read_shard(path):
    """llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    with open(path, "rb") as f:
        blob = f.read()
    h = np.frombuffer(blob[:1024], dtype="<i4")
    assert h[0] == 20240520 and h[1] == 1, f"{path}: not an llm.c uint16 token shard"
    tokens = np.frombuffer(blob[1024:], dtype="<u2").astype(np.int64)
    assert len(tokens) == h[2], f"{path}: header says {h[2]} tokens, file has {len(tokens)}"
    return tokens


# ----------------------------------------------------------------------------------------------
# The model: GPT-2 (pre-LN blocks, LayerNorm eps 1e-5, GELU tanh, causal softmax attention scaled
# by 1/sqrt(head_dim), output layer tied to wte). Weights keep Hugging Face's names and layout:
# Conv1D weights are [in, out], so a linear layer is x @ W + b.

def layer_names(n_layer):
    names = ["wte.weight", "wpe.weight"]
    for l in range(n_layer):
        for k in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            names.append(f"h.{l}.{k}")
    return names + ["ln_f.weight", "ln_f.bias"]


def moe_layer_names(n_layer):
    """layer_names with each block's dense MLP replaced by a router and stacked experts."""
    dense = ("mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
    out = []
    for name in layer_names(n_layer):
        if name.endswith("mlp.c_fc.weight"):
            p = name[:-len("mlp.c_fc.weight")]
            out += [p + "mlp.router.weight"] + [p + "mlp.experts." + k[4:] for k in dense]
        elif not name.endswith(dense):
            out.append(name)
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, a, idx, targets, moe=None):
    """Mean cross-entropy of next-token prediction over all B*T positions of idx [B, T]. With
    a.num_experts the MLPs are mixtures of experts, which add their balance loss and counts to
    `moe` (a MoeStats)."""
    B, T = idx.shape
    C, nh = a.d_model, a.n_head
    ln = lambda x, p: F.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps=1e-5)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    for l in range(a.n_layer):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, -1)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // nh)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        if a.num_experts:
            x = x + moe_mlp(w, a, p, ln(x, p + "ln_2"), moe)
            continue
        h = a.gelu(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    # The tied head over the vocab_size real tokens only: trainer pads wte with zero rows (to a
    # multiple of model.make_vocab_size_divisible_by) that must stay out of the softmax.
    logits = ln(x, "ln_f") @ w["wte.weight"].T
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


# ----------------------------------------------------------------------------------------------
# Mixture of experts, as README.md words it. Where the README leaves a choice open, the comment
# says which one trainer makes (read in runtime/model/moe_router.cpp, gpt_moe.cpp and
# runtime/train/train_step.cpp) and whose convention that is.
#
# Weights as `trainer ckpt export` writes them: the router [E, C] and the experts stacked on a
# first axis of E in torch.nn.Linear's [out, in] layout (c_fc [E, 4C, C], c_proj [E, C, 4C];
# unlike the dense 2-D Conv1D weights, which are [in, out]): logits = x @ R^T, expert e's MLP is
# gelu(x @ W_fc[e]^T + b_fc[e]) @ W_proj[e]^T + b_proj[e].

class MoeStats:
    """What the mixture-of-experts MLPs of one forward add up over their blocks."""

    def __init__(self):
        self.aux = 0.0  # aux_loss_coef * sum over blocks of the mean over sequences (a tensor)
        self.dropped = 0  # choices past capacity
        self.margin = math.inf  # narrowest gap between two log-probabilities a choice depends on


def moe_mlp(w, a, p, x, moe):
    """Block p's mixture-of-experts MLP of x [B, T, C] (the ln_2 output); adds to moe."""
    B, T, C = x.shape
    E, K = a.num_experts, a.top_k
    probs = (x @ w[p + "mlp.router.weight"].T).softmax(-1)  # [B, T, E]
    # Each token's top_k experts, best first. (Ties: trainer takes the lower index; torch.topk
    # promises no order. Moot: the margin below keeps every choice far from a tie.)
    top_p, top_e = probs.topk(K, -1)  # [B, T, K]
    # trainer (fp32) makes the same choices only where no two log-probabilities that decide them
    # (the first K in order, and the K-th against the next) are nearly tied: the narrowest such
    # gap, for the test to require well above how far trainer's log-probabilities stray.
    lp = probs.detach().log().sort(-1, descending=True).values
    gaps = (lp[..., :-1] - lp[..., 1:])[..., :min(K, E - 1)]
    if gaps.numel():
        moe.margin = min(moe.margin, gaps.min().item())
    # Gates: top_k 1: the expert's probability (Switch); else the top_k renormalized to sum to 1
    # (Mixtral, Megatron), over the chosen experts before any is dropped, so that a dropped second
    # choice still shrinks the first one's gate (GShard and Megatron alike; trainer the same).
    gate = top_p
    if K > 1 and a.wrong_moe != "gates-not-renormalized":
        gate = top_p / top_p.sum(-1, keepdim=True)
    chosen = F.one_hot(top_e, E)  # [B, T, K, E]
    # Capacity per expert per sequence, in GShard's order: a choice's place is how many choices of
    # the same expert come before it, every token's first choice (in token order) before any
    # second one. Dropless (capacity_factor None): an expert may take every token. (trainer takes
    # ceil(factor * T * top_k / E - 1e-9) clamped to [1, T]: the same for the test's factors.)
    if a.wrong_moe == "capacity-per-batch":  # the micro-batch competes for B times the slots
        order = chosen.permute(2, 0, 1, 3).reshape(K * B * T, E)
        place = ((order.cumsum(0) - 1) * order).sum(-1).reshape(K, B, T).permute(1, 2, 0)
        capacity = math.ceil(a.capacity_factor * B * T * K / E)
    elif a.wrong_moe == "second-choices-first":  # token order: a token's choices one after another
        order = chosen.reshape(B, T * K, E)
        place = ((order.cumsum(1) - 1) * order).sum(-1).reshape(B, T, K)
        capacity = math.ceil(a.capacity_factor * T * K / E)
    else:
        order = chosen.transpose(1, 2).reshape(B, K * T, E)
        place = ((order.cumsum(1) - 1) * order).sum(-1).reshape(B, K, T).transpose(1, 2)
        capacity = T if a.capacity_factor is None else math.ceil(a.capacity_factor * T * K / E)
    kept = place < capacity  # [B, T, K]; a dropped choice adds nothing: the residual carries x on
    moe.dropped += int((~kept).sum())
    # Every expert on every token (E is small here), combined by each token's kept gates.
    combine = (chosen * (gate * kept)[..., None]).sum(2)  # [B, T, E]
    h = a.gelu(torch.einsum("btc,efc->ebtf", x, w[p + "mlp.experts.c_fc.weight"])
               + w[p + "mlp.experts.c_fc.bias"][:, None, None, :])
    y = (torch.einsum("ebtf,ecf->ebtc", h, w[p + "mlp.experts.c_proj.weight"])
         + w[p + "mlp.experts.c_proj.bias"][:, None, None, :])
    # Switch's balance loss per sequence: E * sum_e f_e * P_e, P_e the sequence's mean probability
    # of e, f_e the share of its T * top_k choices that picked e, counted before dropping (a
    # count: no gradient). README leaves open how f_e counts top_k > 1 and how sequences and
    # blocks combine; trainer: every choice over T * top_k (Megatron's
    # switch_load_balancing_loss_func; GShard counts first choices only), the mean over a global
    # batch's sequences, the sum over blocks (each block's loss weighs aux_loss_coef, as in
    # Switch and Megatron), in the gradient and in the logged moe_aux_loss alike.
    f = chosen.sum((1, 2)).to(probs.dtype) / (T * K)  # [B, E]
    P = probs.mean(1)
    moe.aux = moe.aux + a.aux_loss_coef * (E * (f * P).sum(-1)).mean()
    return torch.einsum("bte,ebtc->btc", combine, y)


# ----------------------------------------------------------------------------------------------
# Data, as trainer (and llm.c) cut it: a step reads one global batch of G = micro_batch *
# grad_accum * dp sequences as G*T + 1 consecutive tokens of one shard (sequence i is tokens
# [i*T, i*T + T] of that window: inputs the first T, targets the last T). The next step starts
# G*T tokens on. A step that does not fit in the rest of the shard starts at the front of the
# next one (after the last shard: the first again). trainer's micro-batch m on dp rank r reads
# sequences [(m*dp + r)*B, ... + B) of the window; the loss and the gradient are means over all
# of them, so the reference needs only the window.

class GlobalBatches:
    def __init__(self, paths, seqs, T):
        self.shards = [read_shard(p) for p in paths]
        self.seqs, self.T = seqs, T
        self.need = seqs * T + 1
        self.reset()

    def samples_per_epoch(self):
        return sum((len(s) - 1) // (self.seqs * self.T) for s in self.shards)

    def reset(self):
        self.shard, self.pos = 0, 0

    def next(self):
        """Inputs and targets [G, T] of the next global batch."""
        for _ in range(len(self.shards) + 1):
            if self.pos + self.need <= len(self.shards[self.shard]):
                break
            self.shard, self.pos = (self.shard + 1) % len(self.shards), 0
        else:
            raise SystemExit("no shard holds a global batch")
        window = self.shards[self.shard][self.pos:self.pos + self.need]
        self.pos += self.seqs * self.T
        x = np.stack([window[i * self.T:(i + 1) * self.T] for i in range(self.seqs)])
        y = np.stack([window[i * self.T + 1:(i + 1) * self.T + 1] for i in range(self.seqs)])
        return torch.from_numpy(x), torch.from_numpy(y)


def lr_at(a, step):
    """llm.c's schedule on the 0-based step: linear warmup to lr, then cosine decay that would
    reach lr * min_lr_ratio at step `steps` (one past the last)."""
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    min_lr = a.lr * a.min_lr_ratio
    progress = min(1.0, max(0.0, (step - a.warmup_steps) / max(1, a.steps - a.warmup_steps)))
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (a.lr - min_lr)


def train(a):
    torch.set_default_dtype(torch.float64)
    a.gelu = F.gelu if a.gelu_exact else gelu_tanh
    w = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in read_safetensors(a.init).items()}
    # Weight decay on matrices and embeddings (every 2-D tensor, and the experts' stacked 3-D
    # ones; the router [E, C] is a matrix too), not on biases and LayerNorm gains, as llm.c and
    # nanoGPT. (The experts' stacked biases [E, n] are 2-D but biases: no decay.)
    def decays(name, t):
        return t.dim() >= 2 and not name.endswith(".bias")
    decay = [t for k, t in w.items() if decays(k, t)]
    no_decay = [t for k, t in w.items() if not decays(k, t)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    seqs = a.micro_batch * a.grad_accum
    train_data = GlobalBatches(sorted(glob.glob(a.train)), seqs, a.seq_len)
    val_data = GlobalBatches(sorted(glob.glob(a.val)), seqs, a.seq_len)
    eval_batches = min(a.eval_batches, val_data.samples_per_epoch())

    rows = []
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        x, y = train_data.next()
        loss = 0.0
        moe = MoeStats()
        for m in range(a.grad_accum):  # each micro-batch's mean loss, averaged: the global mean
            sl = slice(m * a.micro_batch, (m + 1) * a.micro_batch)
            micro = MoeStats()
            l = forward(w, a, x[sl], y[sl], micro) / a.grad_accum
            # the balance loss (0.0 for a dense model) is in the gradient, not in the logged loss
            (l + micro.aux / a.grad_accum).backward()
            loss += l.item()
            moe.aux += float(micro.aux) / a.grad_accum
            moe.dropped += micro.dropped
            moe.margin = min(moe.margin, micro.margin)
        # The norm before clipping is what is logged. torch scales the gradients by
        # min(1, grad_clip / (norm + 1e-6)), trainer by grad_clip / (norm + 1e-6) when norm >
        # grad_clip: the same but for norms within 1e-6 of grad_clip.
        norm = torch.nn.utils.clip_grad_norm_(list(w.values()), a.grad_clip).item()
        lr = lr_at(a, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        row = {"step": step + 1, "loss": loss, "grad_norm": norm, "lr": lr,
               "clipped": norm > a.grad_clip}
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            val_data.reset()  # every eval reads the same batches from the start of the val data
            evals = MoeStats()
            with torch.no_grad():
                losses = [forward(w, a, *val_data.next(), evals).item()
                          for _ in range(eval_batches)]
            row["val_loss"] = sum(losses) / len(losses)
            moe.margin = min(moe.margin, evals.margin)  # (the eval's routing: in the margin only)
        if a.num_experts:
            row["moe_aux_loss"] = moe.aux
            row["moe_dropped_fraction"] = moe.dropped / (seqs * a.seq_len * a.top_k * a.n_layer)
            row["route_margin"] = moe.margin
        rows.append(row)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    if a.weights_out:
        np.savez(a.weights_out, **{k: v.detach().numpy() for k, v in w.items()})


# ----------------------------------------------------------------------------------------------
# The random init both sides start from: GPT-2's N(0, 0.02) with the residual projections scaled
# by 1/sqrt(2 n_layer), but with random LayerNorm gains and biases and random linear biases too
# (GPT-2 starts those at 1 and 0), so that a bias or gain dropped or misplaced changes the loss
# from the first step. A mixture of experts' routers are N(0, router_std), its experts' weights
# and biases as the dense MLP's (tests/e2e/moe_matches_float64_pytorch_reference.sh widens the
# routers, so that fp32 and float64 choose alike: moe_mlp's margin).

def init(a):
    rng = np.random.default_rng(a.seed)
    C, V, T, FC, E = a.d_model, a.vocab_size, a.seq_len, 4 * a.d_model, a.num_experts
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(a.n_layer):
        p = f"h.{l}."
        shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                       p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                       p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                       p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                       p + "mlp.c_fc.weight": (C, FC), p + "mlp.c_fc.bias": (FC,),
                       p + "mlp.c_proj.weight": (FC, C), p + "mlp.c_proj.bias": (C,),
                       p + "mlp.router.weight": (E, C),
                       p + "mlp.experts.c_fc.weight": (E, FC, C),
                       p + "mlp.experts.c_fc.bias": (E, FC),
                       p + "mlp.experts.c_proj.weight": (E, C, FC),
                       p + "mlp.experts.c_proj.bias": (E, C)})
    w = {}
    for name in (moe_layer_names if E else layer_names)(a.n_layer):
        shape = shapes[name]
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            w[name] = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w[name] = 0.02 * rng.standard_normal(shape)
        elif name.endswith("router.weight"):
            w[name] = a.router_std * rng.standard_normal(shape)
        else:
            std = 0.02 / math.sqrt(2 * a.n_layer) if name.endswith("c_proj.weight") else 0.02
            w[name] = std * rng.standard_normal(shape)
    write_safetensors(a.out, w)


# ----------------------------------------------------------------------------------------------
# The comparison.

def rel(x, ref):
    return abs(x - ref) / max(abs(ref), 1e-30)


def compare(a):
    ref = {r["step"]: r for r in json.load(open(a.reference))}
    got = {}
    for line in open(a.metrics):
        if line.strip():
            r = json.loads(line)
            got[r["step"]] = r
    tol = {"loss": a.rtol_loss, "grad_norm": a.rtol_grad_norm, "lr": a.rtol_lr,
           "val_loss": a.rtol_loss}
    moe = any("moe_aux_loss" in r for r in ref.values())
    if moe:  # the dropped share is a count over a power of two: exact on both sides
        tol.update({"moe_aux_loss": a.rtol_moe_aux_loss, "moe_dropped_fraction": 0.0})
    ok = sorted(ref) == sorted(got)
    if not ok:
        print(f"steps differ: reference {sorted(ref)}, trainer {sorted(got)}")
    worst = {k: 0.0 for k in tol}
    print("step  field: trainer | reference (relative difference)")
    for step in sorted(set(ref) & set(got)):
        r, g = ref[step], got[step]
        cells = []
        for k in tol:
            if (k in r) != (k in g):
                ok = False
                cells.append(f"{k}: {g.get(k)} | {r.get(k)} <-- only one side has it")
                continue
            if k not in r:
                continue
            d = rel(g[k], r[k])
            worst[k] = max(worst[k], d)
            bad = not d <= tol[k]  # NaN fails
            ok = ok and not bad
            cells.append(f"{k}: {g[k]:.9g} | {r[k]:.9g} ({d:.1e}){' <--' if bad else ''}")
        clip = " clipped" if r["clipped"] else ""
        print(f"{step:4d}{clip:8s} " + "; ".join(cells))
    print("worst relative difference: " + ", ".join(
        f"{k} {worst[k]:.2e} (tolerance {tol[k]:g})" for k in tol))
    if moe:
        margin = min(r["route_margin"] for r in ref.values())
        dropped = max(r["moe_dropped_fraction"] for r in ref.values())
        print(f"routing: narrowest log-probability gap a choice depended on {margin:.2e} "
              f"(required {a.min_route_margin:g}); most choices dropped in a step {dropped:.4f}")
        if not margin >= a.min_route_margin:
            print("a near-tie: fp32 rounding may pick other experts than float64 here; the run "
                  "cannot check the routing (choose another seed or init, do not loosen)")
            ok = False
        if a.expect_drops and not dropped > 0:
            print("no choice was dropped: the run does not check the capacity")
            ok = False
    clipped = sum(r["clipped"] for r in ref.values())
    if not 0 < clipped < len(ref):
        print(f"clipping was active on {clipped} of {len(ref)} steps: the run checks clipping "
              "only if some steps clip and some do not")
        ok = False
    if a.weights:  # trainer's exported final weights against the reference's
        w_ref = np.load(a.reference_weights)
        w_init = read_safetensors(a.init)
        w_got = read_safetensors(a.weights)
        if sorted(w_got) != sorted(w_ref.files):
            print(f"tensor names differ: trainer {sorted(w_got)}, reference {sorted(w_ref.files)}")
            ok = False
        # Per tensor: how far trainer's weights are from the reference's, relative to how far
        # training moved them (elementwise relative differences mean nothing for weights Adam
        # moved by ~lr from ~0).
        worst_w, worst_name = 0.0, ""
        for name in sorted(set(w_got) & set(w_ref.files)):
            got, want, start = w_got[name].astype(np.float64), w_ref[name], w_init[name]
            if name.endswith("attn.c_attn.bias"):
                # The key bias adds q.b_k to every score of a query, which softmax cancels: its
                # gradient is exactly zero. In fp32 it is rounding noise (~1e-9), which Adam
                # normalizes into steps of ~0.1 lr; in float64 the noise is ~1e-17 and the steps
                # ~1e-9 lr. So that third is left out: q and v biases only.
                C = len(want) // 3
                keep = np.r_[0:C, 2 * C:3 * C]
                got, want, start = got[keep], want[keep], start[keep]
            d = np.linalg.norm(got - want) / max(np.linalg.norm(want - start), 1e-30)
            if not d <= worst_w:
                worst_w, worst_name = d, name
        bad = not worst_w <= a.rtol_weights
        ok = ok and not bad
        print(f"final weights: worst |trainer - reference| / |reference - init| {worst_w:.2e} "
              f"({worst_name}; tolerance {a.rtol_weights:g}){' <--' if bad else ''}")
    return 0 if ok else 1


def shards(a):
    """Token shards (llm.c format) of a noisy walk over a 200-token vocabulary: learnable, not
    periodic. One generator for them all, in the order given."""
    rng = np.random.default_rng(a.seed)
    for spec in a.shards:
        name, n = spec.rsplit(":", 1)
        n = int(n)
        steps = rng.integers(1, 5, n)
        t = np.zeros(n, np.int64)
        for i in range(1, n):
            t[i] = (3 * t[i - 1] + steps[i]) % 200
        header = np.zeros(256, "<i4")
        header[:3] = (20240520, 1, n)
        with open(name + ".bin", "wb") as f:
            f.write(header.tobytes() + t.astype("<u2").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def model_args(p):
        p.add_argument("--n-layer", type=int, required=True)
        p.add_argument("--d-model", type=int, required=True)
        p.add_argument("--seq-len", type=int, required=True)
        p.add_argument("--num-experts", type=int, default=0,
                       help="0: dense MLPs; else a mixture of that many experts per block")

    p = sub.add_parser("shards", help="write token shards NAME.bin of a noisy walk")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("shards", nargs="+", metavar="NAME:TOKENS")

    p = sub.add_parser("init", help="write a random init (HF GPT-2 safetensors)")
    model_args(p)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--router-std", type=float, default=0.02, help="the routers' init std")
    p.add_argument("--out", required=True)

    p = sub.add_parser("train", help="train in float64; write per-step metrics and final weights")
    model_args(p)
    p.add_argument("--n-head", type=int, required=True)
    p.add_argument("--init", required=True, help="safetensors from `init` (or trainer's export)")
    p.add_argument("--train", required=True, help="train shard path or glob (sorted by name)")
    p.add_argument("--val", required=True, help="val shard path or glob")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, required=True)
    p.add_argument("--eval-batches", type=int, required=True, help="global batches per eval")
    p.add_argument("--out", required=True, help="per-step metrics (JSON list)")
    p.add_argument("--weights-out", help="final weights (npz, float64)")
    p.add_argument("--top-k", type=int, default=2, help="experts per token (with --num-experts)")
    p.add_argument("--capacity-factor", type=lambda v: None if v == "null" else float(v),
                   default=1.25, help="slots per expert per sequence: ceil(factor * T * top_k / "
                   "E); null: dropless")
    p.add_argument("--aux-loss-coef", type=float, default=0.01)
    # Deliberate mistakes, for the tests' proof that their tolerances can catch one.
    p.add_argument("--gelu-exact", action="store_true", help="erf GELU instead of GPT-2's tanh")
    p.add_argument("--wrong-moe", choices=("gates-not-renormalized", "capacity-per-batch",
                                           "second-choices-first"),
                   help="a mixture of experts with that mistake")

    p = sub.add_parser("compare", help="trainer's metrics (and weights) against `train`'s")
    p.add_argument("reference", help="`train --out` JSON")
    p.add_argument("metrics", help="trainer's metrics.jsonl (every step logged)")
    p.add_argument("--rtol-loss", type=float, required=True, help="loss and val_loss")
    p.add_argument("--rtol-grad-norm", type=float, required=True)
    p.add_argument("--rtol-lr", type=float, required=True)
    p.add_argument("--rtol-moe-aux-loss", type=float, default=0.0)
    p.add_argument("--min-route-margin", type=float, default=0.0,
                   help="the narrowest gap between deciding log-probabilities the reference may "
                   "meet (train --num-experts)")
    p.add_argument("--expect-drops", action="store_true",
                   help="fail unless some step dropped choices past capacity")
    p.add_argument("--weights", help="trainer's final weights (`ckpt export` safetensors)")
    p.add_argument("--reference-weights", help="`train --weights-out` npz")
    p.add_argument("--init", help="the init both started from (for the weights' scale)")
    p.add_argument("--rtol-weights", type=float, default=0.0)
    a = ap.parse_args()
    if a.cmd == "shards":
        shards(a)
    elif a.cmd == "init":
        init(a)
    elif a.cmd == "train":
        train(a)
    else:
        sys.exit(compare(a))


if __name__ == "__main__":
    main()
