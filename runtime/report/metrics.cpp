#include "runtime/report/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "runtime/core/atomic_file.h"
#include "runtime/report/flops.h"

namespace trainer::report {

StepRates step_rates(int64_t tokens_per_step, double step_time_s, double flops_per_token,
                     double peak_tflops_per_device, int device_count) {
  StepRates r;
  r.tokens_per_second = step_time_s > 0 ? double(tokens_per_step) / step_time_s : 0;
  r.mfu = mfu(flops_per_token, r.tokens_per_second, peak_tflops_per_device, device_count);
  return r;
}

std::string metrics_line(const StepRecord& rec, const StepRates& rates,
                         std::optional<double> val_loss, std::optional<double> loss_mean) {
  nlohmann::ordered_json j;  // NaN/inf values are written as null
  j["step"] = rec.step;
  j["tokens"] = rec.tokens;
  j["loss"] = rec.loss;
  j["grad_norm"] = rec.grad_norm;
  j["lr"] = rec.lr;
  j["step_time_s"] = rec.step_time_s;
  j["tokens_per_second"] = rates.tokens_per_second;
  j["mfu"] = rates.mfu;
  if (loss_mean) j["loss_mean"] = *loss_mean;
  if (rec.moe_aux_loss) j["moe_aux_loss"] = *rec.moe_aux_loss;
  if (rec.moe_dropped_fraction) j["moe_dropped_fraction"] = *rec.moe_dropped_fraction;
  if (val_loss) j["val_loss"] = *val_loss;
  return j.dump();
}

void MetricsWriter::keep_points(const nlohmann::json& j) {
  // A value: its number, NaN for null (non-finite when written), nothing when absent.
  const auto value = [&](const char* key) -> std::optional<double> {
    if (!j.contains(key)) return std::nullopt;
    if (j[key].is_number()) return j[key].get<double>();
    return j[key].is_null() ? std::optional<double>(std::nan("")) : std::nullopt;
  };
  const auto tokens = value("tokens");
  if (!tokens || !std::isfinite(*tokens)) return;
  const auto t = static_cast<int64_t>(*tokens);
  const int64_t step = j["step"].get<int64_t>();
  if (const auto loss = value("loss"))
    earlier_.curve.push_back({step, t, *loss, value("grad_norm").value_or(std::nan(""))});
  if (const auto val = value("val_loss")) earlier_.evals.push_back({step, t, *val});
}

namespace {

// The step of a metrics line at or before `first_step` (a line to keep), else none.
std::optional<nlohmann::json> line_through(const std::string& line, int first_step) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
      j["step"].get<int64_t>() <= first_step)
    return j;
  return std::nullopt;
}

// The first run_id other than `mine` among the lines through `first_step` ("" when none: lines
// without one are an older version's, of unknown run, and stay).
std::string other_run_in(const std::string& path, int first_step, const std::string& mine) {
  std::ifstream in(path);
  for (std::string line; !mine.empty() && std::getline(in, line);) {
    const auto j = line_through(line, first_step);
    if (j && j->contains("run_id") && (*j)["run_id"].is_string() && (*j)["run_id"] != mine)
      return (*j)["run_id"].get<std::string>();
  }
  return "";
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& out_dir, int first_step, std::string run_id)
    : path_((std::filesystem::path(out_dir) / "metrics.jsonl").string()),
      run_id_(std::move(run_id)) {
  std::filesystem::create_directories(out_dir);
  if (first_step > 0) foreign_run_ = other_run_in(path_, first_step, run_id_);
  if (!foreign_run_.empty()) first_step = 0;  // none of its lines are this run's
  // The kept lines stream into a temporary that replaces the file by a rename, so a crash here
  // leaves the old file or the new one (and a million steps' lines are never held in memory).
  AtomicFileWriter kept(path_);
  if (std::ifstream in(path_); in && first_step > 0) {
    std::string chunk;
    for (std::string line; std::getline(in, line);) {
      if (const auto j = line_through(line, first_step)) {
        chunk += line;
        chunk += '\n';
        keep_points(*j);
      }
      if (chunk.size() >= (size_t{1} << 20)) {
        kept.write(chunk.data(), chunk.size());
        chunk.clear();
      }
    }
    kept.write(chunk.data(), chunk.size());
  }
  kept.commit();
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_)
    throw std::runtime_error("cannot open " + path_ + " for appending: " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const StepRecord& rec, const StepRates& rates,
                          std::optional<double> val_loss, std::optional<double> loss_mean) {
  std::string line = metrics_line(rec, rates, val_loss, loss_mean);
  if (!run_id_written_ && !run_id_.empty())  // (this process's first line: whose lines follow)
    line.insert(line.size() - 1, ",\"run_id\":\"" + run_id_ + "\"");
  run_id_written_ = true;
  line += "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

std::string human_count(double value) {
  char buf[32];
  const double a = std::fabs(value);
  const char* suffix = "";
  double scaled = value;
  if (a >= 1e9) {
    scaled = value / 1e9, suffix = "G";
  } else if (a >= 1e6) {
    scaled = value / 1e6, suffix = "M";
  } else if (a >= 1e3) {
    scaled = value / 1e3, suffix = "k";
  }
  const double s = std::fabs(scaled);
  const int decimals = s >= 100 ? 0 : s >= 10 ? 1 : 2;
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, scaled, suffix);
  return buf;
}

std::string hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const long total = std::lround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  return buf;
}

std::string progress_line(const StepRecord& rec, int64_t total_steps, const StepRates& rates,
                          std::optional<double> val_loss) {
  const int width = std::max<int>(4, int(std::to_string(total_steps).size()));
  char mfu_text[32];
  if (std::isfinite(rates.mfu))
    std::snprintf(mfu_text, sizeof mfu_text, "mfu %.1f%%", 100.0 * rates.mfu);
  else
    std::snprintf(mfu_text, sizeof mfu_text, "mfu n/a");
  const double eta_s = double(std::max<int64_t>(0, total_steps - rec.step)) * rec.step_time_s;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %*lld/%lld | loss %.4f | grad_norm %.2f | lr %.2e | %s tok/s | %s | %.0f "
                "ms/step | eta %s",
                width, (long long)rec.step, (long long)total_steps, rec.loss, rec.grad_norm, rec.lr,
                human_count(rates.tokens_per_second).c_str(), mfu_text, 1e3 * rec.step_time_s,
                hms(eta_s).c_str());
  std::string line = buf;
  if (val_loss) {
    std::snprintf(buf, sizeof buf, " | val_loss %.4f", *val_loss);
    line += buf;
  }
  return line;
}

}  // namespace trainer::report
