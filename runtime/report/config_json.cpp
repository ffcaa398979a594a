#include "runtime/report/config_json.h"

#include <sstream>
#include <type_traits>

#include "runtime/config/field_value.h"
#include "runtime/config/schema.h"

namespace trainer::report {
namespace {

using ojson = nlohmann::ordered_json;

ojson scalar_json(const config::FieldScalar& v) {
  return std::visit(
      [](const auto& x) -> ojson {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>)
          return nullptr;
        else
          return x;
      },
      v);
}

void flatten(const nlohmann::json& node, const std::string& path,
             std::map<std::string, std::string>& out) {
  if (node.is_object()) {
    for (const auto& [name, child] : node.items())
      flatten(child, path.empty() ? name : path + "." + name, out);
    return;
  }
  out[path] = node.is_string() ? node.get<std::string>() : node.dump();
}

}  // namespace

ojson config_json(const config::RunConfig& cfg) {
  ojson j = ojson::object();
  for (const config::Field& f : config::config_fields()) {
    ojson* at = &j;
    std::stringstream parts(f.key);
    std::string part, next;
    std::getline(parts, part, '.');
    while (std::getline(parts, next, '.')) {  // `part` is a section
      at = &(*at)[part];
      part = next;
    }
    (*at)[part] = scalar_json(config::field_scalar(cfg, f));
  }
  return j;
}

std::map<std::string, std::string> flat_config(const nlohmann::json& report) {
  std::map<std::string, std::string> out;
  if (report.contains("config") && report["config"].is_object()) flatten(report["config"], "", out);
  return out;
}

}  // namespace trainer::report
