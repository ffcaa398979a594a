#include "runtime/config/data_paths.h"

#include <glob.h>

#include <filesystem>
#include <set>

namespace trainer::config {

std::vector<std::string> data_paths(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return {spec};
  glob_t matches{};
  std::vector<std::string> paths;
  if (::glob(spec.c_str(), 0, nullptr, &matches) == 0)
    paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  return paths;
}

std::vector<std::string> shared_data_files(const std::string& train, const std::string& val) {
  if (train.starts_with("synthetic:") || val.starts_with("synthetic:")) return {};
  std::error_code ec;
  std::set<std::filesystem::path> trained;
  for (const std::string& p : data_paths(train))
    trained.insert(std::filesystem::weakly_canonical(p, ec));
  std::vector<std::string> shared;
  for (const std::string& p : data_paths(val))
    if (trained.count(std::filesystem::weakly_canonical(p, ec)) > 0) shared.push_back(p);
  return shared;
}

}  // namespace trainer::config
