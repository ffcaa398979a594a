// metrics.jsonl lines parse back with the fields written; the console line's pieces.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/report/metrics.h"
#include "runtime/report/report_builder.h"

using namespace trainer::report;
namespace fs = std::filesystem;

TEST_CASE("metrics_jsonl_lines_parse_back", "[metrics]") {
  const char* env = std::getenv("TRAINER_TEST_TMP");
  const fs::path dir = fs::path(env ? env : fs::temp_directory_path().string()) /
                       ("unit_report_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<StepRecord> written;
  {
    MetricsWriter w(dir.string(), 0);
    for (int step = 1; step <= 5; ++step) {
      StepRecord rec{
          step, step * 512, 5.0 - step * 0.5, 1.0 / step, 3e-4, 0.01 * step, false, false, {}, {}};
      const StepRates rates = step_rates(512, rec.step_time_s, 1e6, 1.0, 2);
      w.write(rec, rates, step == 5 ? std::optional<double>(2.75) : std::nullopt);
      written.push_back(rec);
    }
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    INFO("line " << line);
    const auto j = nlohmann::json::parse(line);
    const StepRecord& rec = written.at(n++);
    CHECK(j["step"] == rec.step);
    CHECK(j["tokens"] == rec.tokens);
    CHECK(j["loss"].get<double>() == Approx(rec.loss));
    CHECK(j["grad_norm"].get<double>() == Approx(rec.grad_norm));
    CHECK(j["lr"].get<double>() == Approx(rec.lr));
    CHECK(j["step_time_s"].get<double>() == Approx(rec.step_time_s));
    CHECK(j["tokens_per_second"].get<double>() == Approx(512 / rec.step_time_s));
    CHECK(j["mfu"].get<double>() == Approx(1e6 * 512 / rec.step_time_s / (1e12 * 2)));
    CHECK(j.contains("val_loss") == (rec.step == 5));
  }
  CHECK(n == written.size());
  fs::remove_all(dir);
}

// A resume from step 3 keeps steps 1-3 of the file and drops what the earlier run logged after
// its checkpoint; a fresh start (step 0) starts the file over.
TEST_CASE("metrics_jsonl_restarts_at_the_resumed_step", "[metrics]") {
  const char* env = std::getenv("TRAINER_TEST_TMP");
  const fs::path dir = fs::path(env ? env : fs::temp_directory_path().string()) /
                       ("unit_report_metrics_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto write_steps = [&](int first_step, int last) {
    MetricsWriter w(dir.string(), first_step);
    for (int step = first_step + 1; step <= last; ++step)
      w.write(StepRecord{step, step * 10, 1.0, 1.0, 1e-3, 0.1, false, false, {}, {}},
              step_rates(10, 0.1, 1e6, 1.0, 1));
  };
  auto steps_in_file = [&] {
    std::vector<int> steps;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      steps.push_back(nlohmann::json::parse(line)["step"].get<int>());
    return steps;
  };
  write_steps(0, 5);  // died after step 5, its last checkpoint at step 3
  {
    // What the resume keeps is the report's earlier curve: steps 1-3's points (a null, non-finite,
    // loss as NaN), a val loss as an eval.
    std::vector<std::string> lines;
    {
      std::ifstream in(dir / "metrics.jsonl");
      for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    lines[1] = R"({"step":2,"tokens":25,"loss":null,"val_loss":2.5})";
    std::ofstream out(dir / "metrics.jsonl", std::ios::trunc);
    for (const std::string& line : lines) out << line << "\n";
    out.close();
    MetricsWriter w(dir.string(), 3);
    const EarlierPoints& e = w.earlier();
    REQUIRE(e.curve.size() == 3);
    CHECK(e.curve[0].step == 1);
    CHECK(e.curve[0].tokens == 10);
    CHECK(std::isnan(e.curve[1].loss));
    CHECK(e.curve[2].loss == 1.0);
    REQUIRE(e.evals.size() == 1);
    CHECK(e.evals[0].step == 2);
    CHECK(e.evals[0].tokens == 25);
    CHECK(e.evals[0].val_loss == 2.5);
    // The report's loss: the earlier points, then this run's; val_loss the earlier eval's while
    // this run has none.
    const LossInfo l = summarize_loss(
        {StepRecord{4, 40, 0.5, 1.0, 1e-3, 0.1, false, false, {}, {}}}, {}, 1, 30, e);
    CHECK(l.curve == std::vector<std::pair<int64_t, double>>{{10, 1.0}, {30, 1.0}, {40, 0.5}});
    CHECK(l.val_loss == 2.5);
    CHECK(l.val_at_tokens == 25);
    // Logged every 2 steps: the earlier points at steps 1 and 2 only (not 3, where the earlier run
    // stopped), then this run's 4 and its last, 5, as an uninterrupted run's curve.
    const std::vector<StepRecord> resumed = {{4, 40, 0.5, 1.0, 1e-3, 0.1, false, false, {}, {}},
                                             {5, 50, 0.4, 1.0, 1e-3, 0.1, false, false, {}, {}}};
    CHECK(summarize_loss(resumed, {}, 2, 30, e).curve ==
          std::vector<std::pair<int64_t, double>>{{10, 1.0}, {40, 0.5}, {50, 0.4}});
    // A non-finite earlier val loss stays the last one (null in report.json), not an older one.
    EarlierPoints diverged = e;
    diverged.evals.push_back({3, 30, std::nan("")});
    CHECK(std::isnan(*summarize_loss(resumed, {}, 2, 30, diverged).val_loss));
  }
  write_steps(3, 6);
  CHECK(steps_in_file() == std::vector<int>{1, 2, 3, 4, 5, 6});
  write_steps(0, 2);  // a fresh run into the same directory
  CHECK(steps_in_file() == std::vector<int>{1, 2});
  fs::remove_all(dir);
}

TEST_CASE("nonfinite_values_are_written_as_null", "[metrics]") {
  StepRecord rec{1, 10, std::nan(""), INFINITY, 1e-3, 0.1, false, true, {}, {}};
  const auto j = nlohmann::json::parse(metrics_line(rec, step_rates(10, 0.1, 1e6, 0, 1)));
  CHECK(j["loss"].is_null());
  CHECK(j["grad_norm"].is_null());
  CHECK(j["mfu"].is_null());  // unknown peak
}

TEST_CASE("progress_line_shows_each_quantity", "[metrics]") {
  StepRecord rec{10, 40960, 4.1234, 1.23, 3e-4, 0.045, false, false, {}, {}};
  StepRates rates{12300, 0.012};
  const std::string line = progress_line(rec, 300, rates);
  INFO(line);
  CHECK(line ==
        "step   10/300 | loss 4.1234 | grad_norm 1.23 | lr 3.00e-04 | 12.3k tok/s | mfu 1.2% | "
        "45 ms/step | eta " +
            hms(290 * 0.045));
  CHECK(hms(754) == "00:12:34");
  CHECK(human_count(2.5e6) == "2.50M");
  CHECK(human_count(950) == "950");
}

// A resume keeps megabytes of earlier lines whole and in order (they stream through the
// temporary in chunks), and leaves no temporary beside the file.
TEST_CASE("metrics_jsonl_resume_keeps_a_long_file_whole", "[metrics]") {
  const char* env = std::getenv("TRAINER_TEST_TMP");
  const fs::path dir = fs::path(env ? env : fs::temp_directory_path().string()) /
                       ("unit_report_metrics_long_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    MetricsWriter w(dir.string(), 0);
    for (int step = 1; step <= 20000; ++step)
      w.write(StepRecord{step, step * 10, 1.0 / step, 1.0, 1e-3, 0.1, false, false, {}, {}},
              step_rates(10, 0.1, 1e6, 1.0, 1));
  }
  REQUIRE(fs::file_size(dir / "metrics.jsonl") > 2 * (size_t{1} << 20));
  const int resumed_at = 15001;
  MetricsWriter w(dir.string(), resumed_at);
  CHECK(w.earlier().curve.size() == size_t(resumed_at));
  CHECK(w.earlier().curve.back().loss == 1.0 / resumed_at);
  int expected = 1;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line); ++expected)
    REQUIRE(nlohmann::json::parse(line)["step"].get<int>() == expected);
  CHECK(expected == resumed_at + 1);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  CHECK(entries == 1);
  fs::remove_all(dir);
}
