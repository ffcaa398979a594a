#include "runtime/cuda/cudnn_graph.h"

#include <utility>

#include "runtime/cuda/cudnn_library.h"

namespace trainer::cuda::cudnn_graph {

void check(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const CudnnLibrary& l = cudnn();
  char last[1024] = {};
  l.last_error_string(last, sizeof last);
  throw CudnnError("cuDNN: " + what + ": " + l.error_string(status) +
                   (last[0] ? std::string(" (") + last + ")" : std::string()));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check(cudnn().create_descriptor(type, &d_),
        "cudnnBackendCreateDescriptor(" + std::to_string(static_cast<int>(type)) + ")");
}

Descriptor::~Descriptor() {
  if (d_) cudnn().destroy_descriptor(d_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* values) {
  check(cudnn().set_attribute(d_, name, type, count, values),
        "cudnnBackendSetAttribute(attribute " + std::to_string(static_cast<int>(name)) + ")");
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& value) {
  const cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Descriptor& Descriptor::set_bool(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::finalize(const std::string& what) {
  check(cudnn().finalize(d_), "finalize " + what);
  return *this;
}

std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

Descriptor tensor(const TensorSpec& spec) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, spec.type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, spec.strides)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t{16});
  if (spec.is_virtual) t.set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
  if (spec.by_value) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  return std::move(t.finalize("tensor " + std::to_string(spec.uid)));
}

Descriptor pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                     const Descriptor& y, const Descriptor* t, int64_t axis, cudnnDataType_t math) {
  const std::string what = "pointwise mode " + std::to_string(static_cast<int>(mode));
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, math);
  if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize(what);
  const float one = 1.0f;
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  return std::move(op.finalize(what + " operation"));
}

Descriptor matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c,
                  cudnnDataType_t math) {
  Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const double padding = 0.0;  // (cuDNN's own frontend always sets it)
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, math)
      .set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &padding)
      .finalize("matmul");
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  return std::move(op.finalize("matmul operation"));
}

Descriptor reduction(cudnnReduceTensorOp_t reduce, const Descriptor& x, const Descriptor& y,
                     cudnnDataType_t math) {
  const std::string what = "reduction " + std::to_string(static_cast<int>(reduce));
  Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, math);
#if CUDNN_VERSION >= 91100  // (the attribute is new in 9.11's headers)
  if (cudnn().get_version() >= 91100) r.set_bool(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, false);
#endif
  r.finalize(what);
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
      .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  return std::move(op.finalize(what + " operation"));
}

Descriptor reshape(const Descriptor& x, const Descriptor& y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  return std::move(op.finalize("reshape operation"));
}

namespace {

// The engine configurations cuDNN's heuristics rank for `graph` in `mode`, best first.
std::vector<Descriptor> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode,
                                       const std::string& what) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize(what + ": engine heuristics");
  int64_t count = 0;
  check(cudnn().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        what + ": the number of engine configurations");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (count > 0)
    check(cudnn().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()),
          what + ": the engine configurations");
  while (static_cast<int64_t>(configs.size()) > returned) configs.pop_back();
  return configs;
}

}  // namespace

Plan make_plan(cudnnHandle_t handle, const std::vector<const Descriptor*>& ops,
               const std::string& what) {
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Descriptor* op : ops) raw.push_back(op->get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<int64_t>(raw.size()), raw.data())
      .finalize(what + ": operation graph");
  std::string refusals;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    try {
      configs = engine_configs(graph, mode, what);
    } catch (const CudnnError& e) {
      refusals += std::string("; ") + e.what();
      continue;
    }
    for (Descriptor& config : configs) {
      try {
        Plan p;
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config)
            .finalize(what + ": execution plan");
        int64_t returned = 0;
        check(cudnn().get_attribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &returned, &p.workspace_bytes),
              what + ": the plan's workspace size");
        p.sources.push_back(std::move(graph));
        p.sources.push_back(std::move(config));
        return p;
      } catch (const CudnnError& e) {
        refusals += std::string("; ") + e.what();
      }
    }
    if (configs.empty())
      refusals +=
          "; heuristics mode " + std::to_string(static_cast<int>(mode)) + " offered no engine";
  }
  throw CudnnError("cuDNN: " + what + ": no engine runs this graph" + refusals);
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize("variant pack");
  check(cudnn().execute(handle, plan.plan.get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace trainer::cuda::cudnn_graph
