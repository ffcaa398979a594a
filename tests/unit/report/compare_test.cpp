// `trainer compare` on hand-built reports: ratios to the first column, and the token-count warning.
#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/report/compare.h"
#include "runtime/report/config_json.h"
#include "runtime/report/metrics.h"
#include "sample_report.h"

using namespace trainer::report;
using trainer::report::testing::SampleRun;

namespace {

LoadedReport loaded(const SampleRun& s) {
  return {s.name, s.name + ".json",
          nlohmann::json::parse(to_json(testing::sample_report(s)).dump())};
}

std::string row_of(const std::string& table, const std::string& name) {
  const size_t at = table.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
}

}  // namespace

TEST_CASE("compare_shows_ratios_to_the_first_report", "[compare]") {
  SampleRun a, b;
  a.name = "base";
  b.name = "fast";
  b.world = 4;
  b.step_time_s = 0.0535;  // same tokens per step, faster steps
  const auto ra = loaded(a), rb = loaded(b);
  const std::string table = compare_reports({ra, rb});
  INFO(table);
  const double tps_a = ra.json["throughput"]["tokens_per_second"];
  const double tps_b = rb.json["throughput"]["tokens_per_second"];
  const double per_dev_a = ra.json["throughput"]["tokens_per_second_per_device"];
  const double per_dev_b = rb.json["throughput"]["tokens_per_second_per_device"];
  const double p50_a = ra.json["throughput"]["step_time_s"]["p50"];
  const double p50_b = rb.json["throughput"]["step_time_s"]["p50"];
  CHECK_THAT(row_of(table, "tokens/s"), Catch::Contains(format_ratio(tps_b / tps_a)));
  CHECK_THAT(row_of(table, "tokens/s/device"),
             Catch::Contains(format_ratio(per_dev_b / per_dev_a)));
  CHECK_THAT(row_of(table, "step time p50"), Catch::Contains(format_ratio(p50_b / p50_a)));
  CHECK_THAT(row_of(table, "tokens/s"), Catch::Contains("(1.00x)"));
  CHECK_THAT(row_of(table, "world/dp/tp/pp/cp/ep/zero"), Catch::Contains("4/4/1/1/1/1/0"));
  CHECK_THAT(table, !Catch::Contains("bubble"));  // no pipeline row without a pipeline
  auto piped = rb;
  piped.json["parallel"]["pp"] = 2;
  piped.json["parallel"]["pipeline_schedule"] = "1f1b";
  piped.json["parallel"]["microbatches"] = 4;
  CHECK_THAT(row_of(compare_reports({ra, piped}), "pipeline"),
             Catch::Contains("-") && Catch::Contains("1f1b, 4 pieces, bubble 20.0%"));
  CHECK_THAT(table, Catch::Contains("base") && Catch::Contains("fast"));
  CHECK_THAT(table, !Catch::Contains("warning"));  // same token counts
  CHECK_THAT(row_of(table, "status"), Catch::Contains("completed"));
}

TEST_CASE("compare_warns_when_the_models_differ", "[compare]") {
  SampleRun a, b;
  a.name = "small";
  b.name = "large";
  auto ra = loaded(a), rb = loaded(b);
  CHECK_THAT(compare_reports({ra, rb}), !Catch::Contains("different models"));
  rb.json["model"]["params"] = 2 * ra.json["model"]["params"].get<double>();
  rb.json["model"]["flops_per_token"] = 2 * ra.json["model"]["flops_per_token"].get<double>();
  const std::string table = compare_reports({ra, rb});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("warning: the reports train different models"));
  CHECK_THAT(row_of(table, "params"), Catch::Contains("(2.00x)"));
}

TEST_CASE("compare_shows_which_runs_failed", "[compare]") {
  SampleRun a, b;
  a.name = "base";
  b.name = "crashed";
  auto rb = loaded(b);
  rb.json["run"]["status"] = "failed";
  const std::string table = compare_reports({loaded(a), rb});
  INFO(table);
  const std::string status = row_of(table, "status");
  REQUIRE(status.find("failed") != std::string::npos);
  CHECK(status.find("completed") < status.find("failed"));
}

