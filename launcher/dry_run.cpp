#include "dry_run.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "affinity/binding_report.hpp"
#include "tree/agent.hpp"
#include "tree/children.hpp"
#include "tree/topology.hpp"
#include "util/byte_size.hpp"

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
    const wire::BindingSpec& spec = root.plan.job.binding;
    out += fmt::format("\nBinding (--cpu-bind {}, --gpu-bind {}, --mem-bind {}", spec.cpu_bind, spec.gpu_bind,
                       spec.mem_bind);
    if (spec.cpu_bind == "none" && spec.gpu_bind == "none" && spec.mem_bind == "none") {
        out += "): ranks are not bound\n";
        return;
    }
    const NodeRanks* busiest = &root.placement.nodes.front();
    for (const auto& node : root.placement.nodes)
        if (node.count > busiest->count)
            busiest = &node;
    // Each node binds from its own topology; --topology's file, or this machine's, stands in for all of them here.
    out += spec.topology_file.empty() ? "; each node plans from its own topology, shown here with this machine's):\n"
                                      : "; every node planned from --topology):\n";
    auto bindings = plan_node_bindings(spec, busiest->count, BindingSite{busiest->host, busiest->first_rank});
    if (!bindings) {
        out += fmt::format("  {}\n", bindings.error().message);
        return;
    }
    out += binding_table(busiest->host, *bindings, busiest->first_rank, false, shown_local_ranks) + "\n";
}

void describe_health_check(std::string& out, const wire::HealthCheckSpec& spec)
{
    if (!spec.enabled)
        return;
    out += fmt::format("\nHealth check, on every node before any rank starts: the node temp dir takes a write and has "
                       "{} free, {} of memory available, the clock within {:g} s of the parent's",
                       format_byte_size(spec.min_free_disk), format_byte_size(spec.min_free_memory),
                       spec.max_clock_offset);
    if (spec.gpus > 0)
        out += fmt::format(", {} GPUs", spec.gpus);
    if (!spec.command.empty())
        out += fmt::format("; then /bin/sh -c {} (at most {:g} s)", shell_quote(spec.command), spec.command_timeout);
    out += "\n";
}

void describe_restarts(std::string& out, std::uint64_t max_restarts)
{
    if (max_restarts == 0)
        return;
    out += fmt::format("\nRestarts: a failed rank stops every rank and starts them all again in place, up to {} "
                       "time{} in all (CANOPY_RESTART_COUNT 0 to {})\n",
                       max_restarts, max_restarts == 1 ? "" : "s", max_restarts);
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
    describe_health_check(out, root.plan.job.health_check);
    describe_restarts(out, root.plan.job.max_restarts);
    describe_tree(out, root);
    return out;
}

} // namespace canopy
