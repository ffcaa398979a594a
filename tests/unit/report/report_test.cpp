// report.json: every DESIGN.md field present, derived fields computed from the observations,
// atomic write and load errors.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"
#include "runtime/report/report_from_config.h"
#include "runtime/report/run_report.h"
#include "sample_report.h"

using namespace trainer::report;
using trainer::report::testing::SampleRun;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const std::string& name) {
  const char* env = std::getenv("TRAINER_TEST_TMP");
  fs::path dir = fs::path(env ? env : fs::temp_directory_path().string()) /
                 ("unit_report_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// DESIGN.md "Run report", transcribed: section -> fields (a/b means nested object b in a).
const std::vector<std::string> kDesignFields = {
    "schema",
    "run/name",
    "run/config_sha256",
    "run/git_rev",
    "run/started_at",
    "run/finished_at",
    "run/status",
    "run/resumed_from_step",
    "hardware/device_type",
    "hardware/device_name",
    "hardware/device_count",
    "hardware/nodes",
    "hardware/peak_tflops_per_device",
    "hardware/peak_source",
    "parallel/world_size",
    "parallel/dp",
    "parallel/tp",
    "parallel/pp",
    "parallel/cp",
    "parallel/ep",
    "parallel/zero_stage",
    "parallel/sequence_parallel",
    "parallel/pipeline_schedule",
    "parallel/microbatches",
    "parallel/activation_checkpointing",
    "parallel/precision",
    "batch/micro_batch",
    "batch/grad_accum",
    "batch/seq_len",
    "batch/global_batch_sequences",
    "batch/tokens_per_step",
    "model/arch",
    "model/params",
    "model/n_layer",
    "model/d_model",
    "model/n_head",
    "model/vocab_size",
    "model/padded_vocab_size",
    "model/flops_per_token",
    "throughput/tokens_per_second",
    "throughput/tokens_per_second_per_device",
    "throughput/tflops_per_device",
    "throughput/mfu",
    "throughput/step_time_s/p50",
    "throughput/step_time_s/p90",
    "throughput/step_time_s/max",
    "throughput/warmup_steps_excluded",
    "memory/peak_bytes_per_rank/max",
    "memory/peak_bytes_per_rank/mean",
    "memory/breakdown/params",
    "memory/breakdown/grads",
    "memory/breakdown/optimizer",
    "memory/breakdown/activations",
    "loss/final_train_loss",
    "loss/tokens_seen",
    "loss/val_loss",
    "loss/val_at_tokens",
    "loss/curve",
    "stability/grad_norm/last",
    "stability/grad_norm/max",
    "stability/clipped_steps",
    "stability/loss_spikes",
    "stability/nonfinite_steps",
    "stragglers/slowest_rank",
    "stragglers/slowest_over_median_step_time",
    "data/train",
    "data/val",
    "data/entropy_floor",
    "data/train_tokens_per_pass",
    "data/passes",
};

}  // namespace

TEST_CASE("report_json_has_every_design_field", "[report]") {
  const nlohmann::json j = nlohmann::json::parse(to_json(testing::sample_report({})).dump());
  std::vector<std::string> missing;
  for (const std::string& f : kDesignFields)
    if (!j.contains(nlohmann::json::json_pointer("/" + f))) missing.push_back(f);
  INFO("missing: " << nlohmann::json(missing).dump());
  CHECK(missing.empty());
  CHECK(j["schema"] == "trainer.report/1");
  CHECK(j["run"]["status"] == "completed");
}

TEST_CASE("derived_fields_follow_from_the_observations", "[report]") {
  SampleRun s;
  s.world = 4;
  const RunReport r = testing::sample_report(s);
  // warm-up steps (10x slower) are excluded, so throughput is tokens_per_step / step_time.
  const double tps = double(s.tokens_per_step) / s.step_time_s;
  CHECK(r.throughput.warmup_steps_excluded == 3);
  CHECK(r.throughput.tokens_per_second == Approx(tps));
  CHECK(r.throughput.tokens_per_second_per_device == Approx(tps / s.world));
  CHECK(r.throughput.mfu == Approx(6e6 * tps / (s.peak_tflops * 1e12 * s.world)));
  CHECK(r.throughput.step_time_s.max == Approx(s.step_time_s));
  CHECK(r.loss.final_train_loss == Approx(testing::sample_loss(s.steps)));
  CHECK(r.loss.tokens_seen == s.steps * s.tokens_per_step);
  REQUIRE(r.loss.val_loss);
  CHECK(*r.loss.val_loss == Approx(testing::sample_loss(40) + 0.1));
  CHECK(*r.loss.val_at_tokens == 40 * s.tokens_per_step);
  // curve: first step, every 10th, and the last
  REQUIRE(r.loss.curve.size() == 5);
  CHECK(r.loss.curve.front().first == s.tokens_per_step);
  CHECK(r.loss.curve.back().second == Approx(testing::sample_loss(40)));
  CHECK(r.stability.grad_norm_max == Approx(2.0));
  CHECK(r.stability.grad_norm_last == Approx(2.0 / 40));
  CHECK(r.stability.clipped_steps == 1);  // only step 1 has grad_norm 2 > 1
  CHECK(r.stability.loss_spikes.empty());
  CHECK(r.memory.peak_bytes_per_rank_max == (int64_t(1) << 30));
  CHECK(r.run.steps_completed == s.steps);
  CHECK(r.run.steps_run == s.steps);
  CHECK_FALSE(r.data.passes);  // a synthetic stream has no passes
}

// Token shards: the passes the loader says it read go into report.json (none for a synthetic
// stream, whose NaN is left out).
TEST_CASE("passes_over_the_train_data_are_the_loaders", "[report]") {
  SampleRun s;
  ReportBuilder b(testing::sample_base(s), 3.0, 10);
  b.set_data_passes(2.5);
  const RunReport r = b.finish("completed");
  REQUIRE(r.data.passes);
  CHECK(to_json(r)["data"]["passes"].get<double>() == Approx(2.5));
  ReportBuilder synthetic(testing::sample_base(s), 3.0, 10);
  synthetic.set_data_passes(std::nan(""));
  CHECK_FALSE(synthetic.finish("completed").data.passes);
}

TEST_CASE("nonfinite_steps_and_spikes_are_counted", "[report]") {
  ReportBuilder b(testing::sample_base({}), 3.0);
  for (int step = 1; step <= 30; ++step) {
    StepRecord rec{step, step * 100, 2.0, 1.0, 1e-3, 0.1, false, false, {}, {}};
    if (step == 20) rec.loss = 9.0;
    if (step == 25) rec.loss = std::nan(""), rec.nonfinite = true;
    const auto spike = b.record_step(rec);
    CHECK(bool(spike) == (step == 20));
  }
  const RunReport r = b.finish("failed", "loss diverged");
  CHECK(r.stability.nonfinite_steps == 1);
  REQUIRE(r.stability.loss_spikes.size() == 1);
  CHECK(r.stability.loss_spikes[0].ratio == Approx(4.5));
  const auto j = to_json(r);
  CHECK(j["run"]["status"] == "failed");
  CHECK(j["run"]["error"] == "loss diverged");
}

TEST_CASE("memory_breakdown_by_stage_lists_each_stage_in_order", "[report]") {
  ReportBuilder b(testing::sample_base({}), 3.0);
  b.record_step({1, 100, 2.0, 1.0, 1e-3, 0.1, false, false, {}, {}});
  b.set_memory({300, 200}, {10, 20, 40, 80, 0});
  // Not gathered (a run that failed before its end): an empty list, not rank 0's as stage 0.
  CHECK(to_json(b.finish("failed"))["memory"]["breakdown_by_stage"] == nlohmann::json::array());
  b.set_stage_memory({{10, 20, 40, 80, 0}, {11, 21, 41, 79, 5}});
  const auto j = to_json(b.finish("completed"))["memory"];
  CHECK(j["breakdown"]["activations"] == 80);  // rank 0's, as before
  REQUIRE(j["breakdown_by_stage"].size() == 2);
  CHECK(j["breakdown_by_stage"][0]["stage"] == 0);
  // every field, "stage" first
  CHECK(j["breakdown_by_stage"][1].dump() ==
        R"({"stage":1,"params":11,"grads":21,"optimizer":41,"activations":79,"zero_staging":5})");
}

TEST_CASE("mixture_of_experts_statistics_are_summarized_only_for_moe_runs", "[report][moe]") {
  ReportBuilder dense(testing::sample_base({}), 3.0), moe(testing::sample_base({}), 3.0);
  for (int step = 1; step <= 4; ++step) {
    StepRecord rec{step, step * 100, 2.0, 1.0, 1e-3, 0.1, false, false, {}, {}};
    dense.record_step(rec);
    rec.moe_aux_loss = 0.02 + 0.001 * step;
    rec.moe_dropped_fraction = 0.1 * step;  // 0.1, 0.2, 0.3, 0.4
    moe.record_step(rec);
  }
  CHECK_FALSE(to_json(dense.finish("completed", ""))["stability"].contains("moe"));
  const auto j = to_json(moe.finish("completed", ""))["stability"]["moe"];
  CHECK(j["aux_loss_last"].get<double>() == Approx(0.024));
  CHECK(j["dropped_fraction"]["mean"].get<double>() == Approx(0.25));
  CHECK(j["dropped_fraction"]["max"].get<double>() == Approx(0.4));
}

TEST_CASE("a_resumed_run_that_ran_no_step_reports_the_checkpoint_tokens", "[report]") {
  SampleRun s;
  s.world = 2;
  ReportBuilder b(testing::sample_base(s), 3.0);
  b.set_start_tokens(40960);
  const RunReport r = b.finish("failed", "died in its first step");
  CHECK(r.loss.tokens_seen == 40960);
  CHECK(r.run.steps_completed == 0);
  // Two ranks whose step times were not gathered: no straggler figures, and no peaks.
  CHECK_FALSE(r.stragglers.slowest_rank);
  CHECK_FALSE(r.stragglers.slowest_over_median_step_time);
  CHECK_FALSE(r.memory.peak_bytes_per_rank_max);
  const auto j = to_json(r);
  CHECK(j["stragglers"]["slowest_rank"].is_null());
  CHECK(j["memory"]["peak_bytes_per_rank"]["max"].is_null());
}

TEST_CASE("a_resume_that_ran_no_step_takes_the_loss_logged_at_its_checkpoint", "[report]") {
  // A requeue writing a lost report again: the loss and grad norm metrics.jsonl logged at the
  // checkpoint's step, and none when metrics.jsonl has no line at that step (logged every 10,
  // saved at 25).
  for (const bool logged_at_checkpoint : {true, false}) {
    ReportBuilder b(testing::sample_base(SampleRun{}), 3.0);
    b.set_start_tokens(40960);
    EarlierPoints earlier{{{1, 1024, 4.0, 1.5}, {20, 20480, 2.5, 0.75}}, {}};
    if (logged_at_checkpoint) earlier.curve.push_back({40, 40960, 2.25, 0.5});
    b.set_earlier(earlier);
    const RunReport r = b.finish("completed");
    CHECK(r.loss.tokens_seen == 40960);
    CHECK(r.loss.curve.size() == earlier.curve.size());
    if (logged_at_checkpoint) {
      CHECK(r.loss.final_train_loss == 2.25);
      CHECK(r.stability.grad_norm_last == 0.5);
    } else {
      CHECK(std::isnan(r.loss.final_train_loss));
      CHECK(std::isnan(r.stability.grad_norm_last));
    }
  }
}

TEST_CASE("report_is_written_atomically_and_loads_back", "[report]") {
  const fs::path dir = scratch_dir("write");
  const RunReport r = testing::sample_report({});
  const std::string path = write_report(r, dir.string());
  CHECK(path == (dir / "report.json").string());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  INFO("files: " << nlohmann::json(names).dump());
  CHECK(names == std::vector<std::string>{"report.json"});  // no temp file left behind
  const nlohmann::json back = load_report(path);
  CHECK(back["loss"]["tokens_seen"] == r.loss.tokens_seen);
  CHECK(back["throughput"]["tokens_per_second"].get<double>() ==
        Approx(r.throughput.tokens_per_second));
  fs::remove_all(dir);
}

// A run name or data path in Latin-1 (file names are bytes, not UTF-8) must not lose the report.
TEST_CASE("report_with_non_utf8_text_is_still_written", "[report]") {
  const fs::path dir = scratch_dir("latin1");
  RunReport r = testing::sample_report({});
  r.run.name = "d\xe9j\xe0";
  const std::string path = write_report(r, dir.string());
  const nlohmann::json back = load_report(path);
  CHECK(back["run"]["name"] == "d\xef\xbf\xbdj\xef\xbf\xbd");  // each bad byte became U+FFFD
  fs::remove_all(dir);
}

TEST_CASE("load_report_rejects_missing_bad_and_foreign_files_naming_them", "[report]") {
  const fs::path dir = scratch_dir("load");
  const std::string missing = (dir / "nope.json").string();
  const std::string bad = (dir / "bad.json").string();
  const std::string foreign = (dir / "foreign.json").string();
  std::ofstream(bad) << "{ not json";
  std::ofstream(foreign) << R"({"schema": "other/2"})";
  for (const std::string& p : {missing, bad, foreign}) {
    INFO("file " << p);
    CHECK_THROWS_AS(load_report(p), trainer::config::ConfigError);
    CHECK_THROWS_WITH(load_report(p), Catch::Contains(p));
  }
  // a directory: a run's out_dir gives its report.json; one without it says so
  CHECK_THROWS_WITH(load_report(dir.string()),
                    Catch::Contains("a directory without a report.json"));
  fs::copy_file(foreign, dir / "report.json");
  CHECK_THROWS_WITH(load_report(dir.string()), Catch::Contains("schema is not"));
  // a pipe is refused, not read (the read would wait for a writer forever)
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_report(fifo), Catch::Contains("is not a regular file"));
  fs::remove_all(dir);
}

