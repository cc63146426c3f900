// When a daemon starts the PMIx server for its ranks: --pmix on|eager|off, [job] pmix.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace canopy {

enum class PmixMode : std::uint8_t {
    off = 0,
    // Ranks get the server's address at spawn; the server starts when the first rank connects (or another node
    // asks this one for a rank's data), so jobs that never use PMIx never pay for it.
    on_demand = 1,
    // The server starts before the ranks and they connect to it directly, with no relay in between.
    eager = 2,
};

// The --pmix spellings: "on" (on demand), "eager", "off".
inline std::optional<PmixMode> parse_pmix_mode(std::string_view text)
{
    if (text == "on")
        return PmixMode::on_demand;
    if (text == "eager")
        return PmixMode::eager;
    if (text == "off")
        return PmixMode::off;
    return std::nullopt;
}

} // namespace canopy
