// Keeps a listening port usable when peers misbehave.
#include "util/accept_guard.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>

#include <boost/asio/error.hpp>

namespace canopy {

struct AcceptGuard::Pending::Table {
    std::list<std::pair<std::uint64_t, std::function<void()>>> connections;   // oldest first
    std::uint64_t next_id = 1;
};

AcceptGuard::Pending& AcceptGuard::Pending::operator=(Pending&& other) noexcept
{
    if (this != &other) {
        release();
        table_ = std::move(other.table_);
        id_ = other.id_;
    }
    return *this;
}

void AcceptGuard::Pending::release()
{
    if (auto table = table_.lock())
        table->connections.remove_if([this](const auto& entry) { return entry.first == id_; });
    table_.reset();
}

bool AcceptGuard::Pending::dropped_for_room() const
{
    auto table = table_.lock();
    return table && std::none_of(table->connections.begin(), table->connections.end(),
                                 [this](const auto& entry) { return entry.first == id_; });
}

std::size_t pending_cap_within_descriptor_limit(std::size_t wanted)
{
    struct rlimit limit;
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return wanted;
    // A process has a few guarded ports; together they may hold well under half of its descriptors, so a PMIx
    // server starting, a rank's pipes or a staged file still find one when strangers fill every port.
    std::size_t share = std::max<std::size_t>(static_cast<std::size_t>(limit.rlim_cur) / 8, 16);
    return std::min(wanted, share);
}

AcceptGuard::AcceptGuard(boost::asio::io_context& io, spdlog::logger& log, Limits limits)
    : io_(io), log_(log), limits_(limits), table_(std::make_shared<Pending::Table>()), pause_timer_(io),
      summary_timer_(io)
{
    limits_.max_pending = pending_cap_within_descriptor_limit(limits.max_pending);
}

AcceptGuard::~AcceptGuard()
{
    lifetime_.end();
    flush();   // a job that ends within the interval still hears how many there were
}

void AcceptGuard::flush()
{
    summary_timer_.cancel();
    summary_scheduled_ = false;
    if (unsaid_ > 0)
        summarise();
}

bool accept_error_is_resource_shortage(const boost::system::error_code& error)
{
    if (error.category() != boost::system::system_category())
        return false;
    int code = error.value();
    return code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM;
}

bool AcceptGuard::after_accept(const boost::system::error_code& error, std::function<void()> accept_again)
{
    if (error == boost::asio::error::operation_aborted || error == boost::asio::error::bad_descriptor)
        return false;
    if (!accept_error_is_resource_shortage(error)) {
        accept_again();
        return true;
    }
    // Retrying at once fails the same way thousands of times a second; a pending handshake ending or a rank
    // closing a descriptor is what frees one, and that takes time.
    log_.debug("cannot accept a connection: {}; pausing {} ms", error.message(), limits_.pause.count());
    pause_timer_.expires_after(limits_.pause);
    pause_timer_.async_wait(lifetime_.guard([again = std::move(accept_again)](const boost::system::error_code& e) {
        if (!e)
            again();
    }));
    return true;
}

AcceptGuard::Pending AcceptGuard::admit(std::function<void()> drop)
{
    if (table_->connections.size() >= limits_.max_pending) {
        auto oldest = std::move(table_->connections.front().second);
        table_->connections.pop_front();
        ++dropped_for_room_;
        oldest();
    }
    std::uint64_t id = table_->next_id++;
    table_->connections.emplace_back(id, std::move(drop));
    return Pending(table_, id);
}

std::size_t AcceptGuard::pending() const { return table_->connections.size(); }

void AcceptGuard::refused(const std::string& message)
{
    if (said_in_full_ < limits_.warnings_in_full) {
        ++said_in_full_;
        log_.warn("{}", message);
        return;
    }
    ++unsaid_;
    latest_unsaid_ = message;
    if (summary_scheduled_)
        return;
    summary_scheduled_ = true;
    summary_timer_.expires_after(limits_.summary_interval);
    summary_timer_.async_wait(lifetime_.guard([this](const boost::system::error_code& error) {
        if (error)
            return;
        summary_scheduled_ = false;
        summarise();
    }));
}

void AcceptGuard::summarise()
{
    log_.warn("{} more connections refused like that (the last: {})", unsaid_, latest_unsaid_);
    unsaid_ = 0;
}

} // namespace canopy
