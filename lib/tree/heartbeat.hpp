// Liveness of one tree link: a heartbeat when this side has sent nothing for a while, and the peer declared lost
// when nothing at all has come from it within the heartbeat timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "tree/link.hpp"
#include "util/lifetime.hpp"

namespace canopy {

// When to send a heartbeat and when the peer is lost, from the times of the link's last traffic; no I/O, so the
// timing is tested apart from sockets.
class HeartbeatSchedule {
public:
    using Clock = std::chrono::steady_clock;
    // A quiet side sends this many heartbeats per timeout, so one late or slow one does not make a loss.
    static constexpr int beats_per_timeout = 4;

    explicit HeartbeatSchedule(double timeout_seconds);

    struct Verdict {
        bool send = false;        // send a heartbeat now
        bool lost = false;        // nothing has arrived for the whole timeout
        Clock::time_point next;   // when to look again (unless lost)
    };
    // write_pending: bytes of ours are on their way out; they will prove us alive, a heartbeat behind them would not.
    Verdict check(Clock::time_point now, Clock::time_point last_received, Clock::time_point last_sent,
                  bool write_pending) const;

    double timeout_seconds() const { return timeout_seconds_; }
    Clock::duration timeout() const { return timeout_; }
    Clock::duration interval() const { return interval_; }

private:
    double timeout_seconds_;
    Clock::duration timeout_;
    Clock::duration interval_;
};

// Keeps one link's heartbeat (Link::keep_alive makes one): sends on it when it is quiet, and calls `lost` once if
// the peer falls silent for the timeout. It stops when the link closes. Any traffic counts both ways, so a busy
// link carries no heartbeats at all, and each link has its own: a daemon handles O(fanout) of them however large
// the tree.
class LinkHeartbeat {
public:
    // `reason` says what was seen, e.g. "no heartbeat for 2.1 s: hung, stopped or cut off (...)".
    using LostHandler = std::function<void(const std::string& reason)>;

    LinkHeartbeat(const boost::asio::any_io_executor& executor, const std::shared_ptr<Link>& link,
                  double timeout_seconds, LostHandler lost);
    LinkHeartbeat(const LinkHeartbeat&) = delete;
    LinkHeartbeat& operator=(const LinkHeartbeat&) = delete;

    // A new timeout, from now on (a daemon waits for its plan under one timeout, then takes the job's).
    void set_timeout(double timeout_seconds);
    // While held, the peer's silence is no loss: it was stopped on purpose (the launcher suspended with Ctrl-Z).
    // Beats still go out. Once released, silence counts from then.
    void hold(bool held);
    // No more beats nor checks: the link has closed.
    void stop();
    std::uint64_t beats_sent() const { return beats_sent_; }

private:
    void arm(HeartbeatSchedule::Clock::time_point when);
    void check();

    std::weak_ptr<Link> link_;
    HeartbeatSchedule schedule_;
    boost::asio::steady_timer timer_;
    LostHandler lost_;
    bool held_ = false;
    HeartbeatSchedule::Clock::time_point released_{};   // silence before this was excused
    std::uint64_t beats_sent_ = 0;
    Lifetime lifetime_;
};

} // namespace canopy
