#include "runtime/train/host_shard.h"

namespace trainer::train {

HostShard::HostShard(Backend& be, const OwnedState& owned, bool copy)
    : be_(be), owned_(owned), copy_(copy) {
  if (!copy_) return;
  const auto n = static_cast<size_t>(owned_.end - owned_.begin);
  params_.reset(new float[n]);  // uninitialized: pull() or a load fills every element
  m_.reset(new float[n]);
  v_.reset(new float[n]);
}

Tensor HostShard::owned_tensor(float* p) const {
  return Tensor(p, {owned_.end - owned_.begin}, DType::f32, be_.device());
}

bool HostShard::holds(const OwnedState& o, bool copy) const {
  return copy == copy_ && o.begin == owned_.begin && o.end == owned_.end &&
         o.params == owned_.params && o.m == owned_.m && o.v == owned_.v;
}

ckpt::OwnedShard HostShard::shard() {
  if (!copy_) return {owned_.begin, owned_.end, owned_.params, owned_.m, owned_.v};
  return {owned_.begin, owned_.end, params_.get(), m_.get(), v_.get()};
}

void HostShard::pull() {
  if (!copy_ || owned_.end == owned_.begin) return;
  be_.synchronize();
  be_.to_host(params_.get(), owned_tensor(owned_.params));
  be_.to_host(m_.get(), owned_tensor(owned_.m));
  be_.to_host(v_.get(), owned_tensor(owned_.v));
}

void HostShard::push() {
  if (!copy_ || owned_.end == owned_.begin) return;
  be_.from_host(owned_tensor(owned_.params), params_.get());
  be_.from_host(owned_tensor(owned_.m), m_.get());
  be_.from_host(owned_tensor(owned_.v), v_.get());
  be_.synchronize();
}

}  // namespace trainer::train
