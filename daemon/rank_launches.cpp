#include "rank_launches.hpp"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "affinity/binding_report.hpp"
#include "affinity/binding_request.hpp"
#include "error_files.hpp"
#include "hosts/rank_blocks.hpp"
#include "proc/rank_env.hpp"

namespace canopy {
namespace {

// Simulated nodes share one host: Open MPI must keep each node's shared memory apart and send between
// "nodes" over loopback, the only network a simulation may use (docs/pmix.md).
std::vector<std::string> simulated_node_mpi_env(const std::string& node_tmpdir)
{
    return {"OMPI_MCA_btl_vader_backing_directory=" + node_tmpdir, "OMPI_MCA_btl_tcp_if_include=lo",
            "OMPI_MCA_oob_tcp_if_include=lo"};
}

bool on_tmpfs(const std::string& path)
{
    struct statfs info;
    return ::statfs(path.c_str(), &info) == 0 && info.f_type == TMPFS_MAGIC;
}

} // namespace

RankBatch plan_node_ranks(const wire::JobSpec& job, const NodeSite& site,
                          const std::vector<std::unique_ptr<RankService>>& services,
                          const std::function<void(const std::string&)>& report_error, long first_tree_rank)
{
    RankBlocks blocks(job.ranks_per_node);
    // Programs take ranks in blocks, as nodes do.
    std::vector<std::uint64_t> ranks_per_app;
    for (const auto& app : job.apps)
        ranks_per_app.push_back(app.ranks);
    RankBlocks app_blocks(std::move(ranks_per_app));
    long first_rank = blocks.first_rank(site.index);
    long local_size = blocks.local_size(site.index);
    long world_size = blocks.world_size();

    RankBatch batch;
    if (local_size == 0)
        return batch;
    auto allowed = allowed_cpus();
    auto bindings = plan_node_bindings(job.binding, local_size, BindingSite{site.node, first_rank});
    bool tmpdir_on_tmpfs = !site.simulated && on_tmpfs(site.tmpdir);
    // Each program's environment and path on this node, made when its first rank here is.
    struct Program {
        std::vector<std::string> env;
        std::string path;
    };
    std::vector<std::optional<Program>> programs_here(job.apps.size());
    std::optional<StartFailure> not_found;
    for (long local = 0; local < local_size; ++local) {
        long appnum = std::max(0L, app_blocks.node_of(first_rank + local));
        const wire::AppSpec& app = job.apps[static_cast<std::size_t>(appnum)];
        auto& program = programs_here[static_cast<std::size_t>(appnum)];
        if (!program) {
            program.emplace(Program{environment_with(job.env, app.env), {}});
            int not_runnable = exit_cannot_run;
            auto path = find_program(app.argv.at(0), environment_value(program->env, "PATH"), &not_runnable,
                                     [&services](const std::string& candidate) {
                                         return std::ranges::any_of(services, [&candidate](const auto& service) {
                                             return service->knows_executable(candidate);
                                         });
                                     },
                                     app.wdir);
            if (path)
                program->path = *path;
            else if (!not_found)
                not_found = StartFailure{not_runnable, fmt::format("{} on {}", path.error().message, site.node)};
        }
        RankIdentity who;
        who.rank = first_rank + local;
        who.world_size = world_size;
        who.local_rank = local;
        who.local_size = local_size;
        who.node_rank = site.index;
        who.nodes = site.nodes;
        who.node_name = site.node;
        who.master_addr = job.master_addr;
        who.master_port = job.master_port;
        who.job_id = site.job_id;
        who.node_tmpdir = site.tmpdir;
        who.appnum = appnum;
        who.restart_count = site.restart_count;
        who.max_restarts = static_cast<long>(job.max_restarts);
        RankLaunch launch;
        launch.rank = first_tree_rank + who.rank;
        launch.appnum = appnum;
        launch.argv = app.argv;
        launch.argv[0] = program->path;
        launch.wdir = app.wdir;
        launch.env = rank_environment(program->env, who);
        // Each rank its own file, as torchrun gives; one inherited from an outer torchrun would be shared.
        if (!site.tmpdir.empty()) {
            auto error_file = error_file_for(site.tmpdir, launch.rank);
            if (site.restart_count > 0) {   // what the last attempt's rank recorded is not this one's failure
                std::error_code ignored;
                std::filesystem::remove(error_file, ignored);
            }
            set_environment_value(launch.env, "TORCHELASTIC_ERROR_FILE", error_file);
        }
        for (auto& service : services)
            if (auto prepared = service->prepare_rank(launch); !prepared)
                report_error(prepared.error().message);
        if (!services.empty()) {   // a PMI is served: these ranks may be MPI programs
            if (site.simulated)
                for (auto& setting : simulated_node_mpi_env(site.tmpdir))
                    add_environment_default(launch.env, std::move(setting));
            // Open MPI's shared-memory segments (vader_segment.*) go in the node's temp dir when it is as fast
            // as /dev/shm: the node guard removes that however the daemon ends, even by SIGKILL.
            else if (tmpdir_on_tmpfs)
                add_environment_default(launch.env, "OMPI_MCA_btl_vader_backing_directory=" + site.tmpdir);
            // Open MPI's session directory (ompi.<host>.<uid>/jf.<job>) too: under a PMIx server no orted
            // removes it, so in /tmp one would pile up per job.
            add_environment_default(launch.env, "OMPI_MCA_orte_tmpdir_base=" + site.tmpdir);
            // More ranks than CPUs on this host (simulated nodes share one): busy-polling MPI ranks would
            // starve each other, so let Open MPI yield when idle, as mpirun does when oversubscribed.
            long ranks_on_host = site.simulated ? world_size : local_size;
            if (ranks_on_host > static_cast<long>(allowed.size()))
                add_environment_default(launch.env, "OMPI_MCA_mpi_yield_when_idle=1");
        }
        if (bindings) {
            const RankBinding& binding = bindings->ranks[static_cast<std::size_t>(local)];
            add_binding_environment(launch.env, binding);
            if (binding.cpus.empty())   // every rank learns where it may run: an unbound one, all the node offers
                set_environment_value(launch.env, "CANOPY_CPUS", compress_cpu_list(allowed));
            if (bindings->applied[static_cast<std::size_t>(local)]) {
                launch.cpus = binding.cpus;
                if (!bindings->foreign)
                    launch.numa_nodes = binding.numa;
            }
        }
        // The job's rank 0 only, and in the first attempt only: what a restarted one would read is the middle of the
        // stream, which the old rank 0 began to read.
        launch.takes_stdin = launch.rank == 0 && site.restart_count == 0;
        batch.launches.push_back(std::move(launch));
    }
    if (!bindings)
        batch.refused = {exit_cannot_run, bindings.error().message};
    else if (not_found)
        batch.refused = *not_found;
    else if (job.binding.report_bindings)
        batch.binding_report = binding_table(site.node, *bindings, first_rank, bindings->foreign);
    return batch;
}

wire::JobSpec spawned_job(const wire::JobSpec& job, const wire::NamespaceStart& start, const std::string& job_id)
{
    // Its ranks run as the job's do, with the spawner's program, environment and directory.
    wire::JobSpec spawned = job;
    wire::AppSpec app;
    app.argv = start.argv;
    app.wdir = start.wdir.empty() ? job.apps.front().wdir : start.wdir;
    app.ranks = static_cast<std::uint64_t>(RankBlocks(start.ranks_per_node).world_size());
    spawned.apps = {std::move(app)};
    // Not bound: the node's cores and GPUs are the job's ranks' already. They run with the spawner's environment,
    // its GPU variables included (docs/affinity.md).
    spawned.binding = wire::BindingSpec{};
    for (const auto& setting : start.env) {
        auto name = setting.substr(0, setting.find('='));
        auto value = setting.substr(std::min(setting.size(), setting.find('=') + 1));
        // The spawner's own PMI and canopy identity, and its node's temp dir, are not the new ranks': each node
        // sets those for its ranks.
        bool node_dir = value.find("/canopy-" + job_id + "-") != std::string::npos;
        if (name.starts_with("PMIX_") || name.starts_with("PMI_") || name.starts_with("CANOPY_") || node_dir)
            continue;
        set_environment_value(spawned.env, name, value);
    }
    spawned.ranks_per_node = start.ranks_per_node;
    return spawned;
}

// Simulated nodes share one kernel, whose cgroup lock serialises every cgroup made, joined or removed: 10-50 ms each
// on the test VM. At 4,096 nodes most daemons sat blocked in mkdir for longer than the heartbeat timeout and were
// declared lost. A real node makes one; a small simulated job still makes one per node, so the tests cover them.
constexpr std::size_t max_simulated_nodes_with_cgroups = 64;

bool wants_rank_cgroup(const wire::LaunchPlan& plan)
{
    return !plan.simulated || plan.hosts.size() <= max_simulated_nodes_with_cgroups;
}

} // namespace canopy
