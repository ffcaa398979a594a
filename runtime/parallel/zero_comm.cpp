#include "runtime/parallel/zero_comm.h"

#include <algorithm>
#include <cstring>

namespace trainer::parallel {
namespace {

constexpr auto kF32 = dist::CommDType::f32;

size_t count(int64_t n) {
  return static_cast<size_t>(n);
}

}  // namespace

void reduce_scatter_in_place(dist::Comm& comm, const ZeroShards& s, float* buf) {
  const int64_t c = s.chunk();
  // Rank-major chunks: chunk `rank` of the input is the output's place, as in NCCL's in-place
  // definition (GlooComm copies its input before reducing).
  comm.reduce_scatter(buf, buf + c * comm.rank(), count(c), kF32, dist::ReduceOp::sum);
  const int64_t tail = s.numel() - s.tail_begin();
  if (tail > 0) comm.all_reduce(buf + s.tail_begin(), count(tail), kF32, dist::ReduceOp::sum);
}

void all_gather_in_place(dist::Comm& comm, const ZeroShards& s, float* buf,
                         std::vector<float>& staging) {
  const int64_t c = s.chunk();
  staging.assign(buf + c * comm.rank(), buf + c * (comm.rank() + 1));
  comm.all_gather(staging.data(), buf, count(c), kF32);
  const int64_t tail = s.numel() - s.tail_begin();
  if (tail > 0) comm.broadcast(buf + s.tail_begin(), count(tail), kF32, s.dp() - 1);
}

RangeReduceScatter::~RangeReduceScatter() {
  if (!work_) return;
  try {  // the comm thread must not write into staging_ after it is gone
    work_->wait();
  } catch (...) {  // the failure was (or will be) reported by whoever waits on the group
  }
}

void RangeReduceScatter::start(const float* buf, Range r) {
  r_ = r;
  k_ = s_.max_piece(r.begin, r.end);
  const int dp = s_.dp();
  staging_.assign(count(k_) * static_cast<size_t>(dp + 1), 0.0f);
  for (int q = 0; q < dp; ++q) {
    const Range p = s_.piece(q, r.begin, r.end);
    std::copy(buf + p.begin, buf + p.end, staging_.begin() + static_cast<long>(k_ * q));
  }
  work_ = comm_.reduce_scatter_async(staging_.data(), staging_.data() + k_ * dp, count(k_), kF32,
                                     dist::ReduceOp::sum);
}

void RangeReduceScatter::finish(float* shard_acc) {
  if (!work_) return;
  work_->wait();
  work_.reset();
  const float* out = staging_.data() + k_ * s_.dp();
  const Range mine = s_.piece(comm_.rank(), r_.begin, r_.end);
  float* acc = shard_acc + (mine.begin - s_.shard(comm_.rank()).begin);
  for (int64_t i = 0; i < mine.size(); ++i) acc[i] += out[i];
}

void RangeGather::start(float* buf, Range r) {
  buf_ = buf;
  r_ = r;
  k_ = s_.max_piece(r.begin, r.end);
  const Range mine = s_.piece(comm_.rank(), r.begin, r.end);
  send_.assign(count(k_), 0.0f);
  std::copy(buf + mine.begin, buf + mine.end, send_.begin());
  recv_.resize(count(k_) * static_cast<size_t>(s_.dp()));
  work_ = comm_.all_gather_async(send_.data(), recv_.data(), count(k_), kF32);
}

void RangeGather::finish() {
  if (!work_) return;
  work_->wait();
  work_.reset();
  for (int q = 0; q < s_.dp(); ++q) {
    const Range p = s_.piece(q, r_.begin, r_.end);
    std::copy(recv_.begin() + static_cast<long>(k_ * q),
              recv_.begin() + static_cast<long>(k_ * q + p.size()), buf_ + p.begin);
  }
}

}  // namespace trainer::parallel
