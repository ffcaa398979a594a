#pragma once
// Suggestions for misspelt keys and values: the closest candidate by edit distance.
#include <optional>
#include <string>
#include <vector>

namespace trainer::config {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, if it is near enough to be a plausible typo
// (distance <= max(2, |word| / 3)); ties go to the earlier candidate.
std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates);

// "a, b, c"
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace trainer::config
