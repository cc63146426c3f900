#include "pmix/client_env.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <pmix_common.h>   // PMIX_MAX_NSLEN only: nothing here calls libpmix

namespace canopy {

std::string pmix_server_nspace(const PmixJob& job)
{
    return fmt::format("{}.daemon", job.nspace).substr(0, PMIX_MAX_NSLEN);
}

std::string pmix_system_tmpdir()
{
    for (const char* name : {"TMPDIR", "TEMP", "TMP"})
        if (const char* value = std::getenv(name); value && *value)
            return value;
    return "/tmp";
}

std::string pmix_component(const char* variable, const char* fallback)
{
    const char* value = std::getenv(variable);
    return value && *value ? value : fallback;
}

std::string pmix_build_version() { return CANOPY_PMIX_VERSION; }

std::vector<std::string> canopy_pmix_settings()
{
    // Open MPI 4.1's "orte" schizo component declares every app it cannot place a singleton and pins
    // OMPI_MCA_ess=singleton; inside a Slurm, Flux or LSF allocation (the job's variables reach the ranks) the
    // scheduler's own component does the same for an app outside a job step. Excluding them lets the PMIx-based
    // ess (pmi) win. See docs/pmix.md.
    return {"PMIX_MCA_gds=" + pmix_component("PMIX_MCA_gds", "hash"), "OMPI_MCA_schizo=^orte,slurm,flux,jsm"};
}

std::vector<std::string> pmix_rank_env(const PmixJob& job, long rank, const std::string& server_uri)
{
    std::string uri = fmt::format("{}.{};{}", pmix_server_nspace(job), job.node_index, server_uri);
    std::vector<std::string> env;
    // The variables and values of PMIx_server_setup_fork in PMIx 4.2; newer clients read URI41 first.
    for (const char* version : {"41", "4", "3", "21", "2"})
        env.push_back(fmt::format("PMIX_SERVER_URI{}={}", version, uri));
    env.push_back("PMIX_NAMESPACE=" + job.nspace);
    env.push_back(fmt::format("PMIX_RANK={}", rank));
    env.push_back("PMIX_SERVER_TMPDIR=" + job.tmpdir);
    env.push_back("PMIX_SYSTEM_TMPDIR=" + pmix_system_tmpdir());
    env.push_back("PMIX_SECURITY_MODE=" + pmix_component("PMIX_MCA_psec", "native"));
    env.push_back("PMIX_BFROP_BUFFER_TYPE=PMIX_BFROP_BUFFER_NON_DESC");
    env.push_back("PMIX_GDS_MODULE=" + pmix_component("PMIX_MCA_gds", "hash"));
    env.push_back("PMIX_HOSTNAME=" + job.hosts.at(static_cast<std::size_t>(job.node_index)));
    env.push_back("PMIX_VERSION=" + pmix_build_version());
    for (auto& setting : canopy_pmix_settings())
        env.push_back(std::move(setting));
    return env;
}

std::vector<std::string> pmix_spawned_rank_env(const PmixJob& job, const std::string& nspace, long rank,
                                               const std::string& server_uri)
{
    auto env = pmix_rank_env(job, rank, server_uri);
    for (auto& setting : env)
        if (setting.starts_with("PMIX_NAMESPACE="))
            setting = "PMIX_NAMESPACE=" + nspace;
    return env;
}

} // namespace canopy
