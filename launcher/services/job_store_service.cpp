// The root's job store, reached through the tree.
#include "job_store_service.hpp"

#include <chrono>

#include "tree/topology.hpp"

namespace canopy {
namespace {

std::int64_t steady_ms()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace

JobStoreService::JobStoreService(boost::asio::io_context& io, TreeCollectives& collectives, HostNames hosts)
    : collectives_(collectives), hosts_(std::move(hosts)), timer_(io)
{
    // Daemons cache what the store answered them; a write reaches its caller only once every daemon holding the
    // key has dropped it (or left the job: the request then fails, which is as good).
    store_.set_invalidator([this](long position, const std::string& key, std::function<void()> acked) {
        collectives_.request<wire::StoreInvalidation>(position, {key}, [acked = std::move(acked)](auto) { acked(); });
    });
}

void JobStoreService::serve_requests(RoutedServices& services)
{
    services.serve<wire::StoreRequest>([this](long from, wire::StoreRequest request, auto reply) {
        serve(from, std::move(request), std::move(reply));
    });
}

void JobStoreService::serve(long from, wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> reply)
{
    store_.serve(
        request.operation, request.body,
        [reply = std::move(reply)](JobStore::Reply answer) {
            reply(wire::StoreReply{answer.answer, std::move(answer.payload)});
        },
        steady_ms(), from);
    arm_timer();
}

void JobStoreService::arm_timer()
{
    auto next = store_.expire(steady_ms());
    timer_.cancel();
    if (!next)
        return;
    timer_.expires_after(std::chrono::milliseconds(std::max<std::int64_t>(1, *next - steady_ms())));
    timer_.async_wait([this](const boost::system::error_code& error) {
        if (!error)
            arm_timer();
    });
}

void JobStoreService::stop(const std::string&)
{
    // Blocking reads still waiting end with the daemons' links; the timer must not outlive the job.
    timer_.cancel();
}

void JobStoreService::record(timing::PhaseSet& phases) const
{
    auto nodes = static_cast<long>(hosts_.size());
    for (const auto& [position, counts] : store_.counts()) {
        if (position < 1 || position > nodes)
            continue;
        std::string host = hosts_[static_cast<std::size_t>(Topology::position_to_node(position))];
        phases.add("root.store_read_messages", static_cast<double>(counts.reads), host);
        phases.add("root.store_write_messages", static_cast<double>(counts.writes), host);
        phases.add("root.store_invalidate_messages", static_cast<double>(counts.invalidations), host);
    }
}

} // namespace canopy
