// The requests a PMIx server waits on the tree for: each answered exactly once, by its reply, its timeout, a lost
// rank it waits on, or the host going away. Knows nothing of PMIx, so it is unit-tested on its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "util/lifetime.hpp"

namespace canopy {

class PendingRequests {
public:
    using Bytes = std::vector<std::uint8_t>;
    using Answer = std::function<void(int status, Bytes)>;

    // Whose loss fails a request: nobody's (publish, lookup), every rank's (a whole-job fence), or these ranks'.
    struct WaitsOn {
        bool whole_job = false;
        std::vector<long> ranks;
        bool involves(long rank) const;
    };

    // `timeout_status` is what a request whose time runs out is answered with.
    PendingRequests(boost::asio::io_context& io, int timeout_status);
    ~PendingRequests();
    PendingRequests(const PendingRequests&) = delete;
    PendingRequests& operator=(const PendingRequests&) = delete;

    // Registers a request; a positive `timeout` answers it with the timeout status when it runs out. `what` names
    // it in the timeout's log line.
    std::uint64_t add(WaitsOn waits_on, Answer answer, std::chrono::seconds timeout, const char* what);
    // Answers a request once; a later answer for it (a tree reply after its timeout) is dropped.
    void complete(std::uint64_t id, int status, Bytes bytes);
    // Answers every request that waits on `rank` with `status`.
    void fail_waiting_on(long rank, int status);
    // Answers everything still waiting with `status`.
    void fail_all(int status);

    std::size_t size() const { return requests_.size(); }

private:
    struct Request {
        WaitsOn waits_on;
        Answer answer;
        std::unique_ptr<boost::asio::steady_timer> timer;
    };

    boost::asio::io_context& io_;
    int timeout_status_;
    std::map<std::uint64_t, Request> requests_;
    std::uint64_t next_id_ = 1;
    Lifetime lifetime_;
};

} // namespace canopy
