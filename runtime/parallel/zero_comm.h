#pragma once
// The collectives ZeRO runs over the flat fp32 buffer, cut by ZeroShards. Buffers are Backend
// memory (host on cpu, device on cuda) and every copy and add goes through the Backend, so the
// same code runs over Gloo and over NCCL. Staging is BackendBuffer, sized once by its owner.
//
// Whole buffer (ZeRO-1 after backward, ZeRO-1/2 after the update): one reduce-scatter /
// all-gather over the equal part, in place (chunk r of the buffer is rank r's shard), plus the
// sub-dp tail summed/broadcast apart.
//
// A range [lo, hi) (one bucket or unit, ZeRO-2/3): its pieces per owner are unequal, so each is
// padded to the largest piece k; a reduce-scatter / all-gather of count k moves them. Traffic is
// dp*k (<= dp * min(range, chunk)), the price of keeping every rank's shard contiguous.
#include <memory>

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
// start() copies the owners' pieces into the object's own staging, so buf[r] may be reused or
// released as soon as it returns (on a device: by work queued after it), and posts the
// reduce-scatter on the communicator; finish() waits and adds. One reduce-scatter in flight per
// object; several objects may be in flight at once (they complete in issue order).
class RangeReduceScatter {
 public:
  // staging_floats: the most range_op_floats() of any range this object will carry.
  RangeReduceScatter(Backend& be, int64_t staging_floats);
  ~RangeReduceScatter();
  // The staging a range takes: its group's padded pieces, then this rank's reduced one.
  static int64_t range_op_floats(const ZeroShards& s, Range r) {
    return s.max_piece(r.begin, r.end) * (s.dp() + 1);
  }
  void start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r);
  void finish(const Tensor& shard_acc);
  bool pending() const { return work_ != nullptr; }
  int64_t bytes() const { return staging_.nbytes(); }

 private:
  Backend& be_;
  dist::Comm* comm_ = nullptr;
  const ZeroShards* s_ = nullptr;
  Range r_;
  int64_t k_ = 0;
  BackendBuffer staging_;  // dp padded pieces, then this rank's reduced piece
  std::shared_ptr<dist::Work> work_;
};

// Gathers buf[r] from the owners' pieces (in place in buf), for the cut `s` of buf over `comm`
// (each start() may name another). start() posts the all-gather on the communicator; finish()
// waits and unpacks. One gather in flight per object.
class RangeGather {
 public:
  // max_piece, max_gathered: the most ZeroShards::max_piece, and times the group's size, of any
  // range this object will carry.
  RangeGather(Backend& be, int64_t max_piece, int64_t max_gathered);
  ~RangeGather();  // waits for a gather in flight: it writes into recv_
  RangeGather(const RangeGather&) = delete;
  RangeGather& operator=(const RangeGather&) = delete;
  void start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r);
  void finish();
  bool pending() const { return work_ != nullptr; }
  Range range() const { return r_; }
  int64_t bytes() const { return send_.nbytes() + recv_.nbytes(); }

 private:
  Backend& be_;
  dist::Comm* comm_ = nullptr;
  const ZeroShards* s_ = nullptr;
  Tensor buf_;
  Range r_;
  int64_t k_ = 0;
  BackendBuffer send_, recv_;
  std::shared_ptr<dist::Work> work_;
};

}  // namespace trainer::parallel
