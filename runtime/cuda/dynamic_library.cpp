#include "runtime/cuda/dynamic_library.h"

#include <cuda_runtime_api.h>

namespace trainer::cuda {
namespace {

// The directory libcudart was loaded from ("" when unknown): the toolkit's libraries sit beside it.
std::string cudart_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), &info) == 0 ||
      info.dli_fname == nullptr)
    return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string last_dl_error() {
  const char* error = dlerror();
  return error ? error : "not found";
}

}  // namespace

void* open_cuda_library(const char* file, const char* what, const char* hint) {
  if (void* lib = dlopen(file, RTLD_NOW | RTLD_LOCAL)) return lib;
  std::string why = last_dl_error();
  const std::string dir = cudart_directory();
  if (!dir.empty()) {
    if (void* lib = dlopen((dir + file).c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    why += "; beside libcudart: " + last_dl_error();
  }
  throw std::runtime_error(std::string("cuda backend: cannot load ") + file + " (" + what +
                           "): " + why + "; " + hint);
}

}  // namespace trainer::cuda