// Two runs of one config with different kernels (TRAINER_ATTENTION): a row per op family that
// either report's hardware.kernels names, "-" where one names none.
TEST_CASE("compare_shows_each_runs_kernels", "[compare]") {
  SampleRun a, b;
  a.name = "kernels";
  b.name = "cudnn";
  auto ra = loaded(a), rb = loaded(b);
  ra.json["hardware"]["kernels"] = {{"attention", "tensor_core"}};
  rb.json["hardware"]["kernels"] = {{"attention", "cudnn"}, {"gemm", "cuBLASLt"}};
  const std::string table = compare_reports({ra, rb});
  INFO(table);
  const std::string attention = row_of(table, "kernels: attention");
  REQUIRE(attention.find("tensor_core") != std::string::npos);
  CHECK(attention.find("tensor_core") < attention.find("cudnn"));
  const std::string gemm = row_of(table, "kernels: gemm");
  REQUIRE_FALSE(gemm.empty());
  CHECK(gemm.find(" - ") != std::string::npos);
  CHECK(gemm.find("cuBLASLt") != std::string::npos);
  CHECK(row_of(compare_reports({loaded(a)}), "kernels: attention").empty());  // cpu: no rows
}

TEST_CASE("compare_warns_at_different_token_counts_and_interpolates_loss", "[compare]") {
  SampleRun a, b;
  a.name = "short";
  a.steps = 25;
  b.name = "long";
  b.steps = 40;
  const auto ra = loaded(a), rb = loaded(b);
  const std::string table = compare_reports({ra, rb});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("warning: reports are at different token counts"));
  // The short run's curve ends at its last step, inside the long run's curve.
  const auto common = largest_common_tokens({ra, rb});
  REQUIRE(common);
  CHECK(*common == Approx(25.0 * a.tokens_per_step));
  // The long run logged steps 20 and 30 only: its loss at step 25 is their midpoint.
  const double expected_b = (testing::sample_loss(20) + testing::sample_loss(30)) / 2;
  const auto got_b = loss_at_tokens(rb.json, *common);
  REQUIRE(got_b);
  CHECK(*got_b == Approx(expected_b));
  const std::string row = row_of(
      table, "loss @ " + human_count(*common) + " tokens (~: interpolated between curve points)");
  CHECK_THAT(row, Catch::Contains(format_ratio(expected_b / testing::sample_loss(25))));
  // the short run has a point there (its last step), the long one does not
  char a_cell[32], b_cell[32];
  std::snprintf(a_cell, sizeof a_cell, "| %.4f", testing::sample_loss(25));
  std::snprintf(b_cell, sizeof b_cell, "| ~%.4f", expected_b);
  CHECK_THAT(row, Catch::Contains(a_cell) && Catch::Contains(b_cell));
  // their last evals (steps 20 and 40) are at different token counts: the row says which (the
  // token-count warning above already says the runs differ in length)
  CHECK_THAT(row_of(table, "val loss @ tokens"),
             Catch::Contains(human_count(20.0 * a.tokens_per_step)) &&
                 Catch::Contains(human_count(40.0 * b.tokens_per_step)));
}

// What makes two runs' losses incomparable shows: their data, their seed, a resume (its
// throughput covers the steps after it), last evals at other token counts (among the runs that
// have one).
TEST_CASE("compare_shows_data_seed_resume_and_eval_tokens", "[compare]") {
  SampleRun a, b;
  a.name = "markov";
  b.name = "uniform";
  const auto ra = loaded(a);
  auto rb = loaded(b);
  rb.json["data"]["train"] = "synthetic:uniform";
  rb.json["run"]["seed"] = 7;
  rb.json["run"]["resumed_from_step"] = 6;
  const std::string table = compare_reports({ra, rb});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("warning: the reports train on different data"));
  CHECK_THAT(row_of(table, "data (train)"),
             Catch::Contains("synthetic:markov") && Catch::Contains("synthetic:uniform"));
  CHECK_THAT(row_of(table, "seed"), Catch::Contains("| 0 ") && Catch::EndsWith("| 7"));
  CHECK_THAT(row_of(table, "status"), Catch::EndsWith("completed, resumed at step 6"));
  CHECK_THAT(compare_reports({ra, ra}), !Catch::Contains("warning"));
  auto later_eval = ra, no_eval = ra;
  later_eval.json["loss"]["val_at_tokens"] = 123456;
  no_eval.json["loss"]["val_at_tokens"] = nullptr;
  no_eval.json["loss"]["val_loss"] = nullptr;
  CHECK_THAT(compare_reports({ra, later_eval}),
             Catch::Contains("warning: the reports' last evals are at different token counts"));
  CHECK_THAT(compare_reports({ra, no_eval}), !Catch::Contains("warning"));
}

