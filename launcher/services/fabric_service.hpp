// Bulk data over libfabric from the root (--fabric, docs/fabric.md): the root's end of the fabric plane.
#pragma once

#include <boost/asio/io_context.hpp>

#include "launch_plan.hpp"
#include "position/tree_position.hpp"
#include "root_service.hpp"
#include "wire/auth.hpp"

namespace canopy {

class FabricService : public RootService {
public:
    FabricService(boost::asio::io_context& io, const auth::Key& key, const wire::LaunchPlan& plan,
                  TreePosition& position, RootControl& root)
        : io_(io), key_(key), plan_(plan), position_(position), root_(root)
    {
    }

    // Opens the root's endpoint, when the job uses a fabric: the position sends its bulk data there from then on.
    void start() override;

private:
    boost::asio::io_context& io_;
    const auth::Key& key_;
    const wire::LaunchPlan& plan_;
    TreePosition& position_;
    RootControl& root_;
};

} // namespace canopy
