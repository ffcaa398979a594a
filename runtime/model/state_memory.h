#pragma once

namespace trainer::model {

// How Gpt allocates its params, grads and bf16 copy (what ZeRO releases ranges of, which the
// cuda backend then unmaps).
enum class StateMemory {
  whole,  // plain allocations
  // ZeRO 2: the grads released from the start (alloc_released: ZeroOptimizer acquires each unit's
  // before its backward, and releases it once reduce-scattered), so that the whole gradient
  // buffer is never held; the params and bf16 copy, which ZeRO 2 keeps whole, plain.
  grads_released,
  // ZeRO 3: the params and the bf16 copy released from the start too. The optimizer acquires the
  // shard this rank owns, and only that is drawn (init_weights_within) or loaded; a unit's other
  // params come by its gather. So the whole model is never held, not even at the start
  // (DeepSpeed's zero.Init, FSDP's meta-device init).
  released,
};

}  // namespace trainer::model
