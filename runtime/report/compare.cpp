#include "runtime/report/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "runtime/report/compare_config.h"
#include "runtime/report/metrics.h"
#include "runtime/report/run_report.h"

namespace trainer::report {
namespace {

using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number_at(const json& r, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!r.contains(p)) return kNaN;
  const json& v = r.at(p);
  return v.is_number() ? v.get<double>() : kNaN;
}

std::string string_at(const json& r, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!r.contains(p)) return "-";
  const json& v = r.at(p);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump();
}

std::string printf_cell(const char* fmt, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string bytes_cell(double bytes) {
  if (!std::isfinite(bytes) || bytes <= 0) return "-";
  if (bytes < double(1LL << 30)) return printf_cell("%.1f MiB", bytes / double(1LL << 20));
  return printf_cell("%.2f GiB", bytes / double(1LL << 30));
}

// A numeric row: value extractor, its text, and whether a ratio to the first column is shown.
struct NumericRow {
  std::string name;
  std::function<double(const json&)> value;
  std::function<std::string(const json&)> text;
};

std::vector<NumericRow> numeric_rows() {
  auto at = [](std::string p) { return [p](const json& r) { return number_at(r, p); }; };
  auto active_params = [](const json& r) {
    const double active = number_at(r, "/model/active_non_embedding_params");
    return std::isfinite(active) ? active : number_at(r, "/model/non_embedding_params");
  };
  auto count = [](std::string p) {
    return [p](const json& r) {
      const double v = number_at(r, p);
      return std::isfinite(v) ? human_count(v) : std::string("-");
    };
  };
  return {
      {"params", at("/model/params"), count("/model/params")},
      // (a mixture of experts: what a token runs; a dense model runs all of them)
      {"active params (non-emb.)", active_params,
       [active_params](const json& r) {
         const double v = active_params(r);
         return std::isfinite(v) ? human_count(v) : std::string("-");
       }},
      {"tokens/step", at("/batch/tokens_per_step"), count("/batch/tokens_per_step")},
      {"tokens/s", at("/throughput/tokens_per_second"), count("/throughput/tokens_per_second")},
      {"tokens/s/device", at("/throughput/tokens_per_second_per_device"),
       count("/throughput/tokens_per_second_per_device")},
      {"MFU", at("/throughput/mfu"),
       [](const json& r) { return printf_cell("%.2f%%", 100 * number_at(r, "/throughput/mfu")); }},
      // MFU's denominator: a peak measured on a loaded machine moves every MFU with it
      {"peak TFLOP/s/device", at("/hardware/peak_tflops_per_device"),
       [](const json& r) {
         const double peak = number_at(r, "/hardware/peak_tflops_per_device");
         return std::isfinite(peak)
                    ? printf_cell("%.4g", peak) + " " + string_at(r, "/hardware/peak_source")
                    : std::string("-");
       }},
      {"step time p50", at("/throughput/step_time_s/p50"),
       [](const json& r) {
         return printf_cell("%.1f ms", 1e3 * number_at(r, "/throughput/step_time_s/p50"));
       }},
      {"loss @ tokens seen", at("/loss/final_train_loss"),
       [](const json& r) {
         return printf_cell("%.4f", number_at(r, "/loss/final_train_loss")) + " @ " +
                human_count(number_at(r, "/loss/tokens_seen"));
       }},
      // (the last eval's: at its own token count, which runs of different lengths do not share)
      {"val loss @ tokens", at("/loss/val_loss"),
       [](const json& r) {
         const double v = number_at(r, "/loss/val_loss");
         return std::isfinite(v) ? printf_cell("%.4f", v) + " @ " +
                                       human_count(number_at(r, "/loss/val_at_tokens"))
                                 : std::string("-");
       }},
      // steps whose loss or gradient was not finite (their updates skipped): the loss above
      // then comes from the few steps that were (of the steps the report's process ran)
      {"non-finite steps", at("/stability/nonfinite_steps"),
       [](const json& r) {
         const double n = number_at(r, "/stability/nonfinite_steps");
         // stability.nonfinite_steps counts stability.steps_counted steps (the whole run
         // across resumes), not this process's steps_run
         const char* of =
             r.contains(json::json_pointer("/stability/steps_counted")) ? "/stability/steps_counted"
             : r.contains("run") && r["run"].contains("steps_run")      ? "/run/steps_run"
                                                                        : "/run/steps_completed";
         return std::isfinite(n) ? printf_cell("%.0f", n) + " of " + string_at(r, of)
                                 : std::string("-");
       }},
      {"peak memory/rank", at("/memory/peak_bytes_per_rank/max"),
       [](const json& r) { return bytes_cell(number_at(r, "/memory/peak_bytes_per_rank/max")); }},
  };
}

std::string layout_cell(const json& r) {
  std::string s;
  for (const char* key : {"world_size", "dp", "tp", "pp", "cp", "ep", "zero_stage"})
    s += (s.empty() ? "" : "/") + string_at(r, std::string("/parallel/") + key);
  return s;
}

// "1f1b, 4 pieces, bubble 20.0%" under pipeline parallelism ("interleaved x2, ..." with virtual
// stages), "-" without.
std::string pipeline_cell(const json& r) {
  const double pp = number_at(r, "/parallel/pp"), pieces = number_at(r, "/parallel/microbatches");
  if (!(pp > 1) || !(pieces >= 1)) return "-";
  double v = number_at(r, "/parallel/virtual_stages");
  if (!(v >= 1)) v = 1;  // (reports from before the field)
  const std::string schedule = string_at(r, "/parallel/pipeline_schedule");
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s%s, %.0f pieces, bubble %.1f%%", schedule.c_str(),
                v > 1 ? (" x" + std::to_string(static_cast<int>(v))).c_str() : "", pieces,
                100 * (pp - 1) / (v * pieces + pp - 1));  // parallel::bubble_fraction
  return buf;
}

