#include "runtime/parallel/zero_optimizer.h"

#include "runtime/parallel/tp_grad_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/check.h"

namespace trainer::parallel {

ZeroOptimizer::ZeroOptimizer(int stage, Backend& be, model::Gpt& model, dist::Comm& comm,
                             dist::Comm* expert_comm)
    : stage_(stage),
      be_(be),
      model_(model),
      comm_(comm),
      expert_comm_(expert_comm),
      units_(model.layout(), comm.size(), expert_comm != nullptr ? expert_comm->size() : 0),
      segments_(units_.segments),
      shards_(units_.shards),
      unit_range_(units_.unit_range) {
  TRAINER_CHECK(stage >= 1 && stage <= 3, "zero stage " << stage);
  int64_t owned_total = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Range s = owned(i);
    opts_.push_back(std::make_unique<optim::AdamW>(be_, model_.layout(), s.begin, s.end));
    acc_offset_.push_back(segments_[i].sharded() ? owned_total : -1);
    if (segments_[i].sharded()) owned_total += s.size();
  }
  if (stage_ <= 2) gather_staging_ = BackendBuffer(be_, zero1_staging_floats(segments_));
  if (stage_ >= 2) {
    grad_acc_ = BackendBuffer(be_, owned_total);
    model_.hooks().unit_grads_ready = [this](int unit) { on_unit_grads_ready(unit); };
    model_.hooks().before_unit = [this](int unit, bool bwd) { before_unit(unit, bwd); };
  }
  if (stage_ == 3) {
    for (UnitGather* g : {&sync_gather_, &prefetch_})
      for (int i = 0; i < units_.max_parts; ++i) g->push_back(std::make_unique<RangeGather>());
    // The shard this rank owns is held from here on (the model's params may start released,
    // StateMemory::released): the weights are drawn or loaded into it; the rest of each unit
    // comes by its gather. Unit by unit, as the gathers acquire (the cuda backend keeps a pool of
    // unmapped pages as large as its largest acquire).
    // (Every segment's: one on a single rank, which is never released, too.)
    for (size_t i = 0; i < segments_.size(); ++i) {
      const Range mine = owned(i);
      for (const Range& unit : unit_range_) {
        const int64_t lo = std::max(mine.begin, unit.begin), hi = std::min(mine.end, unit.end);
        if (lo < hi) be_.acquire(model_.params().slice(lo, hi - lo));
      }
    }
    live_.assign(unit_range_.size(), true);
    publish_params();
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  // Not finish_gather: this runs while a failed step unwinds, and a prefetch whose peer died
  // would throw out of a destructor (std::terminate: SIGABRT instead of the error naming the
  // rank). Each RangeGather's destructor waits for its op and swallows the failure, which
  // whoever waited on the group first has reported.
}

Range ZeroOptimizer::owned(size_t i) const {
  const ZeroSegment& s = segments_.at(i);
  return s.owned(group(s).rank());
}

Tensor ZeroOptimizer::owned_grads(size_t i) const {
  const Range r = owned(i);
  if (stage_ >= 2 && segments_[i].sharded())
    return grad_acc_.tensor().slice(acc_offset_.at(i), r.size());
  return model_.grads().slice(r.begin, r.size());
}

void ZeroOptimizer::set_adam_step(int64_t t) {
  for (auto& opt : opts_) opt->set_step_count(t);
}

void ZeroOptimizer::begin_step() {
  if (stage_ == 1) {
    be_.zero(model_.grads());
    return;
  }
  be_.release(model_.grads(), 0.0f);  // pages come back as backward writes them
  be_.zero(grad_acc_.tensor());
}

void ZeroOptimizer::sample_residency() {
  const Tensor copy = model_.bf16_copy();
  const int64_t params =
      be_.resident_bytes(model_.params()) + (copy.empty() ? 0 : be_.resident_bytes(copy));
  peak_params_ = std::max(peak_params_, params);
  peak_grads_ = std::max(peak_grads_, be_.resident_bytes(model_.grads()));
  peak_scratch_ = std::max(peak_scratch_, scratch_bytes());
}

int64_t ZeroOptimizer::scratch_bytes() const {
  int64_t bytes = gather_staging_.nbytes();  // (stage 3's unit gathers land in place)
  for (const auto& [segment, rs] : scatters_) bytes += rs->bytes();
  for (const auto& rs : spare_scatters_) bytes += rs->bytes();
  return bytes;
}

void ZeroOptimizer::on_unit_grads_ready(int unit) {
  // the unit's part in each sharded segment it meets (one without expert parallelism)
  units_.for_each_part(unit, [&](size_t i, Range part) {
    const ZeroSegment& s = segments_[i];
    if (scatters_.size() >= size_t{kScattersInFlight}) finish_oldest_scatter();
    std::unique_ptr<RangeReduceScatter> rs;
    if (spare_scatters_.empty()) {
      rs = std::make_unique<RangeReduceScatter>(be_, units_.range_op_floats);
    } else {
      rs = std::move(spare_scatters_.back());
      spare_scatters_.pop_back();
    }
    // copies the pieces: the full-size range is free from here on
    rs->start(group(s), s.shards, model_.grads().slice(s.flat.begin, s.flat.size()), part);
    scatters_.emplace_back(i, std::move(rs));
  });
  sample_residency();  // the peak: this unit's full-size grads still live
  units_.for_each_part(unit, [&](size_t i, Range part) {  // spent: zero (pages go back)
    be_.release(model_.grads().slice(segments_[i].flat.begin + part.begin, part.size()), 0.0f);
  });
}

void ZeroOptimizer::finish_oldest_scatter() {
  auto& [segment, rs] = scatters_.front();
  rs->finish(owned_grads(segment));
  spare_scatters_.push_back(std::move(rs));
  scatters_.pop_front();
}

void ZeroOptimizer::reduce_gradients() {
  if (stage_ == 1)
    for (const ZeroSegment& s : segments_)
      if (s.sharded())  // (a group of one has nothing to sum: on cuda it is Gloo, host memory only)
        reduce_scatter_in_place(group(s), s.shards,
                                model_.grads().slice(s.flat.begin, s.flat.size()));
  while (!scatters_.empty()) finish_oldest_scatter();
}

double ZeroOptimizer::grad_norm(dist::Comm* tp, dist::Comm* pp) {
  // Under expert parallelism each dense element's shard is on one rank of the dp group too, so
  // it counts whole (not 1/ep as where every ep rank holds a reduced copy).
  const bool sharded = expert_comm_ != nullptr;
  double local = 0;
  for (size_t i = 0; i < segments_.size(); ++i)
    local += tp_weighted_sum_squares(be_, model_.layout(), owned_grads(i), owned(i).begin, sharded);
  double sum = comm_.all_reduce_scalar(local, dist::ReduceOp::sum);
  for (dist::Comm* c : {tp, pp})
    if (c != nullptr && c->size() > 1) sum = c->all_reduce_scalar(sum, dist::ReduceOp::sum);
  return std::sqrt(sum);
}

void ZeroOptimizer::step(float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale) {
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Range s = owned(i);
    opts_[i]->step(model_.params().slice(s.begin, s.size()), owned_grads(i), lr, beta1, beta2, eps,
                   weight_decay, Tensor(), grad_scale);
  }
  publish_params();
}