// What makes two reports' figures incomparable beyond the config: a run killed while its report
// said running, settings changed at a resume, another val set (source, seed, tokens per eval),
// another device or build. Unknown (a field an older report lacks) is not different.
TEST_CASE("compare_warns_of_killed_runs_resume_changes_val_data_devices_and_builds", "[compare]") {
  SampleRun a;
  a.name = "base";
  auto ra = loaded(a);
  ra.json["data"]["val"] = "synthetic:markov";
  ra.json["data"]["val_tokens_per_eval"] = 2048;
  ra.json["config"]["data"] = {{"seed", 7}, {"shuffle", false}};
  const auto warnings_with = [&](const std::function<void(nlohmann::json&)>& change) {
    auto rb = ra;
    rb.label = "other";
    change(rb.json);
    const std::string table = compare_reports({ra, rb});
    return table.substr(0, table.find("\nrun "));
  };
  CHECK(warnings_with([](nlohmann::json&) {}).find("warning") == std::string::npos);
  CHECK_THAT(warnings_with([](auto& j) { j["run"]["status"] = "running"; }),
             Catch::Contains("warning: other: the report says running"));
  CHECK_THAT(warnings_with([](auto& j) {
               j["run"]["resumes"] = {
                   {{"at_step", 15}, {"world_size", 1}, {"changes", {"train.lr: 0.003 -> 0.001"}}}};
             }),
             Catch::Contains("changed settings when it resumed (other: at step 15 train.lr: 0.003 "
                             "-> 0.001)"));
  CHECK(warnings_with([](auto& j) {
          j["run"]["resumes"] = {
              {{"at_step", 15}, {"world_size", 1}, {"changes", nlohmann::json::array()}}};
        }).find("warning") == std::string::npos);
  CHECK_THAT(warnings_with([](auto& j) { j["data"]["val"] = "val_*.bin"; }),
             Catch::Contains("evaluate on different val data"));
  // token shards: the files matched decide, not the path's spelling
  auto shards = ra;
  shards.json["data"]["train"] = "data/train_*.bin";
  shards.json["data"]["train_shards_sha256"] = "aaaa0000";
  auto same_files = shards, other_files = shards;
  same_files.json["data"]["train"] = "/abs/data/train_*.bin";
  other_files.json["data"]["train_shards_sha256"] = "bbbb1111";
  CHECK(compare_reports({shards, same_files}).find("train on different data") == std::string::npos);
  CHECK_THAT(compare_reports({shards, other_files}), Catch::Contains("train on different data"));
  CHECK_THAT(compare_reports({shards, other_files}), Catch::Contains("(shards bbbb1111)"));
  // a synthetic source against token shards: neither has the other's digest or seed, yet the
  // data differ
  CHECK_THAT(compare_reports({ra, shards}), Catch::Contains("train on different data"));
  auto older = shards;  // a report from before the digest, of the same path: unknown, not other
  older.json["data"].erase("train_shards_sha256");
  CHECK(compare_reports({shards, older}).find("train on different data") == std::string::npos);
  CHECK_THAT(warnings_with([](auto& j) { j["data"]["val_tokens_per_eval"] = 4096; }),
             Catch::Contains("evaluate on different val data"));
  CHECK_THAT(warnings_with([](auto& j) { j["config"]["data"]["seed"] = 99; }),
             Catch::Contains("train on different data") &&
                 Catch::Contains("evaluate on different val data"));
  CHECK_THAT(warnings_with([](auto& j) { j["hardware"]["device_name"] = "NVIDIA H100"; }),
             Catch::Contains("ran on different devices"));
  CHECK_THAT(warnings_with([](auto& j) { j["run"]["git_rev"] = "0123abc"; }),
             Catch::Contains("come from different builds"));
  // an older report without the data section, or some of its fields, or its config: unknown,
  // not different data
  CHECK(warnings_with([](auto& j) { j.erase("data"); }).find("warning") == std::string::npos);
  CHECK(warnings_with([](auto& j) { j["data"].erase("val_tokens_per_eval"); }).find("warning") ==
        std::string::npos);
  CHECK(warnings_with([](auto& j) { j.erase("config"); }).find("warning") == std::string::npos);
  CHECK(warnings_with([](auto& j) { j.erase("hardware"); }).find("warning") == std::string::npos);
  CHECK(warnings_with([](auto& j) { j["model"].erase("flops_per_token"); }).find("warning") ==
        std::string::npos);
  CHECK(warnings_with([](auto& j) { j["loss"].erase("tokens_seen"); }).find("warning") ==
        std::string::npos);
  CHECK(warnings_with([](auto& j) { j["run"]["git_rev"] = "unknown"; }).find("warning") ==
        std::string::npos);
}

