// YAML text and --set overrides -> RunConfig, walking the key table in schema.h.
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/config/assign.h"
#include "runtime/config/did_you_mean.h"
#include "runtime/config/field_value.h"
#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"

namespace trainer::config {
namespace {

std::string join_path(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

[[noreturn]] void unknown_key(const std::string& section, const std::string& key) {
  const std::vector<std::string> known = section_children(section);
  std::string msg = "unknown key '" + join_path(section, key) + "'";
  if (key == "<<")  // (yaml-cpp leaves YAML 1.1's merge key as a plain key)
    fail(msg + ": YAML merge keys (<<: *anchor) are not read; write the keys out");
  if (auto hint = closest_match(key, known))
    msg += " (did you mean '" + join_path(section, *hint) + "'?)";
  else
    msg += " (" + (section.empty() ? "sections" : "keys of " + section) + ": " + join(known) + ")";
  fail(msg);
}

// Applies `node` at `path`: a field takes a value, a section takes a mapping of its keys.
// `assigned` (a document's fields so far; null for --set, which may override) catches a field
// given twice in two spellings, e.g. "train.lr: 1" beside "train: {lr: 2}".
void apply_node(RunConfig& cfg, const std::string& path, const YAML::Node& node,
                std::set<std::string>* assigned) {
  if (const Field* field = find_field(path)) {
    if (assigned && !assigned->insert(path).second)
      fail("'" + path + "' is given twice; each key may appear once");
    return assign_field(cfg, *field, node);
  }
  if (node.IsNull()) return;  // an empty section keeps its defaults
  if (!node.IsMap()) {
    if (path.empty())
      fail("the document must be a mapping of sections, got " + describe_node(node));
    fail(path + " = " + describe_node(node) + ": expected a mapping of " + path + "'s keys (" +
         join(section_children(path)) + ")");
  }
  std::set<std::string> seen;  // yaml-cpp keeps every duplicate; the last would silently win
  for (const auto& entry : node) {
    if (!entry.first.IsScalar())
      fail((path.empty() ? "top level" : path) + ": keys must be plain names");
    const std::string key = entry.first.Scalar();
    if (key.empty())  // join_path("", "") is "", the document itself: it would apply silently
      fail((path.empty() ? "top level" : path) + ": an empty key (\"\") is not a config key");
    const std::string child = join_path(path, key);
    if (!find_field(child) && !is_section(child)) unknown_key(path, key);
    if (!seen.insert(key).second)
      fail("'" + child + "' is given twice (line " + std::to_string(entry.first.Mark().line + 1) +
           "); each key may appear once");
    apply_node(cfg, child, entry.second, assigned);
  }
}

// A --set value is a YAML scalar; text YAML cannot read (e.g. "*.bin") is taken as a string.
YAML::Node parse_override_value(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception&) {
    return YAML::Node(text);
  }
}

// All keys and sections, for did-you-mean on a full dotted path.
std::vector<std::string> all_paths() {
  std::vector<std::string> paths;
  for (const Field& f : config_fields()) {
    paths.push_back(f.key);
    for (size_t dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1))
      paths.push_back(f.key.substr(0, dot));
  }
  return paths;
}

// A ConfigError's text without its "config: ".
std::string without_prefix(const ConfigError& e) {
  const std::string what = e.what();
  return what.rfind("config: ", 0) == 0 ? what.substr(8) : what;
}

constexpr const char* kSetMark = "--set '";
std::string set_prefix(const std::string& assignment) {
  return kSetMark + assignment + "': ";
}

// `fields` receives the fields this override assigned (one, or a section's several).
void apply_override(RunConfig& cfg, const std::string& assignment, std::set<std::string>* fields) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    fail("--set '" + assignment + "': expected key.path=value (e.g. train.lr=1e-3)");
  const std::string key = assignment.substr(0, eq);
  if (key.empty() || (!find_field(key) && !is_section(key))) {
    std::string msg = "--set '" + assignment + "': unknown key '" + key + "'";
    if (auto hint = closest_match(key, all_paths()))
      msg += " (did you mean '" + *hint + "'?)";
    else
      msg += " (keys are section.key; sections: " + join(section_children("")) + ")";
    fail(msg);
  }
  try {
    apply_node(cfg, key, parse_override_value(assignment.substr(eq + 1)), fields);
  } catch (const ConfigError& e) {
    fail_key(e.key, set_prefix(assignment) + without_prefix(e));
  }
}

// check_fields on a field an override set (also through a section: --set 'train={lr: -1}'):
// the message names the --set, not the file. `set_by`: each such field's last --set.
void check_fields_naming_overrides(const RunConfig& cfg,
                                   const std::map<std::string, std::string>& set_by) {
  try {
    check_fields(cfg);
  } catch (const ConfigError& e) {
    if (auto it = set_by.find(e.key); it != set_by.end())
      fail_key(e.key, set_prefix(it->second) + without_prefix(e));
    throw;
  }
}

// The one YAML document of a config (null for empty text).
YAML::Node load_document(const std::string& yaml_text) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(yaml_text);
  } catch (const YAML::Exception& e) {
    fail("YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
         std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (documents.size() > 1)
    fail("the text holds " + std::to_string(documents.size()) +
         " YAML documents (separated by ---); a run config is one document");
  return documents.empty() ? YAML::Node() : documents.front();
}

}  // namespace

RunConfig parse_config(const std::string& yaml_text, const std::vector<std::string>& overrides) {
  RunConfig cfg;
  std::set<std::string> assigned;
  apply_node(cfg, "", load_document(yaml_text), &assigned);
  std::map<std::string, std::string> set_by;  // field -> the last --set that assigned it
  for (const std::string& assignment : overrides) {
    std::set<std::string> fields;
    apply_override(cfg, assignment, &fields);
    for (const std::string& f : fields) set_by[f] = assignment;
  }
  check_fields_naming_overrides(cfg, set_by);
  return cfg;
}

RunConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  if (path == "-") return parse_config(embedded_default_yaml(), overrides);
  std::error_code ec;  // (a loop of links or a name too long: the open below says which)
  if (std::filesystem::is_directory(path, ec))
    fail("config file '" + path + "' is a directory; expected a YAML run config");
  std::ifstream in(path);
  if (!in) fail("cannot read config file '" + path + "': " + std::strerror(errno));
  // Read to its end, or to a size no run config has (a device like /dev/zero has no end).
  constexpr size_t kMaxConfigBytes = 16 << 20;
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      fail("config file '" + path + "' is larger than 16 MiB; expected a YAML run config");
  }
  try {
    // An empty file is more likely a mistake than a request for every default (`-` is that).
    if (load_document(text).IsNull())
      fail(
          "the file is empty; expected a mapping of sections (model, train, ...), or `-` for "
          "the embedded default");
    return parse_config(text, overrides);
  } catch (const ConfigError& e) {
    // Keep the "config: " prefix, add the file: "config: runs/a.yaml: train.lr = ..."; a --set
    // the error is about is named instead.
    if (without_prefix(e).rfind(kSetMark, 0) == 0) throw;
    throw ConfigError("config: " + path + ": " + without_prefix(e), e.key);
  }
}

}  // namespace trainer::config