void ZeroOptimizer::publish_params() {
  if (stage_ < 3) {
    for (const ZeroSegment& s : segments_)
      if (s.sharded())  // (each rank of a group of one holds all of its segment)
        all_gather_in_place(be_, group(s), s.shards,
                            model_.params().slice(s.flat.begin, s.flat.size()),
                            gather_staging_.tensor());
  } else {
    finish_gather(prefetch_);
    prefetch_unit_ = -1;
    for (size_t u = 0; u < unit_range_.size(); ++u) release(static_cast<int>(u));
    return;  // each unit's bf16 copy is refreshed when it is gathered
  }
  model_.refresh_compute_weights();
}

void ZeroOptimizer::release(int unit) {
  live_[static_cast<size_t>(unit)] = false;
  const Range r = unit_range_[static_cast<size_t>(unit)];
  // Freed pages read 0; the bytes sharing a page with the shard read NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  units_.for_each_part(unit, [&](size_t i, Range part) {  // all of each part but this rank's piece
    const ZeroSegment& s = segments_[i];
    const Range mine = s.shards.piece(group(s).rank(), part.begin, part.end);
    const int64_t at = s.flat.begin;
    release_params({at + part.begin, at + mine.begin}, nan);
    release_params({at + mine.end, at + part.end}, nan);
  });
  // bf16 compute: the unit's whole bf16 copy goes (this rank's piece too: the master weights
  // stay, and the copy is rounded from them at the next gather).
  const Tensor copy = model_.bf16_copy();
  if (!copy.empty()) be_.release(copy.slice(r.begin, r.size()), nan);
}

