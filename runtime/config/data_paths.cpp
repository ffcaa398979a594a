#include "runtime/config/data_paths.h"

#include <glob.h>

#include <filesystem>

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

}  // namespace trainer::config
