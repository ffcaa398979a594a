#pragma once
// GlooComm: Comm over gloo's TCP transport. Every op, blocking or async, is a job on the
// communicator's own WorkQueue, so ops run in issue order. World size 1 never touches gloo
// (gloo cannot send to itself): collectives are local copies and self-sends go to a mailbox.
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/dist/comm.h"
#include "runtime/dist/failure_report.h"
#include "runtime/dist/op_id.h"
#include "runtime/dist/work_queue.h"

namespace gloo {
class Context;
}

namespace trainer::dist {

class GlooComm : public Comm {
 public:
  // Connects to all `size` members (blocking); throws CommError naming ranks that never came.
  GlooComm(std::shared_ptr<Store> store, int rank, int size, const CommOptions& opts);
  ~GlooComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return opts_.name; }
  int global_rank(int group_rank) const override;

  void all_reduce(void* data, size_t count, CommDType t, ReduceOp op) override;
  std::shared_ptr<Work> all_reduce_async(void* data, size_t count, CommDType t,
                                         ReduceOp op) override;
  void reduce_scatter(const void* in, void* out, size_t count, CommDType t, ReduceOp op) override;
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, CommDType t,
                                             ReduceOp op) override;
  void all_gather(const void* in, void* out, size_t count, CommDType t) override;
  std::shared_ptr<Work> all_gather_async(const void* in, void* out, size_t count,
                                         CommDType t) override;
  void broadcast(void* data, size_t count, CommDType t, int root) override;
  std::shared_ptr<Work> broadcast_async(void* data, size_t count, CommDType t, int root) override;
  std::shared_ptr<Work> reduce_async(void* data, size_t count, CommDType t, ReduceOp op,
                                     int root) override;
  void all_to_all(const void* in, void* out, size_t count, CommDType t) override;
  void send(const void* data, size_t bytes, int peer, int tag) override;
  void recv(void* data, size_t bytes, int peer, int tag) override;
  void send_recv_batch(const std::vector<P2pTransfer>& transfers) override;
  void barrier() override;

 private:
  // Queues `body` as collective `op`; its failures come out of Work::wait() as CommError.
  std::shared_ptr<Work> submit(const char* op, std::function<void()> body);
  // The same for a point-to-point op with `peers` (group ranks, op_id.h).
  std::shared_ptr<Work> submit_transfer(const char* op, std::vector<int> peers,
                                        std::function<void()> body);
  // Runs `body` as op `id` on the worker thread.
  void run(const char* op, OpId id, const std::function<void()>& body);
  FailureScope failure_scope();
  std::string who_failed_to_connect(const std::string& cause);
  [[noreturn]] void fail(const char* op, const OpId& id, const std::string& cause, bool timed_out);
  void connect();
  std::chrono::milliseconds timeout() const;

  void do_all_reduce(void* data, size_t count, CommDType t, ReduceOp op);
  void do_reduce_scatter(const void* in, void* out, size_t count, CommDType t, ReduceOp op);
  void do_all_gather(const void* in, void* out, size_t count, CommDType t);
  void do_broadcast(void* data, size_t count, CommDType t, int root);
  void do_reduce(void* data, size_t count, CommDType t, ReduceOp op, int root);
  void do_all_to_all(const void* in, void* out, size_t count, CommDType t);
  void do_send(const void* data, size_t bytes, int peer, int tag);
  void do_recv(void* data, size_t bytes, int peer, int tag);
  void do_send_recv_batch(const std::vector<P2pTransfer>& transfers);
  void do_barrier();

  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> root_store_;
  int rank_;
  int size_;
  CommOptions opts_;
  std::shared_ptr<gloo::Context> ctx_;  // null for size 1, and once a failed op released the peers
  std::map<int, std::deque<std::vector<uint8_t>>> self_mailbox_;  // tag -> messages to self
  OpCounter ops_;                                                 // worker thread only
  // The peer a transfer waits on now (-1: none): a stalled transfer of a batch is blamed on the
  // peer it waits for, not on every peer of the batch. Worker thread only.
  int waiting_on_ = -1;
  std::unique_ptr<WorkQueue> queue_;  // last: joined before the context goes away
};

}  // namespace trainer::dist
