// Reading a whole input file the user named (a hostfile, a timing report, a stage manifest or record) with one
// error line instead of an exception, a hang or an allocation without bound: a directory, a file larger than its
// kind should be, or a device that never ends (/dev/zero) is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "util/result.hpp"

namespace canopy {

// `what` names the kind of file in errors ("hostfile", "stage manifest"); pipes and regular files are read,
// up to `max_bytes`.
Result<std::string> read_file(const std::string& path, std::size_t max_bytes, const char* what);

// Fills `out` from `fd` at `offset`; returns how many bytes it read, fewer only at the end of the file or on an
// error (errno says which).
std::size_t read_at(int fd, std::uint64_t offset, std::span<std::uint8_t> out);

} // namespace canopy
