#pragma once
// HostShard: the optimizer shard a rank owns (master weights, Adam m and v of each owned run), as
// host memory that checkpoint files are written from and read into. On the cpu backend it is the
// owned memory itself; on a device backend it is a host copy: pull() before a save, push() after a
// load. The copy is also what an asynchronous save would hand to its writer thread.
#include <memory>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/core/backend.h"
#include "runtime/train/train_step.h"

namespace trainer::train {

class HostShard {
 public:
  // copy: stage through host buffers (needed whenever the backend's memory is not host-visible).
  HostShard(Backend& be, const OwnedState& owned, bool copy);
  HostShard(Backend& be, const OwnedState& owned)
      : HostShard(be, owned, be.device() != DeviceType::cpu) {}

  // True when this stages exactly `owned` (same runs and memory) the same way, so it can be
  // reused.
  bool holds(const OwnedState& owned, bool copy) const;
  ckpt::OwnedRuns shard();  // host pointers of every run
  void pull();              // owned memory -> host (before writing a checkpoint)
  void push();              // host -> owned memory (after reading one)

 private:
  Backend& be_;
  OwnedState owned_;
  bool copy_;
  // copy_: the runs' params, m and v, one after another in each (uninitialized: pull() or a load
  // fills every element); host_ has owned_'s runs with pointers into them.
  std::unique_ptr<float[]> params_, m_, v_;
  ckpt::OwnedRuns host_;
};

}  // namespace trainer::train
