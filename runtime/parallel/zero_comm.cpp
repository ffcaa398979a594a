#include "runtime/parallel/zero_comm.h"

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
  if (!work_) return;
  try {  // the communicator must not write into staging_ after it is gone
    work_->wait();
  } catch (...) {  // the failure was (or will be) reported by whoever waits on the group
  }
}

void RangeReduceScatter::start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r) {
  TRAINER_CHECK(!work_, "reduce-scatter started while one is in flight");
  TRAINER_CHECK(comm.size() == s.dp(),
                "a cut over " << s.dp() << " ranks on a group of " << comm.size());
  comm_ = &comm;
  s_ = &s;
  r_ = r;
  k_ = s.max_piece(r.begin, r.end);
  const int dp = s.dp();
  TRAINER_CHECK(k_ * (dp + 1) <= staging_.numel(),
                "range [" << r.begin << ", " << r.end << ") needs pieces of " << k_
                          << " elements, more than the staging holds");
  // Padding past a shorter piece holds stale values: it only sums into padding, never read.
  for (int q = 0; q < dp; ++q) {
    const Range p = s.piece(q, r.begin, r.end);
    be_.copy(staging_.slice(k_ * q, p.size()), buf.slice(p.begin, p.size()));
  }
  work_ = comm.reduce_scatter_async(staging_.data(), staging_.data() + k_ * dp, count(k_), kF32,
                                    dist::ReduceOp::sum);
}

void RangeReduceScatter::finish(const Tensor& shard_acc) {
  if (!work_) return;
  work_->wait();
  work_.reset();
  const Range mine = s_->piece(comm_->rank(), r_.begin, r_.end);
  const int64_t at = mine.begin - s_->shard(comm_->rank()).begin;
  be_.axpy(shard_acc.slice(at, mine.size()), staging_.slice(k_ * s_->dp(), mine.size()), 1.0f);
}

RangeGather::RangeGather(Backend& be, int64_t max_piece, int64_t max_gathered)
    : be_(be), send_(be, max_piece), recv_(be, max_gathered) {}

RangeGather::~RangeGather() {
  if (!work_) return;
  try {
    work_->wait();
  } catch (...) {  // the failure was (or will be) reported by whoever waits on the group
  }
}

void RangeGather::start(dist::Comm& comm, const ZeroShards& s, const Tensor& buf, Range r) {
  TRAINER_CHECK(!work_, "gather started while one is in flight");
  TRAINER_CHECK(comm.size() == s.dp(),
                "a cut over " << s.dp() << " ranks on a group of " << comm.size());
  comm_ = &comm;
  s_ = &s;
  buf_ = buf;
  r_ = r;
  k_ = s.max_piece(r.begin, r.end);
  TRAINER_CHECK(k_ <= send_.numel() && k_ * s.dp() <= recv_.numel(),
                "range [" << r.begin << ", " << r.end << ") needs pieces of " << k_
                          << " elements, more than the staging holds");
  const Range mine = s.piece(comm.rank(), r.begin, r.end);
  be_.copy(send_.slice(0, mine.size()), buf.slice(mine.begin, mine.size()));
  work_ = comm.all_gather_async(send_.data(), recv_.data(), count(k_), kF32);
}

void RangeGather::finish() {
  if (!work_) return;
  work_->wait();
  work_.reset();
  for (int q = 0; q < s_->dp(); ++q) {
    const Range p = s_->piece(q, r_.begin, r_.end);
    be_.copy(buf_.slice(p.begin, p.size()), recv_.slice(k_ * q, p.size()));
  }
}

}  // namespace trainer::parallel
