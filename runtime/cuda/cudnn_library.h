#pragma once
// cuDNN's entry points (its backend graph API, for the fused attention of cudnn_attention.h),
// loaded from libcudnn.so.<major> when a cuda backend asks for cuDNN attention
// (TRAINER_ATTENTION=cudnn), never linked: a build or a run without cuDNN is unaffected.
#include <cudnn.h>

namespace trainer::cuda {

struct CudnnLibrary {
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnGetLastErrorString) last_error_string;
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor;
  decltype(&cudnnBackendSetAttribute) set_attribute;
  decltype(&cudnnBackendGetAttribute) get_attribute;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
};

// "libcudnn.so.<major>" of the headers this binary was built with.
const char* cudnn_file_name();

// The library, loaded on the first call (the dynamic loader's search path, then the directory of
// the libcudart in use); throws naming the file and the loader's error when it cannot be loaded.
const CudnnLibrary& cudnn();

}  // namespace trainer::cuda