TEST_CASE("loss_at_tokens_is_empty_outside_the_curve", "[compare]") {
  const auto r = loaded({});
  CHECK_FALSE(loss_at_tokens(r.json, 1.0));
  CHECK_FALSE(loss_at_tokens(r.json, 1e12));
}

// MFU is tokens/s over a peak; reports whose peaks differ (each measured on its own, loaded,
// machine) say so, and each report's peak is shown. Steps that were not finite are counted; a
// dense model's active parameters are its non-embedding ones; a tiny ratio keeps two digits.
TEST_CASE("compare_shows_the_peak_non_finite_steps_and_small_ratios", "[compare]") {
  SampleRun a, b;
  a.name = "base";
  b.name = "other";
  auto ra = loaded(a), rb = loaded(b);
  const std::string same = compare_reports({ra, rb});
  INFO(same);
  CHECK_THAT(same, !Catch::Contains("different peaks"));
  CHECK_THAT(row_of(same, "peak TFLOP/s/device"), Catch::Contains("(1.00x)"));
  CHECK_THAT(row_of(same, "non-finite steps"), Catch::Contains("0 of "));
  const double non_embedding = ra.json["model"]["non_embedding_params"];
  CHECK_THAT(row_of(same, "active params (non-emb.)"), Catch::Contains(human_count(non_embedding)));

  rb.json["hardware"]["peak_tflops_per_device"] =
      2 * ra.json["hardware"]["peak_tflops_per_device"].get<double>();
  rb.json["stability"]["nonfinite_steps"] = 5;
  rb.json["throughput"]["tokens_per_second"] =
      0.0033 * ra.json["throughput"]["tokens_per_second"].get<double>();
  const std::string differ = compare_reports({ra, rb});
  INFO(differ);
  CHECK_THAT(differ, Catch::Contains("warning: the reports' MFU use different peaks"));
  CHECK_THAT(row_of(differ, "peak TFLOP/s/device"), Catch::Contains("(2.00x)"));
  CHECK_THAT(row_of(differ, "non-finite steps"), Catch::Contains("5 of "));
  // a resumed run's count is of the whole run's steps (steps_counted), not this process's
  rb.json["stability"]["nonfinite_steps"] = 19;
  rb.json["stability"]["steps_counted"] = 20;
  rb.json["run"]["steps_run"] = 10;
  CHECK_THAT(row_of(compare_reports({ra, rb}), "non-finite steps"), Catch::Contains("19 of 20"));
  CHECK_THAT(row_of(differ, "tokens/s"), Catch::Contains("(0.0033x)"));
  CHECK(format_ratio(0.25) == "0.25x");
  CHECK(format_ratio(0.0) == "0.00x");
}

TEST_CASE("compare_shows_the_config_keys_in_which_runs_differ", "[compare]") {
  trainer::config::RunConfig cfg_a, cfg_b;
  cfg_b.train.lr = cfg_a.train.lr / 3;
  cfg_b.train.schedule = "wsd";
  cfg_b.run.out_dir = "elsewhere";  // every run has its own: not a difference
  cfg_b.parallel.dp = 4;            // the layout row shows it
  SampleRun a, b, old;
  a.name = "a";
  b.name = "b";
  old.name = "old";
  auto ra = loaded(a), rb = loaded(b), ro = loaded(old);
  ra.json["config"] = nlohmann::json::parse(config_json(cfg_a).dump());
  rb.json["config"] = nlohmann::json::parse(config_json(cfg_b).dump());
  CHECK(ra.json["config"]["train"]["lr"].is_number());  // typed, nested by the key's path
  CHECK(ra.json["config"]["model"]["init_from"].is_null());
  const std::string table = compare_reports({ra, rb, ro});  // `old`: a report without one
  INFO(table);
  CHECK_THAT(row_of(table, "config: train.lr"),
             Catch::Contains(ra.json["config"]["train"]["lr"].dump()) &&
                 Catch::Contains(rb.json["config"]["train"]["lr"].dump()) && Catch::EndsWith("-"));
  CHECK_THAT(row_of(table, "config: train.schedule"), Catch::Contains("wsd"));
  CHECK_THAT(table, !Catch::Contains("run.out_dir") && !Catch::Contains("parallel.dp"));
  CHECK(row_of(table, "config (other keys)").empty());
  // The same config: one row that says so.
  rb.json["config"] = ra.json["config"];
  CHECK_THAT(row_of(compare_reports({ra, rb, ro}), "config (other keys)"),
             Catch::Contains("same") && Catch::EndsWith("-"));
}
