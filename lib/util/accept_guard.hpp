// Keeps a listening port usable when peers misbehave: a cap on connections still proving who they are, a pause
// instead of a spin when descriptors run out, and warnings about refused peers that cannot flood the user.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <spdlog/logger.h>

#include "util/lifetime.hpp"

namespace canopy {

// `wanted`, or less under a low descriptor limit (`ulimit -n 1024`): an eighth of the soft limit, at least 16.
std::size_t pending_cap_within_descriptor_limit(std::size_t wanted);

class AcceptGuard {
public:
    struct Limits {
        // Connections accepted but not yet authenticated; past this the oldest is dropped for the new one, so a
        // stranger's silent connections cost at most this many descriptors and a real peer still gets in. Never
        // more than an eighth of the process's descriptor limit (pending_cap_within_descriptor_limit).
        std::size_t max_pending = 64;
        // How long to stop accepting when descriptors run out (EMFILE, ENFILE, ENOBUFS, ENOMEM).
        std::chrono::milliseconds pause{100};
        // Refused peers: this many warnings in full, then one summary per interval.
        std::size_t warnings_in_full = 3;
        std::chrono::milliseconds summary_interval{2000};
    };

    // A connection counted as pending until this is destroyed (its handshake ended, either way).
    class Pending {
    public:
        Pending() = default;
        Pending(Pending&& other) noexcept = default;   // the moved-from one's table is empty: it counts nothing
        Pending& operator=(Pending&& other) noexcept;
        ~Pending() { release(); }
        void release();   // the handshake ended: no longer counted
        // Whether the guard dropped this connection to make room for a newer one.
        bool dropped_for_room() const;

    private:
        friend class AcceptGuard;
        struct Table;
        Pending(std::weak_ptr<Table> table, std::uint64_t id) : table_(std::move(table)), id_(id) {}
        std::weak_ptr<Table> table_;
        std::uint64_t id_ = 0;
    };

    AcceptGuard(boost::asio::io_context& io, spdlog::logger& log, Limits limits);
    AcceptGuard(boost::asio::io_context& io, spdlog::logger& log) : AcceptGuard(io, log, Limits{}) {}
    ~AcceptGuard();

    // After an accept completed with `error`: false when the acceptor was closed (stop); otherwise true, and
    // `accept_again` runs now, or after the pause if descriptors ran out.
    bool after_accept(const boost::system::error_code& error, std::function<void()> accept_again);

    // Counts a new unauthenticated connection; `drop` closes it. When the cap is reached, the oldest is dropped.
    Pending admit(std::function<void()> drop);
    std::size_t pending() const;
    std::size_t dropped_for_room() const { return dropped_for_room_; }

    // Warns about a refused peer: in full for the first few, then counted into one line per interval.
    void refused(const std::string& message);
    // Says the count of refusals not yet summarised now: the port is closing, and the process may soon be gone.
    void flush();

private:
    void summarise();

    boost::asio::io_context& io_;
    spdlog::logger& log_;
    Limits limits_;
    std::shared_ptr<Pending::Table> table_;
    std::size_t dropped_for_room_ = 0;
    boost::asio::steady_timer pause_timer_;
    boost::asio::steady_timer summary_timer_;
    std::size_t said_in_full_ = 0;
    std::size_t unsaid_ = 0;           // refusals since the last summary, not said in full
    std::string latest_unsaid_;
    bool summary_scheduled_ = false;
    Lifetime lifetime_;
};

// Whether a failed accept is for want of descriptors or memory: it passes with time, so accept again later.
bool accept_error_is_resource_shortage(const boost::system::error_code& error);

} // namespace canopy
