#include "runtime/report/peak.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <vector>

namespace trainer::report {
namespace {

double time_one_sgemm(int n, const std::vector<float>& a, const std::vector<float>& b,
                      std::vector<float>& c) {
  const auto start = std::chrono::steady_clock::now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

// True when `key` occurs in `name` and is not followed by a letter or digit ("a10" must not
// match "a100" or "a10g").
bool contains_model(const std::string& name, const std::string& key) {
  for (size_t pos = name.find(key); pos != std::string::npos; pos = name.find(key, pos + 1)) {
    const size_t end = pos + key.size();
    if (end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]))) return true;
  }
  return false;
}

struct GpuRate {
  const char* key;  // lowercase; more specific names first
  double tflops;
};

constexpr GpuRate kDenseBf16[] = {
    {"h100 pcie", 756}, {"h100", 989}, {"h200", 989},     {"a100", 312},
    {"l40s", 362},      {"a10", 125},  {"rtx 4090", 165}, {"4090", 165},
};

}  // namespace

double measure_cpu_peak_tflops(double budget_s) {
  const int n = 1024;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  time_one_sgemm(n, a, b, c);  // warm-up: thread pool start, page faults
  double best_s = 1e30, spent_s = 0;
  for (int i = 0; i < 3 || spent_s < budget_s; ++i) {
    const double t = time_one_sgemm(n, a, b, c);
    best_s = std::min(best_s, t);
    spent_s += t;
    if (i >= 50) break;
  }
  return 2.0 * n * n * n / best_s / 1e12;
}

PeakRate gpu_peak_tflops(const std::string& device_name) {
  const std::string name = lowercase(device_name);
  for (const GpuRate& rate : kDenseBf16)
    if (contains_model(name, rate.key)) return {rate.tflops, "table"};
  return {0, "unknown"};
}

PeakRate resolve_peak(double configured_tflops, const std::string& device_type,
                      const std::string& device_name) {
  if (configured_tflops > 0) return {configured_tflops, "config"};
  if (device_type == "cpu") return {measure_cpu_peak_tflops(), "measured-sgemm"};
  return gpu_peak_tflops(device_name);
}

}  // namespace trainer::report
