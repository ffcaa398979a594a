// Gpt's activations: the buffers of a micro-batch's forward (one slot per micro-batch a pipeline
// keeps in flight, per virtual chunk), and the tensors a pipeline stage hands on.
#include "runtime/core/check.h"
#include "runtime/model/gpt.h"

namespace trainer::model {

void Gpt::allocate_activations(int B, int T, Recompute recompute, int slots) {
  allocate_activations(B, T, recompute, 0, slots);  // (the head's tensors only with the head)
}

void Gpt::allocate_activations(int B, int T, Recompute recompute, int slots, int head_slots) {
  if (acts_ && acts_->B == B && acts_->T == T && acts_->recompute == recompute &&
      plain_slots_ == slots && head_slots_ == head_slots)
    return;
  TRAINER_CHECK(T <= layout_.dims().seq_len, "T " << T << " > seq_len");
  TRAINER_CHECK(slots >= 0 && head_slots >= 0 && slots + head_slots >= 1,
                "activation slots " << slots << " + " << head_slots << " with the head < 1");
  acts_ = nullptr;
  act_slots_.clear();
  for (int i = 0; i < slots + head_slots; ++i)  // later slots share the first one's scratch
    act_slots_.push_back(std::make_unique<Activations>(
        be_, layout_, B, T, recompute, bf16_ ? DType::bf16 : DType::f32, fp8_,
        i == 0 ? nullptr : act_slots_.front().get(), /*with_head=*/i >= slots));
  plain_slots_ = slots;
  head_slots_ = head_slots;
  acts_ = act_slots_.front().get();
}

int Gpt::chunk_first_layer() const {
  return acts_->chunk * layout_.shard().layers_per_chunk();
}

bool Gpt::runs_embedding() const {
  return layout_.shard().has_embedding && acts_->chunk == 0;
}

bool Gpt::runs_head() const {
  return layout_.shard().has_head && acts_->chunk == layout_.shard().chunks - 1;
}

BlockActivations& Gpt::block_acts(int l) {
  return acts_->blocks[static_cast<size_t>(l - chunk_first_layer())];
}

void Gpt::use_activation_slot(int slot, int chunk) {
  TRAINER_CHECK(slot >= 0 && slot < activation_slots(),
                "activation slot " << slot << " of " << activation_slots());
  TRAINER_CHECK(chunk >= 0 && chunk < layout_.shard().chunks,
                "model chunk " << chunk << " of " << layout_.shard().chunks);
  acts_ = act_slots_[static_cast<size_t>(slot)].get();
  acts_->chunk = chunk;
  TRAINER_CHECK(acts_->with_head || !runs_head(),
                "activation slot " << slot << " has no room for the head's tensors");
}

size_t Gpt::activation_bytes() const {
  size_t bytes = 0;
  for (const auto& a : act_slots_) bytes += a->bytes();
  return bytes;
}

void Gpt::reallocate_activations() {
  const int B = acts_->B, T = acts_->T, slots = plain_slots_, head_slots = head_slots_;
  const Recompute recompute = acts_->recompute;
  acts_ = nullptr;
  act_slots_.clear();
  plain_slots_ = head_slots_ = 0;
  allocate_activations(B, T, recompute, slots, head_slots);
}

Tensor Gpt::stage_input() const {
  TRAINER_CHECK(acts_ && !acts_->blocks.empty(), "a pipeline stage needs activations and a block");
  return acts_->blocks.front().residual_in;
}

Tensor Gpt::stage_output() const {
  TRAINER_CHECK(acts_ && !acts_->blocks.empty(), "a pipeline stage needs activations and a block");
  return acts_->blocks.back().residual_out;
}

Tensor Gpt::stage_output_grad() const {
  TRAINER_CHECK(acts_, "allocate_activations() before stage_output_grad()");
  return acts_->grad.dresidual;
}

}  // namespace trainer::model
