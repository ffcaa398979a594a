#pragma once
// precision.compute: fp8 — Transformer Engine's per-tensor delayed scaling for the inputs and
// weights of the linear layers' forward GEMMs, in e4m3 (the "fn" variant: no infinities, 0x7f is
// NaN, largest finite 448).
//
// Each linear layer owns a state of kFp8StateFloats fp32 values (device memory on cuda):
//   input:  [0, H) amax history (newest first), [H] scale, [H+1] 1/scale
//   weight: the same at offset kFp8TensorFloats.
// A call quantizes x to e4m3(x * scale), with the scale computed from the amax history of the calls
// before it, then pushes its own amax(|x|) into the history and sets the next scale to
// 448 / max(history) (kept when that max is 0 or not finite). A fresh state (all zero) has no
// history: its first call uses current scaling, the scale from that call's own amax.
namespace trainer {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr int kFp8AmaxHistory = 16;
inline constexpr int kFp8TensorFloats = kFp8AmaxHistory + 2;
inline constexpr int kFp8StateFloats = 2 * kFp8TensorFloats;

}  // namespace trainer
