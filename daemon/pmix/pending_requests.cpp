// The PMIx server's requests waiting on the tree.
#include "pmix/pending_requests.hpp"

#include <algorithm>

#include "util/log.hpp"

namespace canopy {

bool PendingRequests::WaitsOn::involves(long rank) const
{
    return whole_job || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

PendingRequests::PendingRequests(boost::asio::io_context& io, int timeout_status)
    : io_(io), timeout_status_(timeout_status)
{
}

PendingRequests::~PendingRequests()
{
    lifetime_.end();
    for (auto& [id, request] : requests_)
        if (request.timer)
            request.timer->cancel();
}

std::uint64_t PendingRequests::add(WaitsOn waits_on, Answer answer, std::chrono::seconds timeout, const char* what)
{
    std::uint64_t id = next_id_++;
    Request& request = requests_[id];
    request.waits_on = std::move(waits_on);
    request.answer = std::move(answer);
    if (timeout.count() > 0) {
        request.timer = std::make_unique<boost::asio::steady_timer>(io_, timeout);
        request.timer->async_wait(lifetime_.guard([this, id, timeout, what](const boost::system::error_code& error) {
            if (error)
                return;
            area_logger("pmix").warn("pmix: {} (request {}) timed out after {} s (PMIX_TIMEOUT)", what, id,
                                     timeout.count());
            complete(id, timeout_status_, {});
        }));
    }
    return id;
}

void PendingRequests::complete(std::uint64_t id, int status, Bytes bytes)
{
    auto it = requests_.find(id);
    if (it == requests_.end())
        return;
    Request request = std::move(it->second);
    requests_.erase(it);
    if (request.timer)
        request.timer->cancel();
    request.answer(status, std::move(bytes));
}

void PendingRequests::fail_waiting_on(long rank, int status)
{
    std::vector<std::uint64_t> ids;
    for (const auto& [id, request] : requests_)
        if (request.waits_on.involves(rank))
            ids.push_back(id);
    for (auto id : ids)
        complete(id, status, {});
}

void PendingRequests::fail_all(int status)
{
    std::vector<std::uint64_t> ids;
    for (const auto& [id, request] : requests_)
        ids.push_back(id);
    for (auto id : ids)
        complete(id, status, {});
}

} // namespace canopy
