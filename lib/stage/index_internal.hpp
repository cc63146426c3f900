// What the stage index's own files (index*.cpp) share; nothing else includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stage/index.hpp"

namespace canopy::stage {

// What the filesystem says about one path now (mirror: its realpath, when the followed view exists).
using Probe = KnownPath;

// The path normalised as the interposer does; empty if it is not absolute or too long.
std::string normalize(std::string_view path);

std::uint64_t checksum(const unsigned char* data, std::size_t n);

EntryInfo info_of(const canopy_stage_view& v, const canopy_stage_entry& e);

} // namespace canopy::stage
