#include "runtime/train/host_shard.h"

namespace trainer::train {
namespace {

Tensor run_tensor(Backend& be, float* p, const ckpt::OwnedShard& run) {
  return Tensor(p, {run.end - run.begin}, DType::f32, be.device());
}

}  // namespace

HostShard::HostShard(Backend& be, const OwnedState& owned, bool copy)
    : be_(be), owned_(owned), copy_(copy) {
  if (!copy_) {
    host_ = owned_.runs;
    return;
  }
  size_t n = 0;
  for (const ckpt::OwnedShard& run : owned_.runs) n += static_cast<size_t>(run.end - run.begin);
  params_.reset(new float[n]);
  m_.reset(new float[n]);
  v_.reset(new float[n]);
  size_t at = 0;
  for (const ckpt::OwnedShard& run : owned_.runs) {
    host_.push_back({run.begin, run.end, params_.get() + at, m_.get() + at, v_.get() + at});
    at += static_cast<size_t>(run.end - run.begin);
  }
}

bool HostShard::holds(const OwnedState& o, bool copy) const {
  if (copy != copy_ || o.runs.size() != owned_.runs.size()) return false;
  for (size_t i = 0; i < o.runs.size(); ++i) {
    const ckpt::OwnedShard &a = o.runs[i], &b = owned_.runs[i];
    if (a.begin != b.begin || a.end != b.end || a.params != b.params || a.m != b.m || a.v != b.v)
      return false;
  }
  return true;
}

ckpt::OwnedRuns HostShard::shard() {
  return host_;
}

void HostShard::pull() {
  if (!copy_ || owned_.runs.empty()) return;
  be_.synchronize();
  for (size_t i = 0; i < owned_.runs.size(); ++i) {
    const ckpt::OwnedShard &run = owned_.runs[i], &host = host_[i];
    if (run.end == run.begin) continue;
    be_.to_host(host.params, run_tensor(be_, run.params, run));
    be_.to_host(host.m, run_tensor(be_, run.m, run));
    be_.to_host(host.v, run_tensor(be_, run.v, run));
  }
}

void HostShard::push() {
  if (!copy_ || owned_.runs.empty()) return;
  for (size_t i = 0; i < owned_.runs.size(); ++i) {
    const ckpt::OwnedShard &run = owned_.runs[i], &host = host_[i];
    if (run.end == run.begin) continue;
    be_.from_host(run_tensor(be_, run.params, run), host.params);
    be_.from_host(run_tensor(be_, run.m, run), host.m);
    be_.from_host(run_tensor(be_, run.v, run), host.v);
  }
  be_.synchronize();
}

}  // namespace trainer::train
