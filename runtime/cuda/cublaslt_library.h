#pragma once
// cuBLASLt's entry points, loaded from libcublasLt.so.<major> when the cuda backend is created
// (its LtGemm is the first user) instead of linked into the binary: linking it alone costs every
// process, cpu runs and tests included, ~0.1 s and ~200 MB of resident memory at start-up (its
// initialisers run whether or not a GEMM ever does).
#include <cublasLt.h>

namespace trainer::cuda {

struct CublasLtLibrary {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
};

// "libcublasLt.so.<major>" of the headers this binary was built with.
const char* cublaslt_file_name();

// The library, loaded on the first call (the dynamic loader's search path, then the directory of
// the libcudart in use); throws naming the file and the loader's error when it cannot be loaded.
const CublasLtLibrary& cublaslt();

}  // namespace trainer::cuda
