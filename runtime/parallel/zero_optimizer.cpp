#include "runtime/parallel/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/check.h"
#include "runtime/parallel/host_pages.h"

namespace trainer::parallel {
namespace {

std::vector<Range> ranges_by_unit(const model::ParamLayout& layout) {
  std::vector<Range> out;
  for (const model::ParamSpec& p : layout.params()) {
    if (static_cast<size_t>(p.unit) >= out.size())
      out.resize(static_cast<size_t>(p.unit) + 1, Range{-1, -1});
    Range& r = out[static_cast<size_t>(p.unit)];
    r.begin = r.begin < 0 ? p.offset : std::min(r.begin, p.offset);
    r.end = std::max(r.end, p.offset + p.numel);
  }
  return out;
}

Tensor slice(const Tensor& t, int64_t off, int64_t n) {
  return Tensor(static_cast<float*>(t.data) + off, {n}, DType::f32, t.device);
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(int stage, Backend& be, model::Gpt& model, dist::Comm& comm)
    : stage_(stage),
      be_(be),
      model_(model),
      comm_(comm),
      shards_(model.layout().total_numel(), comm.size()),
      unit_range_(ranges_by_unit(model.layout())),
      sync_gather_(comm, shards_),
      prefetch_(comm, shards_) {
  TRAINER_CHECK(stage >= 1 && stage <= 3, "zero stage " << stage);
  TRAINER_CHECK(be.device() == DeviceType::cpu, "ZeRO runs on the cpu backend only for now");
  const Range s = shard();
  opt_ = std::make_unique<optim::AdamW>(be_, model_.layout(), s.begin, s.end);
  if (stage_ >= 2) {
    grad_acc_ =
        Tensor(be_.alloc(static_cast<size_t>(s.size()) * 4), {s.size()}, DType::f32, be_.device());
    be_.zero(grad_acc_);
    model_.hooks().unit_grads_ready = [this](int unit) { on_unit_grads_ready(unit); };
  }
  if (stage_ == 3) {
    live_.assign(unit_range_.size(), true);
    model_.hooks().before_unit = [this](int unit, bool bwd) { before_unit(unit, bwd); };
    publish_params();
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  prefetch_.finish();
  if (grad_acc_.data) be_.free(grad_acc_.data);
}

Tensor ZeroOptimizer::shard_grads() const {
  return stage_ >= 2 ? grad_acc_ : slice(model_.grads(), shard().begin, shard().size());
}

void ZeroOptimizer::begin_step() {
  if (stage_ == 1) {
    be_.zero(model_.grads());
    return;
  }
  release_range(grads(), 0, shards_.numel(), 0.0f);  // pages come back as backward writes them
  be_.zero(grad_acc_);
}

void ZeroOptimizer::sample_residency() {
  const size_t n = static_cast<size_t>(shards_.numel()) * 4;
  peak_params_ = std::max(peak_params_, resident_bytes(params(), n));
  peak_grads_ = std::max(peak_grads_, resident_bytes(grads(), n));
  peak_scratch_ = std::max(peak_scratch_, scratch_bytes());
}

int64_t ZeroOptimizer::scratch_bytes() const {
  size_t floats = staging_.capacity() + sync_gather_.capacity() + prefetch_.capacity();
  for (const auto& rs : scatters_) floats += rs->capacity();
  for (const auto& rs : spare_scatters_) floats += rs->capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

void ZeroOptimizer::on_unit_grads_ready(int unit) {
  const Range r = unit_range_.at(static_cast<size_t>(unit));
  if (scatters_.size() >= kScattersInFlight) finish_oldest_scatter();
  std::unique_ptr<RangeReduceScatter> rs;
  if (spare_scatters_.empty()) {
    rs = std::make_unique<RangeReduceScatter>(comm_, shards_);
  } else {
    rs = std::move(spare_scatters_.back());
    spare_scatters_.pop_back();
  }
  rs->start(grads(), r);  // copies the pieces: the full-size range is free from here on
  scatters_.push_back(std::move(rs));
  sample_residency();                            // the peak: this unit's full-size grads still live
  release_range(grads(), r.begin, r.end, 0.0f);  // spent: zero, and its pages go back
}

void ZeroOptimizer::finish_oldest_scatter() {
  scatters_.front()->finish(static_cast<float*>(grad_acc_.data));
  spare_scatters_.push_back(std::move(scatters_.front()));
  scatters_.pop_front();
}

void ZeroOptimizer::reduce_gradients() {
  if (stage_ == 1)
    reduce_scatter_in_place(comm_, shards_, static_cast<float*>(model_.grads().data));
  while (!scatters_.empty()) finish_oldest_scatter();
}

double ZeroOptimizer::grad_norm() {
  const double local = be_.sum_squares(shard_grads());
  return std::sqrt(comm_.all_reduce_scalar(local, dist::ReduceOp::sum));
}

void ZeroOptimizer::scale_grads(float alpha) {
  be_.scale(shard_grads(), alpha);
}

void ZeroOptimizer::step(float lr, float beta1, float beta2, float eps, float weight_decay) {
  const Range s = shard();
  opt_->step(slice(model_.params(), s.begin, s.size()), shard_grads(), lr, beta1, beta2, eps,
             weight_decay);
  publish_params();
}

void ZeroOptimizer::publish_params() {
  if (stage_ < 3) {
    all_gather_in_place(comm_, shards_, params(), staging_);
  } else {
    prefetch_.finish();
    prefetch_unit_ = -1;
    for (size_t u = 0; u < unit_range_.size(); ++u) release(static_cast<int>(u));
  }
  model_.refresh_compute_weights();
}

void ZeroOptimizer::release(int unit) {
  live_[static_cast<size_t>(unit)] = false;
  const Range r = unit_range_[static_cast<size_t>(unit)];
  const Range mine = shards_.piece(comm_.rank(), r.begin, r.end);
  // Freed pages read 0; the bytes sharing a page with the shard read NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  release_range(params(), r.begin, mine.begin, nan);
  release_range(params(), mine.end, r.end, nan);
}

void ZeroOptimizer::ensure_gathered(int unit) {
  if (prefetch_unit_ >= 0) {  // a prefetch is in flight: land it first (FIFO order)
    prefetch_.finish();
    live_[static_cast<size_t>(prefetch_unit_)] = true;
    prefetch_unit_ = -1;
  }
  if (live_[static_cast<size_t>(unit)]) return;
  sync_gather_.start(params(), unit_range_[static_cast<size_t>(unit)]);
  sync_gather_.finish();
  live_[static_cast<size_t>(unit)] = true;
}

void ZeroOptimizer::prefetch(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= unit_range_.size()) return;
  if (live_[static_cast<size_t>(unit)]) return;
  prefetch_.start(params(), unit_range_[static_cast<size_t>(unit)]);
  prefetch_unit_ = unit;
}

void ZeroOptimizer::before_unit(int unit, bool backward) {
  const int final_unit = static_cast<int>(unit_range_.size()) - 1;
  ensure_gathered(unit);
  if (unit == final_unit) ensure_gathered(0);  // the tied head reads wte
  // The unit visited just before this one is done (unit 0 stays for the head).
  const int prev = backward ? unit + 1 : unit - 1;
  if (prev > 0 && prev <= final_unit && prev != unit) release(prev);
  const int next = backward ? unit - 1 : unit + 1;
  if (next > 0 && next <= final_unit) prefetch(next);
  sample_residency();
}

ZeroMemory ZeroOptimizer::memory() const {
  const int64_t full = shards_.numel() * 4;
  ZeroMemory m;
  m.params = stage_ == 3 ? peak_params_ : full;
  m.grads = stage_ >= 2 ? peak_grads_ + static_cast<int64_t>(grad_acc_.nbytes()) : full;
  m.optimizer = static_cast<int64_t>(opt_->bytes());
  m.scratch = std::max(peak_scratch_, scratch_bytes());
  return m;
}

}  // namespace trainer::parallel
