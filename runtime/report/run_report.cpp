#include "runtime/report/run_report.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/config/run_config.h"
#include "runtime/core/atomic_file.h"

namespace trainer::report {
namespace {

using ojson = nlohmann::ordered_json;

template <typename T>
ojson or_null(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

ojson resumes_json(const std::vector<RunResume>& resumes) {
  ojson j = ojson::array();
  for (const RunResume& r : resumes)
    j.push_back({{"at_step", r.at_step}, {"world_size", r.world_size}, {"changes", r.changes}});
  return j;
}

ojson run_json(const RunInfo& r) {
  ojson j{{"name", r.name},
          {"config_sha256", r.config_sha256},
          {"run_id", r.run_id.empty() ? ojson(nullptr) : ojson(r.run_id)},
          {"seed", r.seed},
          {"git_rev", r.git_rev.empty() ? build_git_rev() : r.git_rev},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at.empty() ? ojson(nullptr) : ojson(r.finished_at)},
          {"status", r.status},
          {"resumed_from_step", or_null(r.resumed_from_step)},
          {"resumes", resumes_json(r.resumes)},
          {"steps_planned", r.steps_planned},
          {"steps_completed", r.steps_completed},
          {"steps_run", r.steps_run}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

ojson hardware_json(const HardwareInfo& h) {
  return {{"device_type", h.device_type},
          {"device_name", h.device_name},
          {"device_count", h.device_count},
          {"nodes", h.nodes},
          {"peak_tflops_per_device", h.peak_tflops_per_device},
          {"peak_source", h.peak_source},
          {"kernels", h.kernels}};
}

ojson parallel_json(const ParallelInfo& p) {
  return {{"world_size", p.world_size},
          {"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"zero_stage", p.zero_stage},
          {"sequence_parallel", p.sequence_parallel},
          {"pipeline_schedule", p.pipeline_schedule},
          {"microbatches", p.microbatches},
          {"virtual_stages", p.virtual_stages},
          {"activation_checkpointing", p.activation_checkpointing},
          {"precision", p.precision}};
}

ojson batch_json(const BatchInfo& b) {
  return {{"micro_batch", b.micro_batch},
          {"grad_accum", b.grad_accum},
          {"seq_len", b.seq_len},
          {"global_batch_sequences", b.global_batch_sequences},
          {"tokens_per_step", b.tokens_per_step}};
}

ojson model_json(const ModelInfo& m) {
  ojson j = {{"arch", m.arch},
             {"params", m.params},
             {"non_embedding_params", m.non_embedding_params},
             {"n_layer", m.n_layer},
             {"d_model", m.d_model},
             {"n_head", m.n_head},
             {"vocab_size", m.vocab_size},
             {"padded_vocab_size", m.padded_vocab_size},
             {"flops_per_token", m.flops_per_token}};
  if (m.num_experts > 0) {
    j["num_experts"] = m.num_experts;
    j["top_k"] = m.top_k;
    j["capacity_factor"] =
        std::isinf(m.capacity_factor) ? ojson(nullptr) : ojson(m.capacity_factor);
    j["active_non_embedding_params"] = m.active_non_embedding_params;
  }
  return j;
}

ojson throughput_json(const ThroughputInfo& t) {
  return {{"tokens_per_second", t.tokens_per_second},
          {"tokens_per_second_per_device", t.tokens_per_second_per_device},
          {"tflops_per_device", t.tflops_per_device},
          {"mfu", t.mfu},
          {"step_time_s",
           {{"p50", t.step_time_s.p50}, {"p90", t.step_time_s.p90}, {"max", t.step_time_s.max}}},
          {"warmup_steps_excluded", t.warmup_steps_excluded},
          {"tokens_per_second_basis", t.tokens_per_second_basis},
          {"grad_sync_wait_s", t.grad_sync_wait_s}};
}

ojson breakdown_json(const MemoryBreakdown& b) {
  return {{"params", b.params},
          {"grads", b.grads},
          {"optimizer", b.optimizer},
          {"activations", b.activations},
          {"zero_staging", b.zero_staging}};
}

ojson memory_json(const MemoryInfo& m) {
  ojson by_stage = ojson::array();
  for (size_t s = 0; s < m.breakdown_by_stage.size(); ++s) {
    ojson stage = {{"stage", s}};
    stage.update(breakdown_json(m.breakdown_by_stage[s]));
    by_stage.push_back(stage);
  }
  return {{"peak_bytes_per_rank",
           {{"max", or_null(m.peak_bytes_per_rank_max)},
            {"mean", or_null(m.peak_bytes_per_rank_mean)}}},
          {"breakdown", breakdown_json(m.breakdown)},
          {"breakdown_by_stage", by_stage}};
}

ojson loss_json(const LossInfo& l) {
  ojson j{{"final_train_loss", l.final_train_loss},
          {"tokens_seen", l.tokens_seen},
          {"val_loss", or_null(l.val_loss)},
          {"val_at_tokens", or_null(l.val_at_tokens)}};
  // Built in place: a copy through an initializer list doubled the largest part of the report
  // (a million-step run logged every step has a million points).
  ojson& curve = j["curve"] = ojson::array();
  curve.get_ref<ojson::array_t&>().reserve(l.curve.size());
  for (const auto& [tokens, loss] : l.curve) curve.push_back(ojson::array({tokens, loss}));
  return j;
}

ojson stability_json(const StabilityInfo& s) {
  ojson spikes = ojson::array();
  for (const LossSpike& sp : s.loss_spikes)
    spikes.push_back({{"step", sp.step}, {"loss", sp.loss}, {"ratio", sp.ratio}});
  ojson j = {{"steps_counted", s.steps_counted},
             {"grad_norm", {{"last", s.grad_norm_last}, {"max", s.grad_norm_max}}},
             {"clipped_steps", s.clipped_steps},
             {"loss_spikes", spikes},
             {"nonfinite_steps", s.nonfinite_steps}};
  if (s.moe_aux_loss_last)
    j["moe"] = {{"aux_loss_last", *s.moe_aux_loss_last},
                {"dropped_fraction",
                 {{"mean", s.moe_dropped_fraction_mean.value_or(kUnknown)},
                  {"max", s.moe_dropped_fraction_max.value_or(kUnknown)}}}};
  return j;
}

ojson profile_json(const ProfileInfo& p) {
  ojson phases = ojson::array();
  for (const PhaseTime& t : p.phases)
    phases.push_back({{"name", t.name},
                      {"calls_per_step", t.calls_per_step},
                      {"time_s", t.time_s},
                      {"share", t.share},
                      {"tflops", std::isnan(t.tflops) ? ojson(nullptr) : ojson(t.tflops)}});
  return {{"steps", p.steps},
          {"first_step", p.first_step},
          {"step_time_s", p.step_time_s},
          {"unaccounted_s", p.unaccounted_s},
          {"phases", phases}};
}

}  // namespace

nlohmann::ordered_json to_json(const RunReport& r) {
  ojson j;
  j["schema"] = kReportSchema;
  j["run"] = run_json(r.run);
  j["hardware"] = hardware_json(r.hardware);
  j["parallel"] = parallel_json(r.parallel);
  j["batch"] = batch_json(r.batch);
  j["model"] = model_json(r.model);
  j["throughput"] = throughput_json(r.throughput);
  j["memory"] = memory_json(r.memory);
  j["loss"] = loss_json(r.loss);
  j["stability"] = stability_json(r.stability);
  j["stragglers"] = {
      {"slowest_rank", or_null(r.stragglers.slowest_rank)},
      {"slowest_over_median_step_time", or_null(r.stragglers.slowest_over_median_step_time)}};
  j["data"] = {{"train", r.data.train},
               {"val", or_null(r.data.val)},
               {"val_tokens_per_eval", or_null(r.data.val_tokens_per_eval)},
               {"train_shards_sha256", or_null(r.data.train_shards_sha256)},
               {"val_shards_sha256", or_null(r.data.val_shards_sha256)},
               {"entropy_floor", or_null(r.data.entropy_floor)},
               {"train_tokens_per_pass", or_null(r.data.train_tokens_per_pass)},
               {"passes", or_null(r.data.passes)}};
  if (r.profile) j["profile"] = profile_json(*r.profile);
  if (!r.config.is_null()) j["config"] = r.config;
  return j;
}

std::string write_report(const RunReport& report, const std::string& out_dir) {
  std::filesystem::create_directories(out_dir);
  const std::string path = (std::filesystem::path(out_dir) / "report.json").string();
  // A run name or data path need not be UTF-8 (file names are bytes): replace what is not,
  // rather than lose the report at the end of the run.
  write_file_atomic(
      path, to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return path;
}

nlohmann::json load_report(const std::string& given) {
  std::error_code ec;
  std::string path = given;
  if (std::filesystem::is_directory(given, ec)) {  // a run's out_dir: its report
    path = (std::filesystem::path(given) / "report.json").string();
    if (!std::filesystem::exists(path, ec))
      throw config::ConfigError("report " + given +
                                ": a directory without a report.json (give a run's out_dir or "
                                "its report.json)");
  }
  // (a pipe would block the read until someone writes to it)
  if (const std::string problem = config::input_file_problem(path); !problem.empty())
    throw config::ConfigError("report " + path + ": " + problem);
  std::ifstream in(path);
  if (!in) throw config::ConfigError("report " + path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw config::ConfigError("report " + path + ": not valid JSON");
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kReportSchema)
    throw config::ConfigError("report " + path + ": schema is not " + std::string(kReportSchema));
  return j;
}

std::string now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace trainer::report
