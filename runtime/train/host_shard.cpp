#include "runtime/train/host_shard.h"

namespace trainer::train {

HostShard::HostShard(Backend& be, const OwnedState& owned, bool copy)
    : be_(be), owned_(owned), copy_(copy) {
  if (!copy_) return;
  const auto n = static_cast<size_t>(owned_.end - owned_.begin);
  params_.resize(n);
  m_.resize(n);
  v_.resize(n);
}

Tensor HostShard::owned_tensor(float* p) const {
  return Tensor(p, {owned_.end - owned_.begin}, DType::f32, be_.device());
}

ckpt::OwnedShard HostShard::shard() {
  if (!copy_) return {owned_.begin, owned_.end, owned_.params, owned_.m, owned_.v};
  return {owned_.begin, owned_.end, params_.data(), m_.data(), v_.data()};
}

void HostShard::pull() {
  if (!copy_ || owned_.end == owned_.begin) return;
  be_.synchronize();
  be_.to_host(params_.data(), owned_tensor(owned_.params));
  be_.to_host(m_.data(), owned_tensor(owned_.m));
  be_.to_host(v_.data(), owned_tensor(owned_.v));
}

void HostShard::push() {
  if (!copy_ || owned_.end == owned_.begin) return;
  be_.from_host(owned_tensor(owned_.params), params_.data());
  be_.from_host(owned_tensor(owned_.m), m_.data());
  be_.from_host(owned_tensor(owned_.v), v_.data());
  be_.synchronize();
}

}  // namespace trainer::train
