// "Did you mean ...?": the nearest spelling to a mistyped option, key or name.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace canopy {

// Levenshtein distance: insertions, deletions and substitutions each cost one.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when it is within max_distance edits (the first of equals wins).
std::optional<std::string_view> closest_match(std::string_view word, const std::vector<std::string_view>& candidates,
                                              std::size_t max_distance);

} // namespace canopy
