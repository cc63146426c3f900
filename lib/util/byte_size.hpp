// Sizes in bytes as users write them ("16MiB", "512K", "1048576") and as messages show them ("16 MiB").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace canopy {

// A whole number of bytes, or of K, M, G or T: powers of 1024, as Slurm's --mem and ulimit count, whether written
// K, KB or KiB (any case). No sign, fraction or space inside. The error says what was expected, without a prefix.
Result<std::uint64_t> parse_byte_size(std::string_view text);

// "512 bytes", "16 MiB", "120.5 MiB": the largest unit the size reaches, with one decimal when it is not whole.
std::string format_byte_size(std::uint64_t bytes);

} // namespace canopy
