// Which process-management interfaces a job serves (--pmi, [job] pmi), and when a daemon starts the PMIx server
// for its ranks (--pmix on|eager|off, [job] pmix).
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

// The interfaces every node serves its ranks: PMIx (Open MPI, PMIx clients) and simple PMI (PMI-1 and PMI-2 over
// PMI_FD, for MPICH, Intel MPI and MVAPICH). A rank sees variables only for what is served.
enum class PmiInterfaces : std::uint8_t { none = 0, pmix = 1, simple = 2, all = 3 };

inline bool serves_pmix(PmiInterfaces interfaces) { return (static_cast<int>(interfaces) & 1) != 0; }
inline bool serves_simple_pmi(PmiInterfaces interfaces) { return (static_cast<int>(interfaces) & 2) != 0; }

// The --pmi spellings: "all", "pmix", "simple" (also "pmi1", "pmi2"), "none".
inline std::optional<PmiInterfaces> parse_pmi_interfaces(std::string_view text)
{
    if (text == "all")
        return PmiInterfaces::all;
    if (text == "pmix")
        return PmiInterfaces::pmix;
    if (text == "simple" || text == "pmi1" || text == "pmi2")
        return PmiInterfaces::simple;
    if (text == "none")
        return PmiInterfaces::none;
    return std::nullopt;
}

} // namespace canopy
