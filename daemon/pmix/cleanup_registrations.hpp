// The cleanups a rank registers with PMIx_Job_control (PMIX_REGISTER_CLEANUP and _DIR). PMIx's server keeps
// them to itself and runs them when it deregisters the rank or its namespace; canopyd reads them off the relayed
// request too (message_tap.hpp), so its node guard removes them even after canopyd was killed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace canopy {

struct CleanupRegistration {
    std::string path;
    bool directory = false;
    // For a directory: only PMIX_CLEANUP_RECURSIVE without _EMPTY, _IGNORE or _LEAVE_TOPDIR means "remove all of
    // it", which is what the guard can do; the other kinds are left to PMIx.
    bool whole_tree = false;
};

// Decodes a PMIx job-control request (one message's payload, as the rank packed it) into the paths it registers
// for cleanup; empty if it registers none or cannot be read. Defined in canopyd-pmix.so: it unpacks with libpmix.
std::vector<CleanupRegistration> registered_cleanups(std::string_view message);

} // namespace canopy
