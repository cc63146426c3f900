// The root's job store, which canopy_store_* and canopy.torch.Store reach through the tree: the store, the timer
// that ends its blocking reads, and the invalidations it sends the daemons that cache it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "collective/job_store.hpp"
#include "collective/tree_collectives.hpp"
#include "hosts/host_names.hpp"
#include "root_service.hpp"

namespace canopy {

class JobStoreService : public RootService {
public:
    // `hosts` names the nodes in the report.
    JobStoreService(boost::asio::io_context& io, TreeCollectives& collectives, HostNames hosts);

    void serve_requests(RoutedServices& services) override;
    void stop(const std::string& why) override;
    // The next attempt's ranks find the store empty.
    void next_attempt() override
    {
        store_.forget_values();
        arm_timer();
    }
    // What the store served each node, and the invalidations it sent them (counts, not times).
    void record(timing::PhaseSet& phases) const override;

private:
    void serve(long from, wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> reply);
    // Answers blocking gets and waits whose time is up, and waits for the next deadline.
    void arm_timer();

    TreeCollectives& collectives_;
    HostNames hosts_;
    JobStore store_;
    boost::asio::steady_timer timer_;
};

} // namespace canopy
