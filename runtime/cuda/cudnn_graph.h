#pragma once
// A thin owning layer over cuDNN's backend descriptors (entry points from cudnn_library.h): the
// tensors and the pointwise, matmul and reduction operations of an operation graph, the engine
// the heuristics offer for it, and its execution with a variant pack. Every cuDNN call is
// checked: a failure throws CudnnError naming the call, the status and cuDNN's own last message.
#include <cudnn.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::cuda::cudnn_graph {

struct CudnnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws CudnnError unless `status` is CUDNN_STATUS_SUCCESS; `what` names the call.
void check(cudnnStatus_t status, const std::string& what);

class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_bool(cudnnBackendAttributeName_t name, bool value);
  Descriptor& finalize(const std::string& what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A tensor of the graph. Virtual tensors live inside the fused kernel; the others are bound to
// memory by `uid` in the variant pack, by-value ones to a host scalar.
struct TensorSpec {
  int64_t uid = 0;
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = false;
  bool by_value = false;
};
Descriptor tensor(const TensorSpec& spec);
// Row-major strides of `dims` (the last dimension contiguous).
std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims);

// Operations; `math` is the compute type. For the pointwise ones, `b` and `t` may be null (unary
// modes; t only for BINARY_SELECT), `axis` only for GEN_INDEX.
Descriptor pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                     const Descriptor& y, const Descriptor* t = nullptr, int64_t axis = -1,
                     cudnnDataType_t math = CUDNN_DATA_FLOAT);
Descriptor matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c,
                  cudnnDataType_t math = CUDNN_DATA_FLOAT);
Descriptor reduction(cudnnReduceTensorOp_t op, const Descriptor& x, const Descriptor& y,
                     cudnnDataType_t math = CUDNN_DATA_FLOAT);
// y: x's elements with y's dims, strides and type (a transposed view, a cast).
Descriptor reshape(const Descriptor& x, const Descriptor& y);

// An execution plan for an operation graph: the first engine configuration, in the order
// cuDNN's heuristics (mode A, then the fallback list) rank them, that finalizes on this device.
// Throws CudnnError with every refusal's reason when none does.
struct Plan {
  Descriptor plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace_bytes = 0;
  // The operation graph and engine configuration it was made from, kept for its life (as
  // cuDNN's frontend keeps them).
  std::vector<Descriptor> sources;
};
Plan make_plan(cudnnHandle_t handle, const std::vector<const Descriptor*>& ops,
               const std::string& what);

// Runs the plan on the handle's stream with the tensors `uids` bound to `pointers` (device
// memory, or a host scalar for a by-value tensor) and `workspace` (workspace_bytes of device
// memory, or null when 0).
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace);

}  // namespace trainer::cuda::cudnn_graph
