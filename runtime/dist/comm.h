#pragma once
// Comm: one communicator (a group of ranks). Implementations: GlooComm (cpu, TCP), NcclComm
// (cuda). Buffers are device pointers of the backend in use. Each blocking op has an async twin
// returning a Work handle; async ops of one communicator run in issue order on its own thread,
// so communication overlaps compute on the cpu backend too.
//
// Failure: every op honours the communicator's timeout. A peer that died or timed out raises
// CommError whose message names the rank(s) that failed or never arrived.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dist/store.h"

namespace trainer::dist {

enum class ReduceOp { sum, avg, max };
enum class CommDType { f32, f64, i32, i64, u8 };

// One side of a batch of point-to-point transfers (Comm::send_recv_batch).
struct P2pTransfer {
  bool send = true;      // false: a receive
  void* data = nullptr;  // (read only, for a send)
  size_t bytes = 0;
  int peer = 0;
  int tag = 0;
};

struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // rethrows the op's CommError, if any
  virtual bool done() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // e.g. "dp", "tp", "world": used in error messages
  // Global rank of group member i (for error messages naming the failing rank).
  virtual int global_rank(int group_rank) const = 0;

  virtual void all_reduce(void* data, size_t count, CommDType t, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> all_reduce_async(void* data, size_t count, CommDType t,
                                                 ReduceOp op) = 0;
  // in: count*size() elements; out: count elements (this rank's chunk of the reduction).
  virtual void reduce_scatter(const void* in, void* out, size_t count, CommDType t,
                              ReduceOp op) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count,
                                                     CommDType t, ReduceOp op) = 0;
  // in: count elements; out: count*size() elements, rank-major.
  virtual void all_gather(const void* in, void* out, size_t count, CommDType t) = 0;
  virtual std::shared_ptr<Work> all_gather_async(const void* in, void* out, size_t count,
                                                 CommDType t) = 0;
  virtual void broadcast(void* data, size_t count, CommDType t, int root) = 0;
  // (the async ops take backend memory; NCCL's blocking broadcast alone also stages host values)
  virtual std::shared_ptr<Work> broadcast_async(void* data, size_t count, CommDType t,
                                                int root) = 0;
  // The group's reduction of `data` (count elements), in place on `root`; on the other members
  // `data` may hold partial sums afterwards (gloo reduces through it).
  virtual std::shared_ptr<Work> reduce_async(void* data, size_t count, CommDType t, ReduceOp op,
                                             int root) = 0;
  // in/out: count*size() elements; chunk j of `in` goes to rank j, chunk i of `out` came from i.
  virtual void all_to_all(const void* in, void* out, size_t count, CommDType t) = 0;
  virtual void send(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual void recv(void* data, size_t bytes, int peer, int tag) = 0;
  // Sends and receives posted together, then all waited for (a transfer of 0 bytes is skipped):
  // a pipeline stage's exchange with its neighbours (Megatron's batched isend/irecv). Blocking
  // calls one after the other could deadlock there, each rank's send waiting for the other's
  // receive. Transfers between the same two ranks with the same tag match in the order posted
  // (NCCL has no tags: there all of a pair's match in order; the pipeline schedules keep the
  // two orders the same, tests/unit/parallel/test_pipeline_schedule.cpp).
  virtual void send_recv_batch(const std::vector<P2pTransfer>& transfers) = 0;
  // One send to `send_peer` and one receive from `recv_peer`, as a batch.
  void send_recv(const void* send_data, size_t send_bytes, int send_peer, void* recv_data,
                 size_t recv_bytes, int recv_peer, int tag) {
    send_recv_batch({{true, const_cast<void*>(send_data), send_bytes, send_peer, tag},
                     {false, recv_data, recv_bytes, recv_peer, tag}});
  }
  virtual void barrier() = 0;

  // Convenience for scalars of statistics (loss, grad norm) in fp64.
  double all_reduce_scalar(double v, ReduceOp op) {
    all_reduce(&v, 1, CommDType::f64, op);
    return v;
  }
};

size_t comm_dtype_size(CommDType t);

struct CommOptions {
  std::string name = "world";
  std::vector<int> global_ranks;  // member i's global rank; empty means identity
  double timeout_s = 300;
};

// Records in the (unprefixed) store that `global_rank` is dying of `what`, as key
// "failed/<global_rank>". The runtime calls it in its top-level catch; communicators that fail
// afterwards name this rank and its reason. Never throws (the store may be gone too).
void report_failure(Store& store, int global_rank, const std::string& what);

// A Gloo communicator over TCP among `size` ranks, rendezvoused through `store` (callers pass a
// prefix store unique to the group). size 1 works (ops are local copies).
std::unique_ptr<Comm> make_gloo_comm(std::shared_ptr<Store> store, int rank, int size,
                                     const CommOptions& opts);

}  // namespace trainer::dist
