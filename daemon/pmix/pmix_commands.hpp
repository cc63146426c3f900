// The commands of PMIx 4's client-server protocol that canopyd reads off a rank's relayed stream
// (message_tap.hpp): a message's payload starts with its command, as libpmix packs it.
#pragma once

#include <cstdint>
#include <string>

namespace canopy::pmix_command {

// PMIX_COMMIT_CMD: everything the rank has PMIx_Put so far (PMIX_GLOBAL values twice, for the node's ranks and for
// the others), sent by PMIx_Commit. The server keeps it in place of what the rank committed before.
inline constexpr std::uint8_t commit = 2;
// PMIX_PUBLISHNB_CMD: PMIx_Publish, its values whole.
inline constexpr std::uint8_t publish = 6;
// PMIX_JOB_CONTROL_CMD: PMIx_Job_control, cleanup registrations among them (cleanup_registrations.hpp).
inline constexpr std::uint8_t job_control = 18;

// How a message of `command` starts. Defined in canopyd-pmix.so: it packs with libpmix.
std::string packed(std::uint8_t command);

} // namespace canopy::pmix_command
