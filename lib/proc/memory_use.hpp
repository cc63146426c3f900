// This process's resident memory and its peak, from /proc/self/status, for reports of what a step cost.
#pragma once

#include <cstdint>
#include <optional>

namespace canopy {

struct MemoryUse {
    std::uint64_t resident_bytes = 0;   // VmRSS
    std::uint64_t peak_bytes = 0;       // VmHWM: the most resident since start, or since reset_peak_memory()
};

std::optional<MemoryUse> read_memory_use();
// Makes the peak the current resident size (Linux's clear_refs "5"), so the next peak is that of what follows.
// False where the kernel does not allow it: the peak is then the process's whole life's.
bool reset_peak_memory();

} // namespace canopy
