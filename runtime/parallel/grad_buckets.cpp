#include "runtime/parallel/grad_buckets.h"

#include "runtime/core/check.h"

namespace trainer::parallel {

GradBuckets::GradBuckets(const model::ParamLayout& layout, Tensor grads, dist::Comm* comm,
                         double bucket_mb, bool overlap, dist::Comm* expert_comm)
    : grads_(grads), comm_(comm), expert_comm_(expert_comm), overlap_(overlap) {
  const int64_t cap = static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4);
  const auto& units = layout.units();
  int max_unit = 0;
  for (const auto& p : layout.params()) max_unit = std::max(max_unit, p.unit);
  bucket_of_unit_.assign(static_cast<size_t>(max_unit + 1), -1);
  // Reverse layout order: the last units' gradients are final first.
  std::vector<int> unit_ids;
  for (const auto& p : layout.params())
    if (unit_ids.empty() || unit_ids.back() != p.unit) unit_ids.push_back(p.unit);
  for (size_t i = units.size(); i-- > 0;) {
    const model::UnitRange& u = units[i];
    if (buckets_.empty() || buckets_.back().numel + u.numel > cap) buckets_.push_back({});
    Bucket& b = buckets_.back();
    // Units are contiguous and visited backwards, so the bucket grows towards lower offsets.
    b.offset = u.offset;
    b.numel += u.numel;
    b.units.push_back(unit_ids[i]);
    bucket_of_unit_[static_cast<size_t>(unit_ids[i])] = static_cast<int>(buckets_.size() - 1);
  }
  for (Bucket& b : buckets_) {
    if (expert_comm_ == nullptr) {
      b.runs = {{b.offset, b.numel, false}};
      continue;
    }
    for (const model::ParamSpec& p : layout.params()) {
      if (p.offset < b.offset || p.offset >= b.offset + b.numel) continue;
      if (!b.runs.empty() && b.runs.back().expert == p.expert)
        b.runs.back().numel += p.numel;
      else
        b.runs.push_back({p.offset, p.numel, p.expert});
    }
  }
}

bool GradBuckets::reduces() const {
  return (comm_ != nullptr && comm_->size() > 1) ||
         (expert_comm_ != nullptr && expert_comm_->size() > 1);
}

void GradBuckets::begin_final_backward() {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.units.size());
    b.work.clear();
    b.launched = false;
  }
  armed_ = true;
}

void GradBuckets::launch(Bucket& b) {
  b.work.clear();
  for (const Bucket::Run& run : b.runs) {
    dist::Comm* c = run.expert ? expert_comm_ : comm_;
    if (c == nullptr || c->size() == 1) continue;
    float* p = static_cast<float*>(grads_.data) + run.offset;
    b.work.push_back(c->all_reduce_async(p, static_cast<size_t>(run.numel), dist::CommDType::f32,
                                         dist::ReduceOp::sum));
  }
  b.launched = true;
}

void GradBuckets::unit_ready(int unit) {
  if (!armed_ || !overlap_ || !reduces()) return;
  const int id = bucket_of_unit_.at(static_cast<size_t>(unit));
  Bucket& b = buckets_[static_cast<size_t>(id)];
  TRAINER_CHECK(b.pending > 0, "unit " << unit << " reported ready twice");
  if (--b.pending == 0) launch(b);
}

void GradBuckets::finish() {
  armed_ = false;
  if (reduces()) {
    for (Bucket& b : buckets_)
      if (!b.launched) launch(b);  // no overlap, or a unit never reported (must still reduce)
    for (Bucket& b : buckets_)
      for (auto& w : b.work) w->wait();
  }
}

}  // namespace trainer::parallel
