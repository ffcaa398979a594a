#pragma once
// DeviceStagingComm: a Comm for tests that run several data-parallel ranks as threads on one GPU
// (NCCL refuses two ranks of a communicator on the same device). Each op copies its device
// buffers to host memory once the rank's compute stream has finished writing them, runs the
// inner (Gloo) communicator there, and copies the results back; host buffers (the scalars of
// all_reduce_scalar) pass straight through. Asynchronous ops complete before they return.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dist/comm.h"

namespace trainer::cuda::test {

class DeviceStagingComm : public dist::Comm {
 public:
  DeviceStagingComm(std::unique_ptr<dist::Comm> inner, cudaStream_t stream)
      : inner_(std::move(inner)), stream_(stream) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  int global_rank(int r) const override { return inner_->global_rank(r); }

  void all_reduce(void* d, size_t n, dist::CommDType t, dist::ReduceOp op) override {
    Staged buf(*this, d, n * dist::comm_dtype_size(t));
    inner_->all_reduce(buf.host(), n, t, op);
    buf.write_back();
  }
  std::shared_ptr<dist::Work> all_reduce_async(void* d, size_t n, dist::CommDType t,
                                               dist::ReduceOp op) override {
    all_reduce(d, n, t, op);
    return done();
  }
  void reduce_scatter(const void* i, void* o, size_t n, dist::CommDType t,
                      dist::ReduceOp op) override {
    const size_t bytes = n * dist::comm_dtype_size(t);
    Staged in(*this, const_cast<void*>(i), bytes * static_cast<size_t>(size()));
    Staged out(*this, o, bytes);
    inner_->reduce_scatter(in.host(), out.host(), n, t, op);
    out.write_back();
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const void* i, void* o, size_t n,
                                                   dist::CommDType t, dist::ReduceOp op) override {
    reduce_scatter(i, o, n, t, op);
    return done();
  }
  void all_gather(const void* i, void* o, size_t n, dist::CommDType t) override {
    const size_t bytes = n * dist::comm_dtype_size(t);
    Staged in(*this, const_cast<void*>(i), bytes);
    Staged out(*this, o, bytes * static_cast<size_t>(size()));
    inner_->all_gather(in.host(), out.host(), n, t);
    out.write_back();
  }
  std::shared_ptr<dist::Work> all_gather_async(const void* i, void* o, size_t n,
                                               dist::CommDType t) override {
    all_gather(i, o, n, t);
    return done();
  }
  void broadcast(void* d, size_t n, dist::CommDType t, int root) override {
    Staged buf(*this, d, n * dist::comm_dtype_size(t));
    inner_->broadcast(buf.host(), n, t, root);
    buf.write_back();
  }
  std::shared_ptr<dist::Work> broadcast_async(void* d, size_t n, dist::CommDType t,
                                              int root) override {
    broadcast(d, n, t, root);
    return done();
  }
  std::shared_ptr<dist::Work> reduce_async(void* d, size_t n, dist::CommDType t, dist::ReduceOp op,
                                           int root) override {
    Staged buf(*this, d, n * dist::comm_dtype_size(t));
    inner_->reduce_async(buf.host(), n, t, op, root)->wait();
    buf.write_back();
    return done();
  }
  void all_to_all(const void* i, void* o, size_t n, dist::CommDType t) override {
    const size_t bytes = n * dist::comm_dtype_size(t) * static_cast<size_t>(size());
    Staged in(*this, const_cast<void*>(i), bytes);
    Staged out(*this, o, bytes);
    inner_->all_to_all(in.host(), out.host(), n, t);
    out.write_back();
  }
  void send(const void* d, size_t bytes, int peer, int tag) override {
    Staged buf(*this, const_cast<void*>(d), bytes);
    inner_->send(buf.host(), bytes, peer, tag);
  }
  void recv(void* d, size_t bytes, int peer, int tag) override {
    Staged buf(*this, d, bytes);
    inner_->recv(buf.host(), bytes, peer, tag);
    buf.write_back();
  }
  void send_recv_batch(const std::vector<dist::P2pTransfer>& transfers) override {
    std::vector<std::unique_ptr<Staged>> staged;
    std::vector<dist::P2pTransfer> host = transfers;
    for (dist::P2pTransfer& t : host) {
      staged.push_back(std::make_unique<Staged>(*this, t.data, t.bytes));
      t.data = staged.back()->host();
    }
    inner_->send_recv_batch(host);
    for (size_t i = 0; i < host.size(); ++i)
      if (!host[i].send && host[i].bytes > 0) staged[i]->write_back();
  }
  void barrier() override { inner_->barrier(); }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("DeviceStagingComm: ") + what + ": " +
                               cudaGetErrorString(e));
  }
  // A host view of `bytes` at p: p itself for host memory; for device memory a copy made after
  // the compute stream's work, which write_back() copies back on that stream (a plain
  // cudaMemcpy from pageable memory may return before its DMA lands, and the non-blocking
  // compute stream would not wait for it).
  class Staged {
   public:
    Staged(DeviceStagingComm& c, void* p, size_t bytes) : p_(p), bytes_(bytes), stream_(c.stream_) {
      if (bytes == 0) return;
      cudaPointerAttributes a{};
      check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
      if (a.type != cudaMemoryTypeDevice) return;
      device_ = true;
      host_.resize(bytes);
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      check(cudaMemcpy(host_.data(), p, bytes, cudaMemcpyDeviceToHost), "copy to host");
    }
    void write_back() {
      if (!device_) return;
      check(cudaMemcpyAsync(p_, host_.data(), bytes_, cudaMemcpyHostToDevice, stream_),
            "copy to device");
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // host_ may go after this
    }
    void* host() { return device_ ? host_.data() : p_; }

   private:
    void* p_;
    size_t bytes_;
    cudaStream_t stream_;
    bool device_ = false;
    std::vector<unsigned char> host_;
  };
  struct DoneWork : dist::Work {
    void wait() override {}
    bool done() override { return true; }
  };
  static std::shared_ptr<dist::Work> done() { return std::make_shared<DoneWork>(); }

  std::unique_ptr<dist::Comm> inner_;
  cudaStream_t stream_;
};

}  // namespace trainer::cuda::test
