// This process's resident memory and its peak.
#include "proc/memory_use.hpp"

#include <fstream>
#include <string>

namespace canopy {

std::optional<MemoryUse> read_memory_use()
{
    std::ifstream status("/proc/self/status");
    MemoryUse use;
    int found = 0;
    for (std::string line; std::getline(status, line);) {
        bool rss = line.starts_with("VmRSS:"), hwm = line.starts_with("VmHWM:");
        if (!rss && !hwm)
            continue;
        std::uint64_t kib = std::stoull(line.substr(6));   // "VmRSS:    1234 kB"
        (rss ? use.resident_bytes : use.peak_bytes) = kib * 1024;
        ++found;
    }
    if (found < 2)
        return std::nullopt;
    return use;
}

bool reset_peak_memory()
{
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    return static_cast<bool>(clear);
}

} // namespace canopy
