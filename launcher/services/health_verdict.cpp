// --health-check at the root.
#include "services/health_verdict.hpp"

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "report_files.hpp"
#include "wire/health_check.hpp"

namespace canopy {

HealthVerdict::HealthVerdict(TreeCollectives& collectives, std::size_t nodes,
                             std::optional<std::string> bad_nodes_file, RootControl& control)
    : collectives_(collectives), nodes_(nodes), bad_nodes_file_(std::move(bad_nodes_file)), control_(control)
{
}

void HealthVerdict::start()
{
    collectives_.watch_results(wire::FenceDomain::health,
                               [this](std::int32_t status, const std::vector<std::uint8_t>& result) {
                                   judge(status, result);
                               });
}

void HealthVerdict::judge(std::int32_t status, const std::vector<std::uint8_t>& result)
{
    if (status != 0 || stopped_)
        return;   // the job is ending already, with its own line
    auto bad = wire::decode_health_verdicts(result);
    if (!bad) {
        control_.fail(exit_infrastructure, fmt::format("health check: {}", bad.error().message));
        return;
    }
    std::string listing;
    for (const auto& node : *bad)
        listing += fmt::format("{}  # {}\n", node.node, node.reason);
    // Written whatever the verdict, so that a job script's next --exclude FILE never reads a stale list.
    if (bad_nodes_file_)
        if (auto written = write_report_file(*bad_nodes_file_, listing); !written)
            control_.print_line(fmt::format("canopy: cannot write --bad-nodes {}: {}\n", *bad_nodes_file_,
                                            written.error().message));
    if (bad->empty()) {
        control_.stamp("health_checked");
        return;
    }
    control_.fail(exit_infrastructure,
                  fmt::format("health check: {} of {} node{} failed; no rank was started", bad->size(), nodes_,
                              nodes_ == 1 ? "" : "s"));
    for (const auto& node : *bad)
        control_.print_line(fmt::format("canopy: health check: {}: {}\n", node.node, node.reason));
}

} // namespace canopy
