// Data sources: a built-in synthetic source or llm.c token shards by path or glob.
#include <string>
#include <vector>

#include "runtime/config/data_paths.h"
#include "runtime/config/did_you_mean.h"
#include "runtime/config/field_value.h"
#include "runtime/config/validate_internal.h"

namespace trainer::config {
namespace {

const std::vector<std::string> kSyntheticSources = {"synthetic:markov", "synthetic:uniform"};

void check_source(const std::string& key, const std::string& source) {
  if (source.empty()) fail(key + " = \"\": expected synthetic:markov or a token shard path / glob");
  if (source.starts_with("synthetic:")) {
    for (const std::string& s : kSyntheticSources)
      if (source == s) return;
    std::string msg = key + " = " + quote(source) +
                      ": unknown synthetic source (allowed: " + join(kSyntheticSources) + ")";
    if (auto hint = closest_match(source, kSyntheticSources))
      msg += "; did you mean '" + *hint + "'?";
    fail(msg);
  }
  if (data_paths(source).empty())
    fail(key + " = " + quote(source) + ": no file matches this path (expected llm.c token shards " +
         "or one of " + join(kSyntheticSources) + ")");
}

}  // namespace

void validate_data_sources(const RunConfig& cfg) {
  check_source("data.train", cfg.data.train);
  // Val data is read only by evals (README: it is not opened with train.eval_every 0).
  if (cfg.train.eval_every <= 0) return;
  check_source("data.val", cfg.data.val);
  // (data.val's default is synthetic: a run that sets only data.train would evaluate on it)
  if (!cfg.data.train.starts_with("synthetic:") && cfg.data.val.starts_with("synthetic:"))
    fail("data.val = " + quote(cfg.data.val) + " while data.train = " + quote(cfg.data.train) +
         " (token shards): each eval would measure the synthetic source, not held-out data of "
         "yours. Set data.val to validation shards (trainer data prepare writes val_*.bin "
         "beside train_*.bin), or train.eval_every = 0 for no evals");
}

}  // namespace trainer::config
