#!/usr/bin/env python3
"""The PyTorch side of scripts/bench_cpu.sh: a plain GPT-2 (pre-LN, tied lm_head, GELU tanh) in fp32,
trained with torch.optim.AdamW on random tokens. Prints one JSON line: step time p50, tokens/s (from
the mean step time after warm-up, as the trainer's report does) and MFU with the trainer's flop
formula and the peak passed in (the trainer's measured sgemm peak)."""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.NH, C // self.NH).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: explicit causal softmax
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, NH):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied lm_head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("d_model", 768), ("heads", 12), ("seq", 256),
                          ("batch", 4), ("vocab", 50257), ("steps", 6), ("warmup", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--peak-tflops", type=float, required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    L, C, T, B, V = a.layers, a.d_model, a.seq, a.batch, a.vocab
    model = GPT(V, T, L, C, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
    non_embedding = sum(p.numel() for p in model.parameters()) - V * C - T * C
    flops_per_token = 6 * non_embedding + 12 * L * C * T
    times = []
    for _ in range(a.steps):
        idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:] or times
    tps = B * T / statistics.mean(timed)
    print(json.dumps({"impl": f"torch {torch.__version__}", "threads": a.threads,
                      "non_embedding_params": non_embedding, "flops_per_token": flops_per_token,
                      "step_time_p50_s": statistics.median(timed), "tokens_per_second": tps,
                      "mfu": flops_per_token * tps / (a.peak_tflops * 1e12),
                      "final_loss": loss.item(), "step_times_s": times}))


if __name__ == "__main__":
    main()
