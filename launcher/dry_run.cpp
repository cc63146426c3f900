#include "dry_run.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "proc/cpubind.hpp"
#include "tree/agent.hpp"
#include "tree/children.hpp"
#include "tree/topology.hpp"

namespace canopy {
namespace {

// Past this many local ranks, the binding section shows the first ones and says how many it left out.
constexpr long shown_local_ranks = 64;

std::string rank_range(long first, long count)
{
    return count == 1 ? fmt::format("rank {}", first) : fmt::format("ranks {}-{}", first, first + count - 1);
}

void describe_bindings(std::string& out, const RootPlan& root)
{
    const wire::JobSpec& job = root.plan.job;
    out += fmt::format("\nBinding (--cpu-bind {}", job.cpu_bind);
    auto bind = parse_cpu_bind(job.cpu_bind, static_cast<long>(job.depth));
    if (!bind || bind->kind == CpuBind::Kind::none) {
        out += "): ranks are not bound\n";
        return;
    }
    long most = 0;
    for (const auto& node : root.placement.nodes)
        most = std::max(most, node.count);
    std::vector<int> allowed = allowed_cpus();
    // Each node binds from the CPUs canopyd may use there; this machine's stand in for simulated nodes and as an
    // example for others.
    out += fmt::format(", from the CPUs each node's canopyd may use; with this machine's {}):\n",
                       compress_cpu_list(allowed));
    for (long local = 0; local < std::min(most, shown_local_ranks); ++local)
        out += fmt::format("  local rank {}: CPUs {}\n", local,
                           compress_cpu_list(cpus_for_local_rank(*bind, local, allowed)));
    if (most > shown_local_ranks)
        out += fmt::format("  ... and {} more local ranks\n", most - shown_local_ranks);
}

void describe_tree(std::string& out, const RootPlan& root)
{
    const wire::LaunchPlan& plan = root.plan;
    Topology tree(static_cast<long>(plan.hosts.size()), static_cast<long>(plan.fanout));
    auto name = [&](long position) {
        return position == 0 ? std::string("launcher") : plan.hosts[static_cast<std::size_t>(position - 1)];
    };
    out += fmt::format("\nTree (fanout {}, depth {}, each parent starts up to {} children at once; agent {}):\n",
                       plan.fanout, tree.depth(), plan.window, plan.simulated ? "local" : plan.agent);
    for (long position = 0; position < tree.positions(); ++position) {
        auto children = tree.children(position);
        if (children.empty())
            continue;
        out += fmt::format("  {} ->", name(position));
        for (long child : children)
            out += " " + name(child);
        out += "\n";
    }
    out += "\nAgent commands (PORT: chosen when the parent listens; a daemon listens on the address it reached its "
           "own parent from):\n";
    for (long position = 1; position < tree.positions(); ++position) {
        long parent = tree.parent(position);
        std::string address = parent == 0                  ? root.listen_address
                              : plan.simulated             ? simulated_node_address(Topology::position_to_node(parent))
                              : !plan.bind_address.empty() ? plan.bind_address
                                                           : name(parent);
        std::string endpoint = fmt::format("{}:PORT", address);
        auto launch = plan_child_launch(plan, position, endpoint, plan.daemon_path);
        out += fmt::format("  {}: {}\n", name(parent),
                           launch ? shell_join(launch->argv) : "cannot start it: " + launch.error().message);
    }
}

} // namespace

std::string describe_dry_run(const RootPlan& root)
{
    const Placement& placement = root.placement;
    std::string out = fmt::format("canopy --dry-run: nothing was started.\n"
                                  "Job: {} ranks on {} nodes (hosts from {}): {}\n",
                                  placement.world_size, placement.nodes.size(), root.host_source, root.command_line);
    out += "\nPlacement:\n";
    for (std::size_t i = 0; i < placement.nodes.size(); ++i) {
        const auto& node = placement.nodes[i];
        out += fmt::format("  node {} {}: {}\n", i, node.host, rank_range(node.first_rank, node.count));
    }
    const auto& apps = root.plan.job.apps;
    if (apps.size() > 1) {
        out += "\nPrograms (app numbers, MPI_APPNUM):\n";
        long first = 0;
        for (std::size_t k = 0; k < apps.size(); ++k) {
            out += fmt::format("  app {} {}: {}\n", k, rank_range(first, static_cast<long>(apps[k].ranks)),
                               shell_join(apps[k].argv));
            first += static_cast<long>(apps[k].ranks);
        }
    }
    describe_bindings(out, root);
    describe_tree(out, root);
    return out;
}

} // namespace canopy
