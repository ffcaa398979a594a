#pragma once
// The communicators of a run, by backend: Gloo over TCP for every group, except that on the cuda
// backend the data-parallel group (gradient buckets and parameter broadcasts on device memory),
// the tensor-parallel group (activations), the pipeline group (the stages' activations and
// gradients), under context parallelism the cp and dp x cp groups and under expert parallelism
// the ep and edp groups are NCCL, ordered after the
// backend's compute stream. The world group stays on Gloo: it carries host values only (step times,
// stop flags, checkpoint commits).
#include <memory>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/dist/mesh.h"
#include "runtime/dist/store.h"

namespace trainer::train {

// Whether make_comm_factory gives the group named `group` (an axis name) of `size` ranks NCCL on
// the cuda backend (device memory), rather than Gloo (host memory only). A group of one rank is
// always Gloo: the code above the backend must not hand it device memory (it has nothing to
// exchange).
bool nccl_group_on_cuda(const std::string& group, int size, bool context_parallel,
                        bool expert_parallel);

// context_parallel: the cp and dp x cp groups (activations, gradients) are NCCL on cuda too;
// expert_parallel: the ep and edp groups (tokens to the experts, the experts' gradients).
dist::CommFactory make_comm_factory(std::shared_ptr<dist::Store> store, Backend& backend,
                                    bool context_parallel = false, bool expert_parallel = false);

// "nccl" when make_comm_factory gives this backend's dp, tp and pp groups NCCL, else "gloo".
const char* dp_transport(const Backend& backend);

}  // namespace trainer::train
