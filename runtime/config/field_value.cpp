#include "runtime/config/field_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/config/did_you_mean.h"

namespace trainer::config {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};

// Accessors take a mutable config so that one table serves reading and writing; reading
// through them never modifies it.
RunConfig& readable(const RunConfig& cfg) {
  return const_cast<RunConfig&>(cfg);
}

bool is_zero_special(const Field& f, const RunConfig& cfg) {
  if (f.special != Special::auto_is_zero) return false;
  return std::visit(Overloaded{[&](IntField r) { return r(readable(cfg)) == 0; },
                               [&](DoubleField r) { return r(readable(cfg)) == 0.0; },
                               [](auto) { return false; }},
                    f.ref);
}

// The value as a number, for range checks; nullopt for non-numeric fields.
std::optional<double> numeric_value(const RunConfig& cfg, const Field& f) {
  return std::visit(
      Overloaded{[&](IntField r) -> std::optional<double> { return r(readable(cfg)); },
                 [&](U64Field r) -> std::optional<double> {
                   return static_cast<double>(r(readable(cfg)));
                 },
                 [&](DoubleField r) -> std::optional<double> { return r(readable(cfg)); },
                 [](auto) -> std::optional<double> { return std::nullopt; }},
      f.ref);
}

// The bare value (no quotes) compared against an enumeration's choices.
std::string choice_text(const RunConfig& cfg, const Field& f) {
  return std::visit(Overloaded{[&](IntField r) { return std::to_string(r(readable(cfg))); },
                               [&](StringField r) { return r(readable(cfg)); },
                               [&](auto) { return field_text(cfg, f); }},
                    f.ref);
}

}  // namespace

void fail(const std::string& message) {
  throw ConfigError("config: " + message);
}

void fail_key(const std::string& key, const std::string& message) {
  throw ConfigError("config: " + message, key);
}

std::string format_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf / nan stay as is
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\', out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string field_text(const RunConfig& cfg, const Field& f) {
  if (is_zero_special(f, cfg)) return "auto";
  return std::visit(
      Overloaded{[&](IntField r) { return std::to_string(r(readable(cfg))); },
                 [&](U64Field r) { return std::to_string(r(readable(cfg))); },
                 [&](DoubleField r) {
                   const double v = r(readable(cfg));
                   if (std::isinf(v) && v > 0 && f.special == Special::null_is_infinite)
                     return std::string("null");
                   return format_number(v);
                 },
                 [&](BoolField r) -> std::string { return r(readable(cfg)) ? "true" : "false"; },
                 [&](StringField r) {
                   const std::string& s = r(readable(cfg));
                   if (s.empty() && f.special == Special::null_is_empty) return std::string("null");
                   return quote(s);
                 }},
      f.ref);
}

FieldScalar field_scalar(const RunConfig& cfg, const Field& f) {
  const std::string text = field_text(cfg, f);  // (a string field's text is quoted)
  if (text == "auto") return std::string("auto");
  if (text == "null") return std::monostate{};
  return std::visit(Overloaded{[&](IntField r) -> FieldScalar { return int64_t{r(readable(cfg))}; },
                               [&](U64Field r) -> FieldScalar { return r(readable(cfg)); },
                               [&](DoubleField r) -> FieldScalar { return r(readable(cfg)); },
                               [&](BoolField r) -> FieldScalar { return r(readable(cfg)); },
                               [&](StringField r) -> FieldScalar { return r(readable(cfg)); }},
                    f.ref);
}

void check_field(const RunConfig& cfg, const Field& f) {
  if (!f.choices.empty()) {
    const std::string value = choice_text(cfg, f);
    if (std::find(f.choices.begin(), f.choices.end(), value) != f.choices.end()) return;
    std::string msg = f.key + " = " + field_text(cfg, f) + ": must be one of " + join(f.choices);
    // (no spelling hint for a number: 4 is not a misspelt 0)
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && end == value.c_str() + value.size();
    if (auto hint = closest_match(value, f.choices); hint && !number)
      msg += " (did you mean '" + *hint + "'?)";
    fail_key(f.key, msg);
  }
  if (is_zero_special(f, cfg)) return;
  if (auto v = numeric_value(cfg, f); v && !f.range.contains(*v))
    fail_key(f.key, f.key + " = " + field_text(cfg, f) + ": must be " + f.range.describe() +
                        (f.special == Special::auto_is_zero       ? " or auto (also written 0)"
                         : f.special == Special::null_is_infinite ? " or null"
                                                                  : ""));
}

void check_fields(const RunConfig& cfg) {
  for (const Field& f : config_fields()) check_field(cfg, f);
}

}  // namespace trainer::config
