#include "runtime/config/assign.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "runtime/config/field_value.h"

namespace trainer::config {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};

// Whole-string parse with std::from_chars (which rejects a leading '+', so skip it here).
template <class T>
std::optional<T> parse_whole(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  T value{};
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

std::string expected_type(const Field& f) {
  const std::string or_auto = f.special == Special::auto_is_zero ? " or auto" : "";
  return std::visit(
      Overloaded{[&](IntField) { return "an integer" + or_auto; },
                 [&](U64Field) { return std::string("a non-negative integer"); },
                 [&](DoubleField) {
                   return "a finite number" + or_auto +
                          (f.special == Special::null_is_infinite ? " or null" : "");
                 },
                 [&](BoolField) { return std::string("true or false (or yes/no, on/off)"); },
                 [&](StringField) {
                   return std::string(f.special == Special::null_is_empty ? "a string or null"
                                                                          : "a string");
                 }},
      f.ref);
}

// An integer too large for the field's type: from_chars says out of range, not malformed.
std::optional<std::string> integer_range_of(const Field& f, const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  const size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  if (digits == text.size() || text.find_first_not_of("0123456789", digits) != std::string::npos)
    return std::nullopt;
  if (std::holds_alternative<IntField>(f.ref)) {
    const std::string largest = std::to_string(std::numeric_limits<int>::max());
    if (std::isfinite(f.range.hi)) return "an integer " + f.range.describe();  // the key's range
    if (std::isfinite(f.range.lo)) return "an integer " + f.range.describe() + ", up to " + largest;
    return "an integer from " + std::to_string(std::numeric_limits<int>::min()) + " to " + largest;
  }
  if (std::holds_alternative<U64Field>(f.ref))
    return "a non-negative integer up to " + std::to_string(std::numeric_limits<uint64_t>::max());
  return std::nullopt;
}

// A number past a double's range (1e400, or 1e-400 below its smallest): from_chars says out of
// range, which "a finite number" would misname for the small ones.
std::optional<std::string> double_range_of(const Field& f, const YAML::Node& node) {
  if (!std::holds_alternative<DoubleField>(f.ref) || !node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != ERANGE) return std::nullopt;
  if (std::abs(v) <= std::numeric_limits<double>::min())
    return "a number within a double's range: this one is below its smallest, about 2.2e-308 "
           "(write 0)";
  return "a number within a double's range: this one is past its largest, about 1.8e308";
}

[[noreturn]] void type_error(const Field& f, const YAML::Node& node) {
  std::optional<std::string> range = integer_range_of(f, node);
  if (!range) range = double_range_of(f, node);
  fail_key(f.key, f.key + " = " + describe_node(node) + ": expected " +
                      (range ? *range : expected_type(f)));
}

// Stores a scalar's text into the field; false when it does not convert.
bool store_scalar(RunConfig& cfg, const Field& f, const YAML::Node& node) {
  const std::string& text = node.Scalar();
  return std::visit(Overloaded{[&](IntField r) {
                                 auto v = parse_whole<int>(text);
                                 if (v) r(cfg) = *v;
                                 return v.has_value();
                               },
                               [&](U64Field r) {
                                 auto v = parse_whole<uint64_t>(text);
                                 if (v) r(cfg) = *v;
                                 return v.has_value();
                               },
                               [&](DoubleField r) {
                                 auto v = parse_whole<double>(text);
                                 if (v && std::isfinite(*v)) r(cfg) = *v;
                                 return v && std::isfinite(*v);
                               },
                               [&](BoolField r) {
                                 bool b = false;  // yaml-cpp accepts true/false/yes/no/on/off
                                 const bool ok = YAML::convert<bool>::decode(node, b);
                                 if (ok) r(cfg) = b;
                                 return ok;
                               },
                               [&](StringField r) {
                                 r(cfg) = text;
                                 return true;
                               }},
                    f.ref);
}

void set_to_zero(RunConfig& cfg, const Field& f) {
  std::visit(Overloaded{[&](IntField r) { r(cfg) = 0; }, [&](DoubleField r) { r(cfg) = 0; },
                        [&](StringField r) { r(cfg).clear(); }, [](auto) {}},
             f.ref);
}

}  // namespace

std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsMap()) return "<mapping>";
  if (node.IsSequence()) return "<sequence>";
  return quote(node.Scalar());
}

void assign_field(RunConfig& cfg, const Field& f, const YAML::Node& node) {
  if (f.special == Special::null_is_empty && node.IsNull()) return set_to_zero(cfg, f);
  if (f.special == Special::null_is_infinite && node.IsNull()) {
    std::get<DoubleField>(f.ref)(cfg) = std::numeric_limits<double>::infinity();
    return;
  }
  if (!node.IsScalar()) type_error(f, node);
  if (f.special == Special::auto_is_zero && node.Scalar() == "auto") return set_to_zero(cfg, f);
  if (!store_scalar(cfg, f, node)) type_error(f, node);
}

}  // namespace trainer::config