// "cpu x 2, 1 node": the devices a run ran on ("-" for a report without them).
std::string hardware_cell(const json& r) {
  const std::string name = string_at(r, "/hardware/device_name");
  if (name == "-") return name;
  const double nodes = number_at(r, "/hardware/nodes");
  return name + " x " + string_at(r, "/hardware/device_count") +
         (std::isfinite(nodes) ? printf_cell(nodes == 1 ? ", %.0f node" : ", %.0f nodes", nodes)
                               : "");
}

// The parts of the data a run trained on (val: evaluated on) that decide its losses, "-" where
// the report does not say (an older report, a run without evals): the source as the config
// names it, and for token shards what it matched (data::shards_fingerprint: the same files by
// another path are the same data, other files behind the same glob are not);
// data.seed where it draws the tokens (a synthetic source) or orders them (data.shuffle on train
// shards); the shuffle; an eval's tokens.
struct DataParts {
  std::string source, shards, seed, shuffled, eval_tokens;
  // The source's text, where the report has no digest of its shards (a report with one is
  // compared by it, with the others that have one).
  std::string undigested_source() const { return shards == "-" ? source : "-"; }
  // What kind of source it is: a synthetic one by its name, token shards as one kind (their
  // digests or paths tell them apart), so that a synthetic run and a shard run differ even
  // though neither has the other's digest or undigested path.
  std::string kind() const {
    if (source == "-") return "-";
    return source.starts_with("synthetic:") ? source : "token shards";
  }
};

DataParts data_parts(const json& r, bool val) {
  DataParts d{string_at(r, val ? "/data/val" : "/data/train"), "-", "-", "-", "-"};
  if (d.source == "-") return d;
  d.shards = string_at(r, val ? "/data/val_shards_sha256" : "/data/train_shards_sha256");
  const bool synthetic = d.source.starts_with("synthetic:");
  if (!val && !synthetic) d.shuffled = string_at(r, "/config/data/shuffle");
  if (synthetic || d.shuffled == "true") d.seed = string_at(r, "/config/data/seed");
  const double tokens = number_at(r, "/data/val_tokens_per_eval");
  if (val && std::isfinite(tokens)) d.eval_tokens = human_count(tokens);
  return d;
}

std::string data_cell(const json& r, bool val) {
  const DataParts d = data_parts(r, val);
  std::string cell = d.source;
  if (d.shards != "-") cell += " (shards " + d.shards.substr(0, 8) + ")";
  if (d.seed != "-") cell += ", data.seed " + d.seed;
  if (d.shuffled == "true") cell += ", shuffled";
  if (d.eval_tokens != "-") cell += ", " + d.eval_tokens + " tokens/eval";
  return cell;
}

// Whether the reports agree on `part`, leaving out those where it is "-" (unknown is not
// different).
bool same_known(const std::vector<LoadedReport>& reports,
                const std::function<std::string(const json&)>& part) {
  std::optional<std::string> first;
  for (const LoadedReport& r : reports) {
    const std::string v = part(r.json);
    if (v == "-") continue;
    if (!first)
      first = v;
    else if (v != *first)
      return false;
  }
  return true;
}

