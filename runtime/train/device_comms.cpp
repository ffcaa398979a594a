#include "runtime/train/device_comms.h"

#include <string>

#include "runtime/dist/comm.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/dist/nccl_comm.h"
#endif

namespace trainer::train {

bool nccl_group_on_cuda(const std::string& group, int size, bool context_parallel,
                        bool expert_parallel) {
  const auto is = [&](dist::Axis a) { return group == dist::axis_name(a); };
  // (the cp groups only when there is context parallelism: dp x cp is dp's twin otherwise)
  const bool cp_group = context_parallel && (is(dist::Axis::cp) || is(dist::Axis::dp_cp));
  const bool ep_group = expert_parallel && (is(dist::Axis::ep) || is(dist::Axis::edp));
  const bool device_group =
      is(dist::Axis::dp) || is(dist::Axis::tp) || is(dist::Axis::pp) || cp_group || ep_group;
  return device_group && size > 1;
}

dist::CommFactory make_comm_factory(std::shared_ptr<dist::Store> store, Backend& backend,
                                    bool context_parallel, bool expert_parallel) {
  dist::CommFactory gloo = [store](const std::string& prefix, int rank, int size,
                                   const dist::CommOptions& opts) {
    return dist::make_gloo_comm(dist::make_prefix_store(store, prefix), rank, size, opts);
  };
#ifdef TRAINER_HAVE_CUDA
  if (auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend)) {
    cudaStream_t compute = cuda->stream();
    return [store, gloo, compute, context_parallel, expert_parallel](
               const std::string& prefix, int rank, int size,
               const dist::CommOptions& opts) -> std::unique_ptr<dist::Comm> {
      if (nccl_group_on_cuda(opts.name, size, context_parallel, expert_parallel))
        return dist::make_nccl_comm(dist::make_prefix_store(store, prefix), rank, size, opts,
                                    compute);
      return gloo(prefix, rank, size, opts);
    };
  }
#else
  (void)backend;
  (void)context_parallel;
  (void)expert_parallel;
#endif
  return gloo;
}

const char* dp_transport(const Backend& backend) {
  return backend.device() == DeviceType::cuda ? "nccl" : "gloo";
}

}  // namespace trainer::train