TEST_CASE("skeleton_resolves_dp_auto_and_batch_from_config", "[report]") {
  trainer::config::RunConfig cfg;
  cfg.parallel.dp = 0;
  cfg.parallel.tp = 2;
  RunContext ctx;
  ctx.world_size = 8;
  ctx.peak = {100, "config"};
  const RunReport r = report_skeleton(cfg, ctx);
  CHECK(r.parallel.dp == 4);
  CHECK(r.batch.global_batch_sequences ==
        int64_t(cfg.train.micro_batch) * cfg.train.grad_accum * 4);
  CHECK(r.batch.tokens_per_step == r.batch.global_batch_sequences * cfg.model.seq_len);
  CHECK(r.model.params == count_params(model_dims(cfg.model)).total);
  CHECK(r.hardware.peak_source == "config");
  CHECK(r.hardware.device_count == 8);
  // The config as it ran, every key: dp as configured ("auto"), the rest typed.
  const nlohmann::json j = nlohmann::json::parse(to_json(r).dump());
  CHECK(j["config"]["parallel"]["dp"] == "auto");
  CHECK(j["config"]["parallel"]["tp"] == 2);
  CHECK(j["config"]["train"]["lr"] == cfg.train.lr);
  CHECK(j["config"]["model"]["moe"]["capacity_factor"] == cfg.model.moe.capacity_factor);
  size_t keys = 0;
  std::function<void(const nlohmann::json&)> count = [&](const nlohmann::json& node) {
    if (!node.is_object()) return void(++keys);
    for (const auto& child : node) count(child);
  };
  count(j["config"]);
  CHECK(keys == trainer::config::config_fields().size());
}

