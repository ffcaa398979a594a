#include "runtime/dist/slurm_nodelist.h"

#include <cctype>
#include <string_view>

namespace trainer::dist {
namespace {

[[noreturn]] void fail(const std::string& list, const std::string& why) {
  throw SlurmSyntaxError("bad Slurm host list '" + list + "': " + why);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& s, const std::string& whole) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) fail(whole, "']' without '['");
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) fail(whole, "'[' without ']'");
  parts.push_back(cur);
  return parts;
}

std::string pad(unsigned long long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// "01-04,07" -> {"01", "02", "03", "04", "07"}
std::vector<std::string> expand_ranges(const std::string& body, const std::string& whole) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    std::string item = body.substr(start, comma - start);
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) fail(whole, "bad range '" + item + "'");
    if (lo.size() > 18 || hi.size() > 18) fail(whole, "number too large in '" + item + "'");
    unsigned long long a = std::stoull(lo), b = std::stoull(hi);
    if (b < a) fail(whole, "descending range '" + item + "'");
    if (b - a > 1000000) fail(whole, "range too large '" + item + "'");
    for (unsigned long long v = a; v <= b; ++v) out.push_back(pad(v, lo.size()));
    start = comma + 1;
  }
  return out;
}

// One host pattern with any number of bracket groups: cartesian product, first group slowest.
std::vector<std::string> expand_pattern(const std::string& pat, const std::string& whole) {
  std::vector<std::string> hosts{""};
  size_t i = 0;
  while (i < pat.size()) {
    size_t open = pat.find('[', i);
    std::string literal = pat.substr(i, open == std::string::npos ? std::string::npos : open - i);
    for (auto& h : hosts) h += literal;
    if (open == std::string::npos) break;
    size_t close = pat.find(']', open);
    if (close == std::string::npos) fail(whole, "'[' without ']'");
    std::vector<std::string> next;
    for (const auto& h : hosts)
      for (const auto& v : expand_ranges(pat.substr(open + 1, close - open - 1), whole))
        next.push_back(h + v);
    hosts = std::move(next);
    i = close + 1;
  }
  return hosts;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  if (nodelist.empty()) fail(nodelist, "empty");
  std::vector<std::string> hosts;
  for (const auto& pat : split_top_level(nodelist, nodelist)) {
    if (pat.empty()) fail(nodelist, "empty host name");
    for (auto& h : expand_pattern(pat, nodelist)) hosts.push_back(std::move(h));
  }
  return hosts;
}

std::string first_slurm_host(const std::string& nodelist) {
  return expand_slurm_nodelist(nodelist).front();
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> counts;
  for (const auto& item : split_top_level(spec, spec)) {
    size_t paren = item.find("(x");
    std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')') fail(spec, "bad repeat '" + item + "'");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat)) fail(spec, "bad tasks-per-node '" + item + "'");
    // (a node runs at most a few hundred tasks; a job has at most a few hundred thousand nodes)
    if (count.size() > 6 || repeat.size() > 6) fail(spec, "number too large in '" + item + "'");
    counts.insert(counts.end(), std::stoul(repeat), std::stoi(count));
  }
  return counts;
}

}  // namespace trainer::dist
