#include "runtime/parallel/zero_comm.h"

#include <exception>

#include "runtime/core/check.h"

namespace trainer::parallel {
namespace {

constexpr auto kF32 = dist::CommDType::f32;

size_t count(int64_t n) {
  return static_cast<size_t>(n);
}

float* f32(const Tensor& t) {
  return static_cast<float*>(t.data);
}

// Waits for each op in order, then forgets them; the first failure is rethrown after all are
// waited for (a later op may still write into the buffers).
void wait_all(std::vector<std::shared_ptr<dist::Work>>& works) {
  std::exception_ptr first;
  for (const std::shared_ptr<dist::Work>& w : works) {
    try {
      w->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  works.clear();
  if (first) std::rethrow_exception(first);
}

void wait_all_quietly(std::vector<std::shared_ptr<dist::Work>>& works) {
  try {
    wait_all(works);
  } catch (...) {  // the failure was (or will be) reported by whoever waits on the group
  }
}

}  // namespace

void reduce_scatter_in_place(dist::Comm& comm, const ZeroShards& s, const Tensor& buf) {
  const int64_t c = s.chunk();
  // Rank-major chunks: chunk `rank` of the input is the output's place, as in NCCL's in-place
  // definition (GlooComm copies its input before reducing).
  comm.reduce_scatter(f32(buf), f32(buf) + c * comm.rank(), count(c), kF32, dist::ReduceOp::sum);
  const int64_t tail = s.numel() - s.tail_begin();
  if (tail > 0) comm.all_reduce(f32(buf) + s.tail_begin(), count(tail), kF32, dist::ReduceOp::sum);
}

void all_gather_in_place(Backend& be, dist::Comm& comm, const ZeroShards& s, const Tensor& buf,
                         const Tensor& staging) {
  const int64_t c = s.chunk();
  be.copy(staging.slice(0, c), buf.slice(c * comm.rank(), c));
  comm.all_gather(staging.data, buf.data, count(c), kF32);
  const int64_t tail = s.numel() - s.tail_begin();
  if (tail > 0) comm.broadcast(f32(buf) + s.tail_begin(), count(tail), kF32, s.dp() - 1);
}

RangeReduceScatter::RangeReduceScatter(Backend& be, int64_t staging_floats)
    : be_(be), staging_(be, staging_floats) {}

RangeReduceScatter::~RangeReduceScatter() {
  // the communicator must not write into staging_ after it is gone
  wait_all_quietly(works_);
}

void RangeReduceScatter::start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r) {
  TRAINER_CHECK(works_.empty(), "reduce-scatter started while one is in flight");
  TRAINER_CHECK(comm.size() == s.dp(),
                "a cut over " << s.dp() << " ranks on a group of " << comm.size());
  TRAINER_CHECK(r.size() <= staging_.numel(),
                "range [" << r.begin << ", " << r.end << ") is longer than the staging");
  comm_ = &comm;
  s_ = &s;
  r_ = r;
  be_.copy(staging_.slice(0, r.size()), buf.slice(r.begin, r.size()));
  // One reduce to each owner of a piece of r, in owner order on every member.
  for (int q = 0; q < s.dp(); ++q) {
    const Range p = s.piece(q, r.begin, r.end);
    if (p.size() > 0)
      works_.push_back(comm.reduce_async(staging_.data() + (p.begin - r.begin), count(p.size()),
                                         kF32, dist::ReduceOp::sum, q));
  }
}

void RangeReduceScatter::finish(const Tensor& shard_acc) {
  if (works_.empty()) return;
  wait_all(works_);
  const Range mine = s_->piece(comm_->rank(), r_.begin, r_.end);
  if (mine.size() == 0) return;
  const int64_t at = mine.begin - s_->shard(comm_->rank()).begin;
  be_.axpy(shard_acc.slice(at, mine.size()), staging_.slice(mine.begin - r_.begin, mine.size()),
           1.0f);
}

RangeGather::~RangeGather() {
  wait_all_quietly(works_);  // the broadcasts write into the gathered buffer
}

void RangeGather::start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r) {
  TRAINER_CHECK(works_.empty(), "gather started while one is in flight");
  TRAINER_CHECK(comm.size() == s.dp(),
                "a cut over " << s.dp() << " ranks on a group of " << comm.size());
  r_ = r;
  // Each owner broadcasts its piece of r in place: no staging, and no padding on the wire.
  for (int q = 0; q < s.dp(); ++q) {
    const Range p = s.piece(q, r.begin, r.end);
    if (p.size() > 0)
      works_.push_back(comm.broadcast_async(f32(buf) + p.begin, count(p.size()), kF32, q));
  }
}

void RangeGather::finish() {
  wait_all(works_);
}

}  // namespace trainer::parallel
