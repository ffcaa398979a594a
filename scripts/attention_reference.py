#!/usr/bin/env python3
"""PyTorch's fused attention at cuda_ops_bench's attention shape, as a reference for the
trainer's own kernels and its cuDNN path (scripts/gpu-check.sh runs it where python3 has torch).

Causal self-attention, bf16, B x 12 heads x T 1024 x head size 64 (B = rows / 1024, as the
bench), through torch.nn.functional.scaled_dot_product_attention with each backend PyTorch has
here (FlashAttention-2, cuDNN, memory-efficient): the forward alone and the backward alone, the
median of --reps timed calls after warm-up, in ms and in TFLOP/s by the bench's count (causal:
forward 2 T(T+1) HS a head, backward twice that).
usage: attention_reference.py [--rows 8192] [--reps 10]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    T, NH, HS = 1024, 12, 64
    B = max(1, a.rows // T)
    fwd_flop = 2.0 * B * NH * T * (T + 1) * HS
    g = torch.Generator(device="cuda").manual_seed(11)
    q, k, v = (torch.empty(B, NH, T, HS, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2, generator=g)
               .requires_grad_() for _ in range(3))
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, generator=g)
    shape = f"B{B} T{T} {NH}x{HS}"
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                          ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.reps)
                bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                              a.reps)
        except RuntimeError as e:
            print(f"torch sdpa {name}: not run: {str(e).splitlines()[0][:160]}")
            continue
        for part, ms, flop in (("fwd", fwd, fwd_flop), ("bwd", bwd, 2 * fwd_flop)):
            print(f"{'torch sdpa ' + part + ' ' + name:34} {shape:22} {ms:9.3f} ms  "
                  f"{flop / ms / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
