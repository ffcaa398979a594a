#pragma once
// NcclComm: dist::Comm on NCCL for device buffers (the cuda backend's). The unique id goes
// through the Store; init is non-blocking and watched: past opts.timeout_s the communicator is
// aborted (ncclCommAbort) and CommError names the group and the ranks that never arrived. An op
// that times out or fails is named the same way as a Gloo one (failure_report.h: the ranks that
// reported dying, else the members that did not reach the oldest op still in flight, and where
// they are stuck) before the abort.
// Ops run on the communicator's own stream after the work already queued on `compute_stream`;
// blocking ops and Work::wait() return once the result is in place. Small host buffers of the
// blocking all_reduce and broadcast (all_reduce_scalar, a step count) are staged through a device
// buffer. send/recv ignore `tag` (NCCL has none:
// pairs must be issued in the same order on both sides). Built only into trainer_cuda.
#include <cuda_runtime_api.h>

#include <memory>

#include "runtime/dist/comm.h"

namespace trainer::dist {

std::unique_ptr<Comm> make_nccl_comm(std::shared_ptr<Store> store, int rank, int size,
                                     const CommOptions& opts, cudaStream_t compute_stream);

}  // namespace trainer::dist
