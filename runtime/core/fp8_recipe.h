#pragma once
// precision.compute: fp8 — Transformer Engine's per-tensor delayed scaling for the inputs and
// weights of the linear layers' forward GEMMs, in e4m3 (the "fn" variant: no infinities, 0x7f is
// NaN, largest finite 448).
//
// Each linear layer owns a state of kFp8StateFloats fp32 values (device memory on cuda):
//   input:  [0, H) amax history (newest first), [H] scale, [H+1] 1/scale
//   weight: the same at offset kFp8TensorFloats.
// A call quantizes x to e4m3(x * scale) with the state's scale (computed from the amax history of
// the steps before it) and reports its amax(|x|); the state itself does not move. At the end of
// each training micro-batch's backward (so that full activation recompute reruns the forward
// with the forward's scales) the amaxes are reduced (max) over the amax group, the ranks that
// hold the same layers or slices of them (the dp and tp ranks, as Megatron's amax reduction
// group), and each is pushed into its history, which sets the next scale to 448 / max(history)
// (kept when that max is 0 or not finite). Every rank of the group so holds the same states. A
// fresh part (all zero) has no history: its first call uses current scaling, the scale from that
// call's own amax. A new layer's weight part starts fresh, and a run seeds it before its first
// step with the whole weight's amax (Gpt::seed_fp8_weight_scales: a tp rank's first call would
// see its slice only), which gives the scale current scaling would; its input part starts at
// scale 1 with an empty history, Transformer Engine's initial scale, because before the first
// reduction a replica's input amax is its own. Evaluation forwards read the states and never move
// them.
namespace trainer {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr int kFp8AmaxHistory = 16;
inline constexpr int kFp8TensorFloats = kFp8AmaxHistory + 2;
inline constexpr int kFp8StateFloats = 2 * kFp8TensorFloats;

// A new layer's state (kFp8StateFloats floats): the input part at scale 1 with an empty history,
// the weight part fresh (all zero).
inline void fp8_new_state(float* state) {
  for (int i = 0; i < kFp8StateFloats; ++i) state[i] = 0.0f;
  state[kFp8AmaxHistory] = state[kFp8AmaxHistory + 1] = 1.0f;
}

}  // namespace trainer
