// Gpt's fp8 compute (precision.compute: fp8): the delayed-scaling states of its linears, the amax
// history each forward raises, and the fp8 GEMMs that read them.
#include <algorithm>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/fp8_recipe.h"
#include "runtime/model/gpt.h"

namespace trainer::model {

void Gpt::set_compute_fp8(bool on) {
  if (on == fp8_) return;
  if (on) {
    set_compute_bf16(true);
    const int64_t linears = fp8_linears();
    std::vector<float> states(static_cast<size_t>(linears * kFp8StateFloats));
    for (int64_t i = 0; i < linears; ++i) fp8_new_state(states.data() + i * kFp8StateFloats);
    fp8_states_ = BackendBuffer(be_, linears * kFp8StateFloats);
    be_.from_host(fp8_states_.tensor(), states.data());
    fp8_amaxes_ = BackendBuffer(be_, linears * 2);
    fp8_new_ = true;
  } else {
    fp8_states_ = BackendBuffer();
    fp8_amaxes_ = BackendBuffer();
  }
  fp8_ = on;
  if (acts_) reallocate_activations();  // with or without the fp8 sums
}

int64_t Gpt::fp8_linears() const {
  const GptDims& d = layout_.dims();
  const GptShard& s = layout_.shard();
  const int64_t experts = d.moe() ? d.num_experts / s.ep_size : 0;
  return int64_t{s.num_layers} * (4 + experts * 2);
}

int64_t Gpt::fp8_expert_linear(int local_layer, int local_expert, int which) const {
  const GptShard& s = layout_.shard();
  const int64_t experts = layout_.dims().num_experts / s.ep_size;
  return int64_t{s.num_layers} * 4 + (local_layer * experts + local_expert) * 2 + which;
}

namespace {
// The runs of fp8 states that this rank's (`mine`, in Gpt::fp8_linears() order) share with the
// model's (Gpt::fp8_scaling_state's order): f(at in mine, at in the model's, floats) for each.
template <class F>
void for_each_fp8_state_run(const GptDims& d, const GptShard& s, F&& f) {
  const auto floats = [](int64_t linears) {
    return static_cast<size_t>(linears) * static_cast<size_t>(kFp8StateFloats);
  };
  for (int l = 0; l < s.num_layers; ++l)  // a block's four linears
    f(floats(int64_t{l} * 4), floats(int64_t{s.global_layer(l)} * 4), floats(4));
  if (!d.moe()) return;
  const int64_t local = d.num_experts / s.ep_size, first = int64_t{s.ep_rank} * local;
  const int64_t dense = int64_t{s.num_layers} * 4, model_dense = int64_t{d.n_layer} * 4;
  for (int l = 0; l < s.num_layers; ++l)  // a block's local experts, two linears each
    f(floats(dense + int64_t{l} * local * 2),
      floats(model_dense + (int64_t{s.global_layer(l)} * d.num_experts + first) * 2),
      floats(local * 2));
}

size_t model_fp8_floats(const GptDims& d) {
  const int64_t linears = int64_t{d.n_layer} * (4 + (d.moe() ? int64_t{d.num_experts} * 2 : 0));
  return static_cast<size_t>(linears) * static_cast<size_t>(kFp8StateFloats);
}
}  // namespace

std::vector<float> Gpt::fp8_scaling_state() const {
  if (!fp8_) return {};
  std::vector<float> mine(static_cast<size_t>(fp8_states_.numel()));
  be_.to_host(mine.data(), fp8_states_.tensor());
  std::vector<float> model(model_fp8_floats(layout_.dims()), 0.0f);
  for_each_fp8_state_run(layout_.dims(), layout_.shard(), [&](size_t at, size_t to, size_t n) {
    std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(at), n,
                model.begin() + static_cast<std::ptrdiff_t>(to));
  });
  return model;
}

bool Gpt::set_fp8_scaling_state(const std::vector<float>& model_states) {
  if (!fp8_ || model_states.size() != model_fp8_floats(layout_.dims())) return false;
  std::vector<float> mine(static_cast<size_t>(fp8_states_.numel()));
  for_each_fp8_state_run(layout_.dims(), layout_.shard(), [&](size_t at, size_t from, size_t n) {
    std::copy_n(model_states.begin() + static_cast<std::ptrdiff_t>(from), n,
                mine.begin() + static_cast<std::ptrdiff_t>(at));
  });
  be_.from_host(fp8_states_.tensor(), mine.data());
  fp8_new_ = false;
  return true;
}

void Gpt::seed_fp8_weight_scales(const std::vector<float>& weight_amaxes) {
  TRAINER_CHECK(fp8_states_new(), "seed_fp8_weight_scales: the fp8 states have moved already");
  const int64_t linears = fp8_amaxes_.numel() / 2;
  TRAINER_CHECK(static_cast<int64_t>(weight_amaxes.size()) == linears,
                "seed_fp8_weight_scales: " << weight_amaxes.size() << " amaxes for " << linears
                                           << " linear layers");
  // The input parts get 0, which leaves them as they are (scale 1, empty history).
  std::vector<float> amaxes(static_cast<size_t>(2 * linears), 0.0f);
  for (int64_t i = 0; i < linears; ++i)
    amaxes[static_cast<size_t>(2 * i + 1)] = weight_amaxes[static_cast<size_t>(i)];
  if (linears > 0) {
    be_.from_host(fp8_amaxes_.tensor(), amaxes.data());
    be_.round_to_bf16(fp8_amaxes_.tensor(), fp8_amaxes_.tensor());  // rounding keeps the max
    push_fp8_amaxes();
  }
  fp8_new_ = false;
}

void Gpt::fp8_linear_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                             const Tensor& bias, int64_t linear) {
  be_.matmul_forward_fp8(out, inp, weight, bias,
                         fp8_states_.slice(linear * kFp8StateFloats, kFp8StateFloats),
                         fp8_amaxes_.slice(linear * 2, 2));
}

Tensor Gpt::fp8_sums(const Shape& shape) {
  return acts_->fp8_sums.slice(0, shape.numel()).view(shape);
}

void Gpt::begin_fp8_amaxes() {
  if (!fp8_) return;
  TRAINER_CHECK(!fp8_amaxes_open_, "begin_fp8_amaxes() twice without end_fp8_amaxes()");
  be_.zero(fp8_amaxes_.tensor());  // (an evaluation's forwards raised them too)
  fp8_amaxes_open_ = true;
}

void Gpt::end_fp8_amaxes() {
  if (!fp8_) return;
  TRAINER_CHECK(fp8_amaxes_open_, "end_fp8_amaxes() without begin_fp8_amaxes()");
  fp8_amaxes_open_ = false;
  auto p = phase("fp8_amaxes");
  push_fp8_amaxes();
}

void Gpt::push_fp8_amaxes() {
  if (fp8_amaxes_.numel() == 0) return;  // no local layers
  const int64_t all = fp8_amaxes_.numel(), dense = int64_t{layout_.shard().num_layers} * 4 * 2;
  if (hooks_.fp8_expert_amax_all_reduce && all > dense) {  // two groups
    if (hooks_.fp8_amax_all_reduce) hooks_.fp8_amax_all_reduce(fp8_amaxes_.slice(0, dense));
    hooks_.fp8_expert_amax_all_reduce(fp8_amaxes_.slice(dense, all - dense));
  } else if (hooks_.fp8_amax_all_reduce) {
    hooks_.fp8_amax_all_reduce(fp8_amaxes_.tensor());
  }
  be_.fp8_push_amaxes(fp8_states_.tensor(), fp8_amaxes_.tensor());
  fp8_new_ = false;
}

}  // namespace trainer::model
