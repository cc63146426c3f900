// PMIx_Spawn at the root.
#include "spawn_requests.hpp"

#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger& spawn_log() { return area_logger("spawn"); }

} // namespace

void SpawnRequests::serve_requests(RoutedServices& services)
{
    services.serve<wire::SpawnRequest>(
        [this](long, wire::SpawnRequest request, auto reply) { spawn(request, std::move(reply)); });
}

void SpawnRequests::spawn(const wire::SpawnRequest& request, RoutedServices::Reply<wire::SpawnRequest> reply)
{
    if (position_.leaving())
        return reply(make_error("PMIx_Spawn refused: the job is ending"));
    auto started = placement_.start(request);
    if (!started) {
        spawn_log().info("spawn refused: {}", started.error().message);
        return reply(started.error());
    }
    const auto& start = started->start;
    if (auto added = position_.collectives().add_namespace(static_cast<long>(start.first), start.ranks_per_node);
        !added)
        return reply(added.error());
    spawn_log().info("namespace {}: {} ranks from tree rank {}, spawned by tree rank {}", start.nspace,
                     started->reply.size, start.first, start.parent_rank);
    // Replies and broadcasts travel the same links in order: every daemon learns the namespace before the
    // caller's node hears that it exists.
    position_.children().broadcast(wire::to_frame(start));
    reply(std::move(started->reply));
}

} // namespace canopy