bool same_data(const std::vector<LoadedReport>& reports, bool val) {
  const auto part = [&](std::string (*of)(const DataParts&)) {
    return same_known(reports, [&](const json& r) { return of(data_parts(r, val)); });
  };
  return part([](const DataParts& d) { return d.kind(); }) &&
         part([](const DataParts& d) { return d.shards; }) &&
         part([](const DataParts& d) { return d.undigested_source(); }) &&
         part([](const DataParts& d) { return d.seed; }) &&
         part([](const DataParts& d) { return d.shuffled; }) &&
         part([](const DataParts& d) { return d.eval_tokens; });
}

// "a: at step 15 train.lr: 0.003 -> 0.001; ..." for each report whose resumes changed settings
// (run.resumes), "" where none did.
std::string changed_at_resumes(const std::vector<LoadedReport>& reports) {
  std::string text;
  const json::json_pointer resumes("/run/resumes");
  for (const LoadedReport& r : reports) {
    if (!r.json.contains(resumes) || !r.json.at(resumes).is_array()) continue;
    for (const json& resume : r.json.at(resumes)) {
      if (!resume.contains("changes") || !resume["changes"].is_array() || resume["changes"].empty())
        continue;
      std::string changes;
      for (const json& c : resume["changes"])
        changes +=
            (changes.empty() ? "" : ", ") + (c.is_string() ? c.get<std::string>() : c.dump());
      text += (text.empty() ? "" : "; ") + r.label + ": at step " + string_at(resume, "/at_step") +
              " " + changes;
    }
  }
  return text;
}

using Table = std::vector<std::vector<std::string>>;  // rows of cells; row 0 is the header

void add_numeric_row(Table& t, const std::vector<LoadedReport>& reports, const NumericRow& row) {
  std::vector<std::string> cells{row.name};
  const double first = row.value(reports.front().json);
  for (const LoadedReport& r : reports) {
    std::string cell = row.text(r.json);
    const double v = row.value(r.json);
    if (std::isfinite(v) && std::isfinite(first) && first != 0)
      cell += " (" + format_ratio(v / first) + ")";
    cells.push_back(cell);
  }
  t.push_back(cells);
}

