#pragma once
// The peak TFLOP/s per device that MFU divides by, and where the figure came from.
#include <string>

namespace trainer::report {

struct PeakRate {
  double tflops = 0;               // per device; 0 when unknown
  std::string source = "unknown";  // config | measured-sgemm | table | unknown
};

// Times a few 1024^3 cblas_sgemm calls after a warm-up (about 0.3 s) and returns the TFLOP/s
// this process achieved. Ranks sharing a host measure concurrently, so each sees its share.
double measure_cpu_peak_tflops(double budget_s = 0.3);

// Dense bf16 TFLOP/s of a GPU, matched case-insensitively on its name ("NVIDIA H100 80GB HBM3",
// "h200", "A100-SXM4-80GB"). Unknown names give {0, "unknown"}; known ones have source "table".
PeakRate gpu_peak_tflops(const std::string& device_name);

// hardware.peak_tflops > 0 wins (source "config"); otherwise cpu measures, cuda looks up the table.
PeakRate resolve_peak(double configured_tflops, const std::string& device_type,
                      const std::string& device_name);

}  // namespace trainer::report
