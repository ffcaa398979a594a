// NcclComm (see nccl_comm.h). Compiled by nvcc into trainer_cuda only (a .cu file, so the
// trainer_dist glob of runtime/dist/*.cpp does not pick it up on machines without CUDA).
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/dist/exit_deadline.h"
#include "runtime/dist/failure_report.h"
#include "runtime/dist/in_flight_ops.h"
#include "runtime/dist/nccl_comm.h"
#include "runtime/dist/prefix_store.h"

namespace trainer::dist {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(CommDType t) {
  switch (t) {
    case CommDType::f32:
      return ncclFloat32;
    case CommDType::f64:
      return ncclFloat64;
    case CommDType::i32:
      return ncclInt32;
    case CommDType::i64:
      return ncclInt64;
    case CommDType::u8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

class NcclComm;

// An op's completion event, shared by its Work and the communicator's in-flight list.
using SharedEvent = std::shared_ptr<CUevent_st>;
SharedEvent make_shared_event(cudaEvent_t e) {
  return SharedEvent(e, [](cudaEvent_t p) { cudaEventDestroy(p); });
}

// The communicator's asynchronous state (ncclInProgress while a nonblocking call runs), or the
// query's own error when it fails: a failed query must not read as "still in progress".
ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
  return query != ncclSuccess ? query : state;
}

// Whether the work before `event` finished. A not-ready query is cleared from the runtime's last
// error (as PyTorch does), so that the next launch check cannot report it as a failure; any
// other error surfaces at the caller's cudaEventSynchronize.
bool event_done(cudaEvent_t event) {
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

class NcclWork : public Work {
 public:
  NcclWork(NcclComm* comm, SharedEvent done, std::string what, OpId op)
      : comm_(comm), done_(std::move(done)), what_(std::move(what)), op_(std::move(op)) {}
  void wait() override;
  bool done() override { return event_done(done_.get()); }

 private:
  NcclComm* comm_;
  SharedEvent done_;
  std::string what_;
  OpId op_;
};

class NcclComm : public Comm {
 public:
  NcclComm(std::shared_ptr<Store> store, int rank, int size, const CommOptions& opts,
           cudaStream_t compute)
      : rank_(rank),
        size_(size),
        opts_(opts),
        compute_(compute),
        store_(std::move(store)),
        root_store_(root_store(store_)) {
    try {
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaMalloc(&staging_, kStagingBytes));
      init();
    } catch (...) {
      // No destructor runs for a constructor that throws: release what init left behind (a
      // failed init already aborted its communicator; a lost store leaves none).
      if (comm_) ncclCommAbort(comm_);
      if (staging_) cudaFree(staging_);
      if (stream_) cudaStreamDestroy(stream_);
      throw;
    }
  }
  ~NcclComm() override {
    const bool unwinding = aborted_ || std::uncaught_exceptions() > 0;
    if (unwinding) arm_teardown_deadline("unwinding after an error");
    if (comm_) {
      // Unwinding from an error: abort (peers stuck in a collective with us are freed too)
      // rather than wait up to the timeout for a finalize that may never complete.
      if (!unwinding && finalized())
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    // After an error another communicator's kernel may still spin on a dead peer, and cudaFree
    // waits for every kernel on the device: the process is ending, the 64 KiB can stay.
    if (!unwinding) cudaFree(staging_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return opts_.name; }
  int global_rank(int i) const override {
    return opts_.global_ranks.empty() ? i : opts_.global_ranks.at(static_cast<size_t>(i));
  }

  void all_reduce(void* data, size_t count, CommDType t, ReduceOp op) override {
    if (staged(data, count * comm_dtype_size(t), [&](void* d) { all_reduce(d, count, t, op); }))
      return;  // a host scalar (all_reduce_scalar)
    all_reduce_async(data, count, t, op)->wait();
  }
  std::shared_ptr<Work> all_reduce_async(void* data, size_t count, CommDType t,
                                         ReduceOp op) override {
    return enqueue("all_reduce", [&] {
      return ncclAllReduce(data, data, count, nccl_type(t), nccl_op(op), comm_, stream_);
    });
  }
  void reduce_scatter(const void* in, void* out, size_t count, CommDType t, ReduceOp op) override {
    reduce_scatter_async(in, out, count, t, op)->wait();
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, CommDType t,
                                             ReduceOp op) override {
    return enqueue("reduce_scatter", [&] {
      return ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), comm_, stream_);
    });
  }
  void all_gather(const void* in, void* out, size_t count, CommDType t) override {
    all_gather_async(in, out, count, t)->wait();
  }
  std::shared_ptr<Work> all_gather_async(const void* in, void* out, size_t count,
                                         CommDType t) override {
    return enqueue("all_gather",
                   [&] { return ncclAllGather(in, out, count, nccl_type(t), comm_, stream_); });
  }
  void broadcast(void* data, size_t count, CommDType t, int root) override {
    if (staged(data, count * comm_dtype_size(t), [&](void* d) { broadcast(d, count, t, root); }))
      return;  // a host value (a step count)
    broadcast_async(data, count, t, root)->wait();
  }
  std::shared_ptr<Work> broadcast_async(void* data, size_t count, CommDType t, int root) override {
    return enqueue("broadcast", [&] {
      return ncclBroadcast(data, data, count, nccl_type(t), root, comm_, stream_);
    });
  }
  std::shared_ptr<Work> reduce_async(void* data, size_t count, CommDType t, ReduceOp op,
                                     int root) override {
    return enqueue("reduce", [&] {
      return ncclReduce(data, data, count, nccl_type(t), nccl_op(op), root, comm_, stream_);
    });
  }
  void all_to_all(const void* in, void* out, size_t count, CommDType t) override {
    const size_t chunk = count * comm_dtype_size(t);
    enqueue("all_to_all", [&] {
      ncclResult_t r = ncclGroupStart();
      for (int p = 0; p < size_ && (r == ncclSuccess || r == ncclInProgress); ++p) {
        r = ncclSend(static_cast<const char*>(in) + p * chunk, count, nccl_type(t), p, comm_,
                     stream_);
        if (r == ncclSuccess || r == ncclInProgress)
          r = ncclRecv(static_cast<char*>(out) + p * chunk, count, nccl_type(t), p, comm_, stream_);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r == ncclSuccess || r == ncclInProgress ? end : r;
    })->wait();
  }
  void send(const void* data, size_t bytes, int peer, int tag) override {
    enqueue_transfer("send", {{true, const_cast<void*>(data), bytes, peer, tag}}, [&] {
      return ncclSend(data, bytes, ncclUint8, peer, comm_, stream_);
    })->wait();
  }
  void recv(void* data, size_t bytes, int peer, int tag) override {
    enqueue_transfer("recv", {{false, data, bytes, peer, tag}}, [&] {
      return ncclRecv(data, bytes, ncclUint8, peer, comm_, stream_);
    })->wait();
  }
  // (NCCL has no tags: its sends and receives between two ranks match in the order posted, and
  // a stage's exchanges post them in the same order on both sides)
  void send_recv_batch(const std::vector<P2pTransfer>& transfers) override {
    enqueue_transfer("send_recv", transfers,
                     [&] {  // one group: NCCL runs them all at once
                       ncclResult_t r = ncclGroupStart();
                       // (as all_to_all)
                       auto ok = [&] { return r == ncclSuccess || r == ncclInProgress; };
                       for (const P2pTransfer& t : transfers) {
                         if (!ok() || t.bytes == 0) continue;
                         r = t.send ? ncclSend(t.data, t.bytes, ncclUint8, t.peer, comm_, stream_)
                                    : ncclRecv(t.data, t.bytes, ncclUint8, t.peer, comm_, stream_);
                       }
                       const ncclResult_t end = ncclGroupEnd();
                       return ok() ? end : r;
                     })
        ->wait();
  }
  void barrier() override {
    enqueue("barrier", [&] {
      return ncclAllReduce(staging_, staging_, 1, ncclInt32, ncclSum, comm_, stream_);
    })->wait();
  }

  // Polls until `ready()` or the timeout; on timeout or an NCCL async error, names the rank
  // that failed (in `op`; kInitOp while connecting), aborts and throws.
  // The first 200 us it yields between looks (a tensor-parallel all-reduce takes tens of us: a
  // 50 us sleep would add up to that to each), then sleeps 50 us (a long wait costs no core).
  template <class Ready>
  void watch(const std::string& what, const OpId& op, Ready ready) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(opts_.timeout_s);
    const auto spin_until = start + std::chrono::microseconds(200);
    for (;;) {
      const ncclResult_t async = comm_ ? async_state(comm_) : ncclSuccess;
      if (async != ncclSuccess && async != ncclInProgress)
        fail_naming(what, op,
                    std::string(ncclGetErrorString(async)) + " (" + ncclGetLastError(comm_) + ")");
      if (ready()) return;
      if (Clock::now() > deadline)
        fail_naming(what, op, "timed out after " + seconds_text(opts_.timeout_s));
      if (Clock::now() < spin_until)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  static constexpr size_t kStagingBytes = 1 << 16;
  // For host `data`: runs `op` in place on a device copy and copies the result back, returning
  // true; false (nothing done) for device memory.
  template <class Op>
  bool staged(void* data, size_t bytes, Op op) {
    if (is_device_pointer(data)) return false;
    if (bytes > kStagingBytes)
      throw CommError("nccl group '" + opts_.name + "': host buffer of " + std::to_string(bytes) +
                      " bytes is too large to stage; use device memory");
    // On the communicator's stream, so the collective after it reads the landed bytes: a plain
    // cudaMemcpy from pageable memory may return before its DMA is done, and nothing would
    // order the non-blocking stream after it.
    CUDA_CHECK(cudaMemcpyAsync(staging_, data, bytes, cudaMemcpyHostToDevice, stream_));
    op(staging_);  // waits for the collective
    CUDA_CHECK(cudaMemcpy(data, staging_, bytes, cudaMemcpyDeviceToHost));
    return true;
  }

  // A non-blocking communicator is finalized (its outstanding operations flushed) before it is
  // destroyed; false when that fails or outlasts the timeout (the caller then aborts it).
  bool finalized() noexcept {
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return false;
    const auto deadline = Clock::now() + std::chrono::duration<double>(opts_.timeout_s);
    for (;;) {
      const ncclResult_t state = async_state(comm_);
      if (state != ncclInProgress) return state == ncclSuccess;
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // A failed or timed-out op: who failed, before the abort (the live members are stuck in the same
  // op and time out about when we do). NCCL's errors name no peer, so a remote error is treated as
  // a timeout: the members that do not reach the op within a grace, or the ranks that reported
  // dying, are named. During init, the ranks that never published their arrival.
  [[noreturn]] void fail_naming(const std::string& what, const OpId& op, const std::string& cause) {
    if (!op.p2p && op.seq == kInitOp) fail(what + ": " + cause + missing_at_init());
    const OpId stuck = in_flight_.oldest_unfinished(op);
    const FailureScope scope{
        store_.get(),   root_store_.get(), rank_, size_, [this](int j) { return global_rank(j); },
        opts_.timeout_s};
    const std::string who = name_failed_ranks(scope, stuck, cause, /*timed_out=*/true);
    fail(what + " (" + stuck.label() + "): " + cause + (who.empty() ? "" : "; " + who));
  }

  // After a failure, the process ends by exit_deadline.h's deadline if tearing down hangs: the
  // naming may wait on the store (timeout_s), then the lead's store lingers (at most 30 s).
  void arm_teardown_deadline(const std::string& why) const {
    arm_exit_deadline(
        opts_.timeout_s + 120, 1,
        "nccl group '" + opts_.name + "' (rank " + std::to_string(rank_) + "): " + why);
  }

  [[noreturn]] void fail(const std::string& msg) {
    arm_teardown_deadline(msg);
    if (comm_ && !aborted_) {
      // Ends this rank's kernels on the communicator; the peers' fail on the closed connections
      // or time out in their own watch.
      ncclCommAbort(comm_);
      aborted_ = true;
      comm_ = nullptr;
    }
    const std::string text = "nccl group '" + opts_.name + "' (rank " + std::to_string(rank_) +
                             " of " + std::to_string(size_) + ", global rank " +
                             std::to_string(global_rank(rank_)) + "): " + msg;
    if (first_failure_.empty()) first_failure_ = text;
    throw CommError(text);
  }

  static constexpr uint64_t kInitOp = ~uint64_t{0};

  void init() {
    Store& store = *store_;
    ncclUniqueId id{};
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) fail(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
      store.set("nccl_id", std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      const std::vector<uint8_t> bytes = store.get("nccl_id");
      if (bytes.size() != sizeof(id.internal)) fail("bad nccl_id in the store");
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    store.set("nccl_arrived/" + std::to_string(rank_), {1});
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      fail(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
    watch("init", OpId::collective(kInitOp), [&] { return async_state(comm_) == ncclSuccess; });
  }

  // " (never arrived: ranks 2, 3)" from the arrival keys of init.
  std::string missing_at_init() {
    std::ostringstream os;
    int missing = 0;
    try {
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back("nccl_arrived/" + std::to_string(r));
      const std::vector<bool> arrived = store_->which_exist(keys);  // one request
      for (int r = 0; r < size_; ++r)
        if (!arrived[static_cast<size_t>(r)]) os << (missing++ ? ", " : "") << global_rank(r);
    } catch (const std::exception&) {
      return "";
    }
    return missing ? " (never arrived: global ranks " + os.str() + ")" : "";
  }

  // A collective: every member issues the same ones in the same order (op_id.h).
  template <class Launch>
  std::shared_ptr<Work> enqueue(const char* what, Launch launch) {
    return enqueue_op(what, ops_.next_collective(), launch);
  }
  // A point-to-point op with `transfers`' peers.
  template <class Launch>
  std::shared_ptr<Work> enqueue_transfer(const char* what,
                                         const std::vector<P2pTransfer>& transfers, Launch launch) {
    return enqueue_op(what, ops_.next_transfer(transfer_peers(transfers, rank_)), launch);
  }
  template <class Launch>
  std::shared_ptr<Work> enqueue_op(const char* what, const OpId& op, Launch launch) {
    // An op after the failure (one whose error a destructor swallowed) repeats its reason.
    if (!comm_) fail(std::string(what) + " on an aborted communicator, after: " + first_failure_);
    cudaEvent_t ready = nullptr, done = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, compute_));  // after the work that produced the inputs
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));
    const ncclResult_t r = launch();
    if (r != ncclSuccess && r != ncclInProgress)
      fail(std::string(what) + ": " + ncclGetErrorString(r));
    watch(std::string(what) + " (enqueue)", op,
          [&] { return async_state(comm_) != ncclInProgress; });
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SharedEvent shared = make_shared_event(done);
    CUDA_CHECK(cudaEventRecord(done, stream_));
    in_flight_.add(op, [shared] { return event_done(shared.get()); });
    return std::make_shared<NcclWork>(this, std::move(shared), what, op);
  }

  friend class NcclWork;
  int rank_, size_;
  CommOptions opts_;
  cudaStream_t compute_, stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::string first_failure_;  // the message of the failure that aborted the communicator
  void* staging_ = nullptr;
  std::shared_ptr<Store> store_;       // this group's (prefixed): ids, arrival marks
  std::shared_ptr<Store> root_store_;  // "failed/<rank>" reports, chains of waits
  OpCounter ops_;
  InFlightOps in_flight_;
};

void NcclWork::wait() {
  comm_->watch(what_, op_, [&] { return event_done(done_.get()); });
  CUDA_CHECK(cudaEventSynchronize(done_.get()));  // surfaces a kernel error, if any
  CUDA_CHECK(cudaStreamWaitEvent(comm_->compute_, done_.get(), 0));
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(std::shared_ptr<Store> store, int rank, int size,
                                     const CommOptions& opts, cudaStream_t compute_stream) {
  return std::make_unique<NcclComm>(std::move(store), rank, size, opts, compute_stream);
}

}  // namespace trainer::dist
