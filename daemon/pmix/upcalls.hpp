// PMIx's upcalls into the host (pmix_server_module_t). Each runs on PMIx's progress thread, copies its arguments
// into C++ values, posts them to the io thread's RequestRouter and returns: no logic and no waiting there
// (STYLE habit 6).
#pragma once

#include <memory>

#include <pmix_server.h>

#include "util/result.hpp"

namespace canopy {

class RequestRouter;

// The table for PMIx_server_init. The daemon stays the only launcher: PMIx_Spawn, connect/disconnect and tools
// are not offered.
pmix_server_module_t* upcall_table();

// PMIx keeps one server per process and its upcalls carry no host pointer, so the router they reach is global.
// Attaching fails, naming the running job, while another router is attached; once detached, upcalls answer
// "not supported".
Status attach_upcalls(std::shared_ptr<RequestRouter> router);
void detach_upcalls();

} // namespace canopy
