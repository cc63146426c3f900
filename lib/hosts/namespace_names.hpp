// PMIx namespace names: the job's, and those of the namespaces PMIx_Spawn starts after it, numbered from 1.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace canopy {

inline std::string job_nspace(std::string_view job_id) { return fmt::format("canopy.{}", job_id); }

// The job's namespace (`first`, as job_nspace names it) in attempt `attempt` of its ranks (--max-restarts): its own
// name first, then "canopy.<job id>.restart<attempt>", so that a restarted rank never finds an old rank's data.
inline std::string attempt_nspace(std::string_view first, long attempt)
{
    return attempt == 0 ? std::string(first) : fmt::format("{}.restart{}", first, attempt);
}

// The k-th spawned namespace (k = 1, 2, ...): "canopy.<job id>.<k>", so a name shows which job it belongs to.
inline std::string spawned_nspace(std::string_view job_id, long k)
{
    return fmt::format("{}.{}", job_nspace(job_id), k);
}

} // namespace canopy
