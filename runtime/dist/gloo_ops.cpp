// The typed bodies of GlooComm's ops; they run on the communicator's worker thread.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstring>

#include "runtime/dist/comm_dispatch.h"
#include "runtime/dist/gloo_comm.h"

namespace trainer::dist {
namespace {

// Unbound-buffer slots of our own point-to-point traffic; gloo's collectives use prefixes < 0x20.
constexpr uint64_t kReduceScatterSlot = uint64_t{0x70} << 56;
constexpr uint64_t kSendRecvSlot = uint64_t{0x71} << 56;

template <typename T>
gloo::AllreduceOptions::Func reduce_func(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  return op == ReduceOp::max ? static_cast<Fn>(&gloo::max<T>) : static_cast<Fn>(&gloo::sum<T>);
}

void wait_recv(gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout) {
  if (!buf.waitRecv(timeout)) throw std::runtime_error("recv aborted");
}

void wait_send(gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout) {
  if (!buf.waitSend(timeout)) throw std::runtime_error("send aborted");
}

void check_peer(int peer, int size) {
  if (peer < 0 || peer >= size)
    throw std::invalid_argument("peer " + std::to_string(peer) + " is not a member (size " +
                                std::to_string(size) + ")");
}

}  // namespace

void GlooComm::do_all_reduce(void* data, size_t count, CommDType t, ReduceOp op) {
  if (size_ == 1 || count == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(static_cast<T*>(data), count);
    o.setReduceFunction(reduce_func<T>(op));
    o.setTimeout(timeout());
    gloo::allreduce(o);
    if (op == ReduceOp::avg) divide_by(static_cast<T*>(data), count, size_);
  });
}

// Ring reduce-scatter: in n-1 steps each rank passes a partial chunk to its right neighbour and
// folds the one from its left into its copy; after the last step chunk `rank` is complete.
void GlooComm::do_reduce_scatter(const void* in, void* out, size_t count, CommDType t,
                                 ReduceOp op) {
  size_t esize = comm_dtype_size(t), chunk = count * esize;
  if (count == 0) return;
  if (size_ == 1) {
    std::memmove(out, in, chunk);
    return;
  }
  std::vector<char> acc(static_cast<const char*>(in),
                        static_cast<const char*>(in) + chunk * static_cast<size_t>(size_));
  std::vector<char> incoming(chunk);
  auto acc_buf = ctx_->createUnboundBuffer(acc.data(), acc.size());
  auto in_buf = ctx_->createUnboundBuffer(incoming.data(), incoming.size());
  int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  for (int step = 0; step < size_ - 1; ++step) {
    size_t send_idx = static_cast<size_t>((rank_ - step - 1 + 2 * size_) % size_);
    size_t recv_idx = static_cast<size_t>((rank_ - step - 2 + 2 * size_) % size_);
    uint64_t slot = kReduceScatterSlot | static_cast<uint64_t>(step);
    acc_buf->send(right, slot, send_idx * chunk, chunk);
    in_buf->recv(left, slot, 0, chunk);
    wait_recv(*in_buf, timeout());
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      reduce_into(reinterpret_cast<T*>(acc.data() + recv_idx * chunk),
                  reinterpret_cast<const T*>(incoming.data()), count, op);
    });
    wait_send(*acc_buf, timeout());  // the next step overwrites nothing it sent, but be strict
  }
  std::memcpy(out, acc.data() + static_cast<size_t>(rank_) * chunk, chunk);
  if (op == ReduceOp::avg)
    dispatch_dtype(t, [&](auto tag) { divide_by(static_cast<decltype(tag)*>(out), count, size_); });
}

void GlooComm::do_all_gather(const void* in, void* out, size_t count, CommDType t) {
  size_t bytes = count * comm_dtype_size(t);
  if (size_ == 1 || count == 0) {
    if (bytes) std::memmove(out, in, bytes);
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo::AllgatherOptions o(ctx_);
    o.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
    o.setOutput(static_cast<T*>(out), count * static_cast<size_t>(size_));
    o.setTimeout(timeout());
    gloo::allgather(o);
  });
}

void GlooComm::do_broadcast(void* data, size_t count, CommDType t, int root) {
  check_peer(root, size_);
  if (size_ == 1 || count == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo::BroadcastOptions o(ctx_);
    o.setOutput(static_cast<T*>(data), count);
    o.setRoot(root);
    o.setTimeout(timeout());
    gloo::broadcast(o);
  });
}

