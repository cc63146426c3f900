// The timing report's line layout, shared by the table, the comparison and the JSON reader; nothing else includes it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace canopy::timing {

inline constexpr std::size_t max_columns = 100;

// Cuts text to width, marking the cut, so no line exceeds the terminal budget.
std::string fit(std::string text, std::size_t width);

// Counts ("..._messages") are shown as numbers, everything else as times.
std::string format_value(std::string_view phase, double value);

std::size_t name_width(std::size_t longest, std::size_t header);

void append_line(std::string& out, std::string line);

} // namespace canopy::timing
