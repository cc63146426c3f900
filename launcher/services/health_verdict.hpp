// --health-check at the root (docs/health-check.md): reads every node's verdict as the health fence turns around,
// and before any rank can start ends a job that has bad nodes, naming each with its reason. --bad-nodes FILE
// gets the same list, in a form --exclude FILE reads.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "collective/tree_collectives.hpp"
#include "root_service.hpp"

namespace canopy {

class HealthVerdict : public RootService {
public:
    HealthVerdict(TreeCollectives& collectives, std::size_t nodes, std::optional<std::string> bad_nodes_file,
                  RootControl& control);

    void start() override;
    // The job ends for another reason (a node that could not set up, a signal): its line stands alone.
    void stop(const std::string&) override { stopped_ = true; }

private:
    void judge(std::int32_t status, const std::vector<std::uint8_t>& result);

    TreeCollectives& collectives_;
    std::size_t nodes_;
    std::optional<std::string> bad_nodes_file_;
    RootControl& control_;
    bool stopped_ = false;
};

} // namespace canopy