std::string render(const Table& t) {
  std::vector<size_t> width(t.front().size(), 0);
  for (const auto& row : t)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream os;
  auto line = [&](const std::vector<std::string>& row) {
    std::string text;
    for (size_t c = 0; c < row.size(); ++c) {
      text += (c ? " | " : "") + row[c] + std::string(width[c] - row[c].size(), ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    os << text << "\n";
  };
  line(t.front());
  std::string rule;
  for (size_t c = 0; c < width.size(); ++c) rule += (c ? "-+-" : "") + std::string(width[c], '-');
  os << rule << "\n";
  for (size_t i = 1; i < t.size(); ++i) line(t[i]);
  return os.str();
}

bool same_peak(const std::vector<LoadedReport>& reports) {
  const double first = number_at(reports.front().json, "/hardware/peak_tflops_per_device");
  for (const LoadedReport& r : reports) {
    const double v = number_at(r.json, "/hardware/peak_tflops_per_device");
    if (std::isfinite(v) && std::isfinite(first) && std::abs(v - first) > 0.01 * first)
      return false;
  }
  return true;
}

// Whether the reports agree at `pointer` (numbers by value; absent and null count as one value),
// or with skip_unset among those that have a value there only (a run without evals has no val
// loss).
bool same_at(const std::vector<LoadedReport>& reports, const std::string& pointer,
             bool skip_unset = false) {
  const json::json_pointer p(pointer);
  std::optional<json> first;
  for (const LoadedReport& r : reports) {
    const json v = r.json.contains(p) ? r.json.at(p) : json();
    if (skip_unset && v.is_null()) continue;
    if (!first)
      first = v;
    else if (v != *first)
      return false;
  }
  return true;
}

// (a report without a figure is left out of these: unknown, not different)
bool same_token_counts(const std::vector<LoadedReport>& reports) {
  return same_at(reports, "/loss/tokens_seen", /*skip_unset=*/true);
}

bool same_model(const std::vector<LoadedReport>& reports) {
  return same_at(reports, "/model/params", /*skip_unset=*/true) &&
         same_at(reports, "/model/flops_per_token", /*skip_unset=*/true);
}

std::vector<std::pair<double, double>> curve_of(const json& r) {
  std::vector<std::pair<double, double>> pts;
  const json::json_pointer p("/loss/curve");
  if (!r.contains(p) || !r.at(p).is_array()) return pts;
  for (const json& pt : r.at(p))
    if (pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number())
      pts.emplace_back(pt[0].get<double>(), pt[1].get<double>());
  std::sort(pts.begin(), pts.end());
  return pts;
}

std::string token_warning(const std::vector<LoadedReport>& reports, std::optional<double> common) {
  std::string w = "warning: reports are at different token counts (";
  for (size_t i = 0; i < reports.size(); ++i)
    w += (i ? ", " : "") + reports[i].label + ": " +
         human_count(number_at(reports[i].json, "/loss/tokens_seen"));
  w += "); ";
  if (common)
    w += "loss is also compared at " + human_count(*common) +
         " tokens, the largest count every loss curve reaches, by linear interpolation\n";
  else
    w += "their loss curves share no token range, so loss is not comparable\n";
  return w;
}

void add_common_loss_row(Table& t, const std::vector<LoadedReport>& reports, double tokens) {
  // A curve logged every few steps has its points far apart: a cell between two of them is a
  // straight line's value, not a loss measured there, and says so.
  NumericRow row{"loss @ " + human_count(tokens) + " tokens (~: interpolated between curve points)",
                 [tokens](const json& r) { return loss_at_tokens(r, tokens).value_or(kNaN); },
                 [tokens](const json& r) {
                   const std::string cell =
                       printf_cell("%.4f", loss_at_tokens(r, tokens).value_or(kNaN));
                   const auto pts = curve_of(r);
                   const bool measured = std::any_of(
                       pts.begin(), pts.end(), [&](const auto& pt) { return pt.first == tokens; });
                   return measured || cell == "-" ? cell : "~" + cell;
                 }};
  add_numeric_row(t, reports, row);
}

// A row per op family any report's hardware.kernels names ("kernels: attention"), "-" where a
// report names none (a cpu run, or a report from before the field).
void add_kernel_rows(Table& t, const std::vector<LoadedReport>& reports) {
  std::set<std::string> families;
  const json::json_pointer kernels("/hardware/kernels");
  for (const LoadedReport& r : reports)
    if (r.json.contains(kernels) && r.json.at(kernels).is_object())
      for (const auto& [family, _] : r.json.at(kernels).items()) families.insert(family);
  for (const std::string& family : families) {
    std::vector<std::string> row{"kernels: " + family};
    for (const LoadedReport& r : reports)
      row.push_back(string_at(r.json, "/hardware/kernels/" + family));
    t.push_back(row);
  }
}

// The warnings that the reports' figures are not comparable as they stand: a run killed while
// it ran, settings changed at a resume, another model, peak, train or val data, device or build.
std::string comparability_warnings(const std::vector<LoadedReport>& reports) {
  std::string running, w;
  for (const LoadedReport& r : reports)
    if (string_at(r.json, "/run/status") == "running")
      running += (running.empty() ? "" : ", ") + r.label;
  if (!running.empty())
    w += "warning: " + running +
         ": the report says running: the run was killed without a word (SIGKILL, a lost node) or "
         "has not ended; its figures stop where it started\n";
  if (const std::string changed = changed_at_resumes(reports); !changed.empty())
    w += "warning: a run changed settings when it resumed (" + changed +
         "): its steps ran under both, and its report's config holds the last\n";
  if (!same_model(reports))
    w += "warning: the reports train different models (params, flops/token): compare their MFU, "
         "not their tokens/s\n";
  if (!same_peak(reports))
    w += "warning: the reports' MFU use different peaks (peak TFLOP/s/device; a peak measured on "
         "a loaded machine moves the MFU): for the same model and devices compare tokens/s, or "
         "set hardware.peak_tflops to one figure\n";
  if (!same_data(reports, /*val=*/false))
    w += "warning: the reports train on different data (data (train)): their losses are not "
         "comparable\n";
  if (!same_data(reports, /*val=*/true))
    w += "warning: the reports evaluate on different val data (data (val)): their val losses "
         "are not comparable\n";
  if (!same_known(reports, [](const json& r) { return string_at(r, "/hardware/device_name"); }))
    w += "warning: the reports ran on different devices (hardware): compare their MFU, not "
         "their tokens/s\n";
  // ("unknown": built outside a git checkout)
  if (!same_known(reports, [](const json& r) {
        const std::string rev = string_at(r, "/run/git_rev");
        return rev == "unknown" ? "-" : rev;
      }))
    w += "warning: the reports come from different builds (git rev): a difference in speed or "
         "loss may come from the code\n";
  return w;
}

}  // namespace

std::string format_ratio(double ratio) {
  char buf[32];
  // two decimals, or two significant digits where those would read 0.00x
  std::snprintf(buf, sizeof buf, std::abs(ratio) >= 0.1 || ratio == 0 ? "%.2fx" : "%.2gx", ratio);
  return buf;
}

std::optional<double> loss_at_tokens(const json& report, double tokens) {
  const auto pts = curve_of(report);
  if (pts.empty() || tokens < pts.front().first || tokens > pts.back().first) return std::nullopt;
  for (size_t i = 0; i + 1 < pts.size(); ++i) {
    const auto& [x0, y0] = pts[i];
    const auto& [x1, y1] = pts[i + 1];
    if (tokens >= x0 && tokens <= x1)
      return x1 == x0 ? y1 : y0 + (y1 - y0) * (tokens - x0) / (x1 - x0);
  }
  return pts.back().second;  // a one-point curve at exactly `tokens`
}

std::optional<double> largest_common_tokens(const std::vector<LoadedReport>& reports) {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  for (const LoadedReport& r : reports) {
    const auto pts = curve_of(r.json);
    if (pts.empty()) return std::nullopt;
    lo = std::max(lo, pts.front().first);
    hi = std::min(hi, pts.back().first);
  }
  if (reports.empty() || hi < lo) return std::nullopt;
  return hi;
}

std::vector<LoadedReport> load_reports(const std::vector<std::string>& paths) {
  std::vector<LoadedReport> out;
  std::map<std::string, int> uses;
  for (const std::string& path : paths) {
    json j = load_report(path);
    std::string name = string_at(j, "/run/name");
    out.push_back({name, path, std::move(j)});
    ++uses[name];
  }
  for (LoadedReport& r : out)
    if (uses[r.label] > 1) r.label += " (" + r.path + ")";
  return out;
}

std::string compare_reports(const std::vector<LoadedReport>& reports) {
  if (reports.empty()) return "";
  Table t;
  t.push_back({"run"});
  for (const LoadedReport& r : reports) t.front().push_back(r.label);
  // A failed or stopped run's figures are partial: the status row says so.
  std::vector<std::string> status{"status"}, layout{"world/dp/tp/pp/cp/ep/zero"},
      pipeline{"pipeline"}, precision{"precision"}, data{"data (train)"}, val{"data (val)"},
      seed{"seed"}, hardware{"hardware"}, git_rev{"git rev"};
  bool pipelined = false;
  for (const LoadedReport& r : reports) {
    // a resumed run's throughput and step times cover the steps after its resume only
    const double resumed = number_at(r.json, "/run/resumed_from_step");
    status.push_back(
        string_at(r.json, "/run/status") +
        (std::isfinite(resumed) ? printf_cell(", resumed at step %.0f", resumed) : ""));
    data.push_back(data_cell(r.json, false));
    val.push_back(data_cell(r.json, true));
    seed.push_back(string_at(r.json, "/run/seed"));
    hardware.push_back(hardware_cell(r.json));
    git_rev.push_back(string_at(r.json, "/run/git_rev"));
    layout.push_back(layout_cell(r.json));
    pipeline.push_back(pipeline_cell(r.json));
    pipelined |= pipeline.back() != "-";
    precision.push_back(string_at(r.json, "/parallel/precision"));
  }
  t.push_back(status);
  t.push_back(layout);
  if (pipelined) t.push_back(pipeline);
  t.push_back(precision);
  t.push_back(data);
  t.push_back(val);
  t.push_back(seed);
  t.push_back(hardware);
  t.push_back(git_rev);
  for (std::vector<std::string>& row : config_rows(reports)) t.push_back(std::move(row));
  add_kernel_rows(t, reports);
  for (const NumericRow& row : numeric_rows()) add_numeric_row(t, reports, row);

  std::string warning = comparability_warnings(reports);
  if (same_token_counts(reports) && !same_at(reports, "/loss/val_at_tokens", /*skip_unset=*/true))
    warning +=
        "warning: the reports' last evals are at different token counts (val loss @ tokens): "
        "compare val losses of runs evaluated at the same tokens\n";
  if (!same_token_counts(reports)) {
    const std::optional<double> common = largest_common_tokens(reports);
    warning += token_warning(reports, common);
    if (common) add_common_loss_row(t, reports, *common);
  }
  return warning + render(t);
}

}  // namespace trainer::report
