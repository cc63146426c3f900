// --dry-run: what a job would do (placement, bindings, tree, agent commands), with nothing started.
#pragma once

#include <string>

#include "launch_plan.hpp"

namespace canopy {

// The plan as text for the user. Linear in the number of nodes: 10,000 hosts take milliseconds.
std::string describe_dry_run(const RootPlan& root);

} // namespace canopy