void GlooComm::do_reduce(void* data, size_t count, CommDType t, ReduceOp op, int root) {
  check_peer(root, size_);
  if (size_ == 1 || count == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo::ReduceOptions o(ctx_);
    o.setOutput(static_cast<T*>(data), count);
    o.setRoot(root);
    o.setReduceFunction(reduce_func<T>(op));
    o.setTimeout(timeout());
    gloo::reduce(o);
    if (op == ReduceOp::avg && rank_ == root) divide_by(static_cast<T*>(data), count, size_);
  });
}

void GlooComm::do_all_to_all(const void* in, void* out, size_t count, CommDType t) {
  size_t bytes = count * comm_dtype_size(t) * static_cast<size_t>(size_);
  if (size_ == 1 || count == 0) {
    if (bytes) std::memmove(out, in, bytes);
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo::AlltoallOptions o(ctx_);
    o.setInput(const_cast<T*>(static_cast<const T*>(in)), count * static_cast<size_t>(size_));
    o.setOutput(static_cast<T*>(out), count * static_cast<size_t>(size_));
    o.setTimeout(timeout());
    gloo::alltoall(o);
  });
}

void GlooComm::do_send(const void* data, size_t bytes, int peer, int tag) {
  check_peer(peer, size_);
  if (peer == rank_) {  // gloo cannot send to itself
    auto* p = static_cast<const uint8_t*>(data);
    self_mailbox_[tag].emplace_back(p, p + bytes);
    return;
  }
  auto buf = ctx_->createUnboundBuffer(const_cast<void*>(data), bytes);
  buf->send(peer, kSendRecvSlot | static_cast<uint32_t>(tag));
  wait_send(*buf, timeout());
}

void GlooComm::do_recv(void* data, size_t bytes, int peer, int tag) {
  check_peer(peer, size_);
  if (peer == rank_) {
    auto& box = self_mailbox_[tag];
    if (box.empty()) throw std::invalid_argument("recv from self with no earlier send to self");
    if (box.front().size() != bytes)
      throw std::invalid_argument("recv from self: size " + std::to_string(bytes) +
                                  " != sent size " + std::to_string(box.front().size()));
    std::memcpy(data, box.front().data(), bytes);
    box.pop_front();
    return;
  }
  auto buf = ctx_->createUnboundBuffer(data, bytes);
  buf->recv(peer, kSendRecvSlot | static_cast<uint32_t>(tag));
  wait_recv(*buf, timeout());
}

void GlooComm::do_send_recv_batch(const std::vector<P2pTransfer>& transfers) {
  // (to and from itself through the mailbox: every send first, so a receive finds its message)
  for (const bool send : {true, false})
    for (const P2pTransfer& t : transfers)
      if (t.bytes > 0 && t.send == send && t.peer == rank_) {
        if (send)
          do_send(t.data, t.bytes, t.peer, t.tag);
        else
          do_recv(t.data, t.bytes, t.peer, t.tag);
      }
  struct Posted {
    bool send;
    int peer;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  };
  std::vector<Posted> posted;
  for (const P2pTransfer& t : transfers) {
    if (t.bytes == 0 || t.peer == rank_) continue;
    check_peer(t.peer, size_);
    auto buf = ctx_->createUnboundBuffer(t.data, t.bytes);
    const uint64_t slot = kSendRecvSlot | static_cast<uint32_t>(t.tag);
    if (t.send)
      buf->send(t.peer, slot);
    else
      buf->recv(t.peer, slot);
    posted.push_back({t.send, t.peer, std::move(buf)});
  }
  // The receives first, as before: a dead peer shows there. A wait that fails is blamed on its
  // peer (waiting_on_), not on the batch's other peer, which may have done its part.
  for (const bool send : {false, true})
    for (Posted& p : posted)
      if (p.send == send) {
        waiting_on_ = p.peer;
        if (send)
          wait_send(*p.buf, timeout());
        else
          wait_recv(*p.buf, timeout());
      }
  waiting_on_ = -1;
}

void GlooComm::do_barrier() {
  if (size_ == 1) return;
  gloo::BarrierOptions o(ctx_);
  o.setTimeout(timeout());
  gloo::barrier(o);
}

}  // namespace trainer::dist
