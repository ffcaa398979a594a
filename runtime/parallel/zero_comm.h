#pragma once
// The collectives ZeRO runs over the flat fp32 buffer, cut by ZeroShards. Buffers are Backend
// memory (host on cpu, device on cuda) and every copy and add goes through the Backend, so the
// same code runs over Gloo and over NCCL. Staging is BackendBuffer, sized once by its owner.
//
// Whole buffer (ZeRO-1 after backward, ZeRO-1/2 after the update): one reduce-scatter /
// all-gather over the equal part, in place (chunk r of the buffer is rank r's shard), plus the
// sub-dp tail summed/broadcast apart.
//
// A range [lo, hi) (one bucket or unit, ZeRO-2/3): its pieces per owner are unequal (a unit
// often lies within one or two ranks' shards), so it moves as one reduce to, or one broadcast
// from, each owner of a piece (DeepSpeed's ZeRO-2 reduces its buckets so): the range's length on
// the wire and in staging, where a reduce-scatter of pieces padded to the largest would move and
// stage dp times that piece.
#include <memory>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/core/backend_buffer.h"
#include "runtime/dist/comm.h"
#include "runtime/parallel/zero_shard.h"

namespace trainer::parallel {

// buf[n] := the group sum on this rank's shard (other elements are left as they were).
void reduce_scatter_in_place(dist::Comm& comm, const ZeroShards& s, const Tensor& buf);
// Every rank's shard of buf (in place on its owner) to every rank. staging: chunk() floats.
void all_gather_in_place(Backend& be, dist::Comm& comm, const ZeroShards& s, const Tensor& buf,
                         const Tensor& staging);

// Adds this rank's piece of the group sum of buf[r] into shard_acc (element 0 = shard begin), for
// the cut `s` of buf over `comm` (each start() may name another: ZeRO's segments).
// start() copies buf[r] into the object's own staging, so buf[r] may be reused or released as
// soon as it returns (on a device: by work queued after it), and posts the reduces on the
// communicator; finish() waits and adds. One range in flight per object; several objects may be
// in flight at once (they complete in issue order).
class RangeReduceScatter {
 public:
  // staging_floats: the most range_op_floats() of any range this object will carry.
  RangeReduceScatter(Backend& be, int64_t staging_floats);
  ~RangeReduceScatter();
  // The staging a range takes: a copy of it, reduced in place piece by piece.
  static int64_t range_op_floats(Range r) { return r.size(); }
  void start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r);
  void finish(const Tensor& shard_acc);
  bool pending() const { return !works_.empty(); }
  int64_t bytes() const { return staging_.nbytes(); }

 private:
  Backend& be_;
  dist::Comm* comm_ = nullptr;
  const ZeroShards* s_ = nullptr;
  Range r_;
  BackendBuffer staging_;  // buf[r]; owner q's piece ends up summed on q
  std::vector<std::shared_ptr<dist::Work>> works_;
};

// Gathers buf[r] from the owners' pieces, in place in buf (each owner broadcasts its piece), for
// the cut `s` of buf over `comm` (each start() may name another). start() posts the broadcasts;
// buf[r] is written until finish() has waited for them. One range in flight per object.
class RangeGather {
 public:
  RangeGather() = default;
  ~RangeGather();  // waits for broadcasts in flight: they write into buf
  RangeGather(const RangeGather&) = delete;
  RangeGather& operator=(const RangeGather&) = delete;
  void start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r);
  void finish();
  bool pending() const { return !works_.empty(); }
  Range range() const { return r_; }

 private:
  Range r_;
  std::vector<std::shared_ptr<dist::Work>> works_;
};

}  // namespace trainer::parallel
