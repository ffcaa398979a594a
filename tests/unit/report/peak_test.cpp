// Peak rates: the GPU table, config override, and a measured cpu sgemm rate.
#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/report/peak.h"

using namespace trainer::report;

TEST_CASE("gpu_names_map_to_dense_bf16_rates", "[peak]") {
  struct Case {
    const char* name;
    double tflops;
  };
  const Case cases[] = {{"NVIDIA H100 80GB HBM3", 989},
                        {"NVIDIA H100 PCIe", 756},
                        {"NVIDIA H200", 989},
                        {"NVIDIA A100-SXM4-80GB", 312},
                        {"NVIDIA L40S", 362},
                        {"NVIDIA A10", 125},
                        {"NVIDIA GeForce RTX 4090", 165},
                        {"h100", 989}};
  for (const Case& c : cases) {
    INFO(c.name);
    const PeakRate p = gpu_peak_tflops(c.name);
    CHECK(p.tflops == c.tflops);
    CHECK(p.source == "table");
  }
  const PeakRate unknown = gpu_peak_tflops("NVIDIA A10G");  // not A10, not in the table
  CHECK(unknown.tflops == 0);
  CHECK(unknown.source == "unknown");
}

TEST_CASE("configured_peak_overrides_measurement_and_table", "[peak]") {
  const PeakRate p = resolve_peak(12.5, "cuda", "NVIDIA H100 80GB HBM3");
  CHECK(p.tflops == 12.5);
  CHECK(p.source == "config");
  CHECK(resolve_peak(0, "cuda", "NVIDIA H100 80GB HBM3").tflops == 989);
}

TEST_CASE("measured_cpu_peak_is_positive_and_finite", "[peak]") {
  const PeakRate p = resolve_peak(0, "cpu", "cpu");
  INFO("measured " << p.tflops << " TFLOP/s");
  CHECK(p.source == "measured-sgemm");
  CHECK(std::isfinite(p.tflops));
  CHECK(p.tflops > 0);
  CHECK(p.tflops < 1000);  // one process on a cpu
}
