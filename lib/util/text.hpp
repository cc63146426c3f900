// Small text helpers shared by the parsers (hostlists, hostfiles, CPU lists).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

bool is_space(char c);
bool is_digit(char c);
std::string_view trim(std::string_view text);

// A plain decimal number (digits only, at most max_digits of them), or nothing.
std::optional<long> parse_decimal(std::string_view digits, std::size_t max_digits);

// The non-empty items of a comma-separated list ("a,,b" is a and b).
std::vector<std::string> split_commas(std::string_view text);

// A line split into words as a shell would, without expanding anything: blanks separate words, 'single quotes'
// keep everything, "double quotes" keep all but \" and \\, and a backslash outside quotes keeps the next character.
// An unclosed quote is an error.
Result<std::vector<std::string>> split_shell_words(std::string_view line);

} // namespace canopy