// The backend's kernel choices (Backend::kernels) reach report.json's hardware.kernels, so that
// two runs of one config with different kernels (TRAINER_ATTENTION, ...) say so.
TEST_CASE("report_names_the_kernels_the_backend_chose", "[report]") {
  trainer::config::RunConfig cfg;
  RunContext ctx;
  ctx.kernels = {{"attention", "cudnn (cuDNN 91900: 48 calls; 0 refused, run by tensor_core)"},
                 {"gemm", "cuBLASLt, the heuristic's first algorithm"}};
  const nlohmann::json j = to_json(report_skeleton(cfg, ctx));
  CHECK(j["hardware"]["kernels"]["attention"] ==
        "cudnn (cuDNN 91900: 48 calls; 0 refused, run by tensor_core)");
  CHECK(j["hardware"]["kernels"]["gemm"] == "cuBLASLt, the heuristic's first algorithm");
  CHECK(j["hardware"]["kernels"].size() == 2);
  const nlohmann::json none = to_json(report_skeleton(cfg, RunContext{}));
  CHECK(none["hardware"]["kernels"].is_object());  // the cpu backend has no choices: {}
  CHECK(none["hardware"]["kernels"].empty());
}

// The report states what the run does: no pipeline (pp 1) has no schedule or microbatches, no
// tensor parallelism (tp 1) no sequence parallelism, whatever the config's defaults say.
TEST_CASE("skeleton_reports_pipeline_and_sequence_parallel_only_where_they_apply", "[report]") {
  trainer::config::RunConfig cfg;
  cfg.parallel.sequence_parallel = true;
  cfg.parallel.pipeline.microbatches = 4;
  RunContext ctx;
  ctx.world_size = 4;
  RunReport r = report_skeleton(cfg, ctx);
  CHECK_FALSE(r.parallel.sequence_parallel);
  CHECK(r.parallel.pipeline_schedule == "none");
  CHECK(r.parallel.microbatches == 1);
  cfg.parallel.tp = 2;
  cfg.parallel.pp = 2;
  r = report_skeleton(cfg, ctx);
  CHECK(r.parallel.sequence_parallel);
  CHECK(r.parallel.pipeline_schedule == cfg.parallel.pipeline.schedule);
  CHECK(r.parallel.microbatches == 4);
}
