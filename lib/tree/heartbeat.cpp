// Liveness of one tree link: heartbeats on a quiet link, and the peer declared lost after the timeout.
#include "tree/heartbeat.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "util/log.hpp"
#include "wire/messages.hpp"

namespace canopy {
namespace {

HeartbeatSchedule::Clock::duration to_duration(double seconds)
{
    return std::chrono::duration_cast<HeartbeatSchedule::Clock::duration>(std::chrono::duration<double>(seconds));
}

double to_seconds(HeartbeatSchedule::Clock::duration duration)
{
    return std::chrono::duration<double>(duration).count();
}

} // namespace

HeartbeatSchedule::HeartbeatSchedule(double timeout_seconds)
    : timeout_seconds_(timeout_seconds), timeout_(to_duration(timeout_seconds)),
      interval_(timeout_ / beats_per_timeout)
{
}

HeartbeatSchedule::Verdict HeartbeatSchedule::check(Clock::time_point now, Clock::time_point last_received,
                                                    Clock::time_point last_sent, bool write_pending) const
{
    Verdict verdict;
    if (now - last_received >= timeout_) {
        verdict.lost = true;
        verdict.next = now;
        return verdict;
    }
    bool quiet = now - last_sent >= interval_;
    verdict.send = quiet && !write_pending;
    // After a beat, or while a write is under way, the next one is due an interval from now.
    Clock::time_point next_beat = quiet ? now + interval_ : last_sent + interval_;
    verdict.next = std::min(next_beat, last_received + timeout_);
    return verdict;
}

LinkHeartbeat::LinkHeartbeat(const boost::asio::any_io_executor& executor, const std::shared_ptr<Link>& link,
                             double timeout_seconds, LostHandler lost)
    : link_(link), schedule_(timeout_seconds), timer_(executor), lost_(std::move(lost))
{
    arm(HeartbeatSchedule::Clock::now() + schedule_.interval());
}

void LinkHeartbeat::set_timeout(double timeout_seconds)
{
    schedule_ = HeartbeatSchedule(timeout_seconds);
    arm(HeartbeatSchedule::Clock::now());
}

void LinkHeartbeat::hold(bool held)
{
    if (held_ && !held)
        released_ = HeartbeatSchedule::Clock::now();
    held_ = held;
    arm(HeartbeatSchedule::Clock::now());
}

void LinkHeartbeat::stop() { timer_.cancel(); }

void LinkHeartbeat::arm(HeartbeatSchedule::Clock::time_point when)
{
    timer_.expires_at(when);   // cancels the wait before, whose handler then sees operation_aborted
    timer_.async_wait(lifetime_.guard([this](const boost::system::error_code& error) {
        if (!error)
            check();
    }));
}

void LinkHeartbeat::check()
{
    auto link = link_.lock();
    if (!link || !link->is_open())
        return;   // the link's owner has heard how it ended
    auto now = HeartbeatSchedule::Clock::now();
    auto heard = held_ ? now : std::max(link->last_received(), released_);
    auto verdict = schedule_.check(now, heard, link->last_sent(), link->queued_bytes() > 0);
    if (verdict.lost && link->has_unread_bytes()) {
        // Our own thread fell behind, not the peer: what it sent waits to be read. Look again once it has been.
        arm(now + schedule_.interval());
        return;
    }
    if (verdict.lost) {
        double silent = to_seconds(now - link->last_received());
        std::string reason = fmt::format("no heartbeat for {:.1f} s: hung, stopped or cut off ([tree] "
                                         "heartbeat_timeout is {:g} s)",
                                         silent, schedule_.timeout_seconds());
        area_logger("tree").debug("{}: {} after {} heartbeats sent", link->peer_name(), reason, beats_sent_);
        auto lost = lost_;   // the handler may end this object
        lost(reason);
        return;
    }
    if (verdict.send)
        link->send(wire::to_frame(wire::Heartbeat{++beats_sent_}));
    arm(verdict.next);
}

} // namespace canopy