void ZeroOptimizer::release_params(Range r, float fill) {
  if (r.size() > 0) be_.release(model_.params().slice(r.begin, r.size()), fill);
}

void ZeroOptimizer::ensure_gathered(int unit) {
  if (prefetch_unit_ >= 0) {  // a prefetch is in flight: land it first (FIFO order)
    finish_gather(prefetch_);
    landed(prefetch_unit_);
    prefetch_unit_ = -1;
  }
  if (live_[static_cast<size_t>(unit)]) return;
  start_gather(sync_gather_, unit);
  finish_gather(sync_gather_);
  landed(unit);
}

void ZeroOptimizer::acquire(const Tensor& flat, int unit) {
  const Range r = unit_range_[static_cast<size_t>(unit)];
  if (!flat.empty() && r.size() > 0) be_.acquire(flat.slice(r.begin, r.size()));
}

void ZeroOptimizer::start_gather(UnitGather& g, int unit) {
  acquire(model_.params(), unit);  // the gather lands in released memory
  size_t k = 0;
  units_.for_each_part(unit, [&](size_t i, Range part) {
    const ZeroSegment& s = segments_[i];
    g.at(k++)->start(group(s), s.shards, model_.params().slice(s.flat.begin, s.flat.size()), part);
  });
}

void ZeroOptimizer::finish_gather(UnitGather& g) {
  for (auto& gather : g) gather->finish();  // (a no-op on one not started)
}

void ZeroOptimizer::landed(int unit) {
  live_[static_cast<size_t>(unit)] = true;
  const Range r = unit_range_[static_cast<size_t>(unit)];
  acquire(model_.bf16_copy(), unit);
  model_.refresh_compute_weights(r.begin, r.size());  // bf16 compute: the matmuls' copy
}

void ZeroOptimizer::prefetch(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= unit_range_.size()) return;
  if (live_[static_cast<size_t>(unit)]) return;
  start_gather(prefetch_, unit);
  prefetch_unit_ = unit;
}

void ZeroOptimizer::before_unit(int unit, bool backward) {
  const int final_unit = static_cast<int>(unit_range_.size()) - 1;
  if (backward) {  // its gradients, released since the last step's reduction, are written now
    acquire(model_.grads(), unit);
    if (unit == final_unit) acquire(model_.grads(), 0);  // the tied head's wte gradient
  }
  if (stage_ < 3) return;
  ensure_gathered(unit);
  if (unit == final_unit) ensure_gathered(0);  // the tied head reads wte
  sample_residency();  // the peak: this unit landed, the one before it not yet released
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
  // params: the fp32 buffer and, in bf16 compute, its bf16 copy (released with it in stage 3).
  m.params = stage_ == 3 ? peak_params_ : full + static_cast<int64_t>(model_.compute_copy_bytes());
  m.grads = stage_ >= 2 ? peak_grads_ + grad_acc_.nbytes() : full;
  for (const auto& opt : opts_) m.optimizer += static_cast<int64_t>(opt->bytes());
  m.scratch = std::max(peak_scratch_, scratch_bytes());
  return m;
}

}  // namespace trainer::parallel
