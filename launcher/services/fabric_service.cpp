// The root's end of the fabric plane.
#include "fabric_service.hpp"

#include "exit_codes.hpp"
#include "fabric/fabric_plane.hpp"
#include "util/log.hpp"

namespace canopy {

void FabricService::start()
{
    if (!fabric::uses_fabric(plan_))
        return;
    auto own = fabric::start_fabric_plane(io_, key_, plan_, 0, "the launcher", position_,
                                          {[](const wire::Frame&) {},   // the root has no parent
                                           [this](const std::string& line) { root_.fail(exit_infrastructure, line); },
                                           [this](const std::string& path) { root_.watch_path(path, "fabric endpoint"); }});
    if (!own.why_not.empty() && plan_.job.fabric == "auto")
        area_logger("fabric").info("--fabric auto: {}; bulk data goes over the tree's TCP links", own.why_not);
}

} // namespace canopy
