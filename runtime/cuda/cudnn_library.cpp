#include "runtime/cuda/cudnn_library.h"

#include "runtime/cuda/dynamic_library.h"

namespace trainer::cuda {
namespace {

#ifndef CUDNN_MAJOR
#error "cudnn.h did not define CUDNN_MAJOR: cannot name the library to load"
#endif
constexpr const char* kFile = "libcudnn.so." TRAINER_VERSION_STRING(CUDNN_MAJOR);

template <class Fn>
void bind(void* lib, const char* name, Fn& fn) {
  bind_symbol(lib, kFile, name, fn);
}

CudnnLibrary load() {
  // libcudnn.so.9 loads its sub-libraries (graph, engines) by name: their directory must be on
  // the loader's path too, hence the hint.
  void* lib = open_cuda_library(
      kFile, "cuDNN, for TRAINER_ATTENTION=cudnn",
      "add the directory of cuDNN's libraries (the toolkit's lib64, or a Python package's "
      "nvidia/cudnn/lib) to LD_LIBRARY_PATH, or choose another TRAINER_ATTENTION");
  CloseUnlessBound guard{lib};
  CudnnLibrary l{};
  bind(lib, "cudnnGetVersion", l.get_version);
  bind(lib, "cudnnGetErrorString", l.error_string);
  bind(lib, "cudnnGetLastErrorString", l.last_error_string);
  bind(lib, "cudnnCreate", l.create);
  bind(lib, "cudnnDestroy", l.destroy);
  bind(lib, "cudnnSetStream", l.set_stream);
  bind(lib, "cudnnBackendCreateDescriptor", l.create_descriptor);
  bind(lib, "cudnnBackendDestroyDescriptor", l.destroy_descriptor);
  bind(lib, "cudnnBackendSetAttribute", l.set_attribute);
  bind(lib, "cudnnBackendGetAttribute", l.get_attribute);
  bind(lib, "cudnnBackendFinalize", l.finalize);
  bind(lib, "cudnnBackendExecute", l.execute);
  guard.bound = true;
  return l;
}

}  // namespace

const char* cudnn_file_name() {
  return kFile;
}

const CudnnLibrary& cudnn() {
  static const CudnnLibrary library = load();  // a failed load throws, and the next call retries
  return library;
}

}  // namespace trainer::cuda
