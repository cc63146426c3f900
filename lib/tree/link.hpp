// An authenticated, framed TCP connection between a parent and a child in the tree.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "timing/clock.hpp"
#include "tree/link_state.hpp"
#include "util/result.hpp"
#include "wire/auth.hpp"
#include "wire/codec.hpp"

namespace canopy {

class LinkHeartbeat;

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Moves frames; knows nothing about what they mean, except heartbeats, which it takes itself (lib/tree/heartbeat).
// Writes are queued and never interleave.
class Link : public std::enable_shared_from_this<Link> {
public:
    using Clock = std::chrono::steady_clock;
    using FrameHandler = std::function<void(wire::Frame frame)>;
    // Called once, when the connection ends; the message is empty for an orderly close.
    using CloseHandler = std::function<void(const std::string& reason)>;

    Link(tcp::socket socket, std::string peer_name);
    ~Link();
    Link(const Link&) = delete;
    Link& operator=(const Link&) = delete;

    void start(FrameHandler on_frame, CloseHandler on_close);
    // A frame many links send (a broadcast): queued on each without a copy per link.
    using SharedFrame = std::shared_ptr<const std::vector<std::uint8_t>>;
    // `urgent`: ahead of every frame queued but not yet being written (after earlier urgent ones), so that a
    // small answer someone waits for does not wait behind bulk data.
    void send(std::vector<std::uint8_t> frame, bool urgent = false);
    void send(SharedFrame frame, bool urgent = false);
    // Flushes queued frames, ends our side after them, and reads (dropping what comes) until the peer closes or
    // linger_seconds pass; then the close handler hears an orderly end. Closing with the peer's bytes unread (a
    // heartbeat that crossed our last frame) would make the kernel reset the connection and drop what the peer had
    // not read yet. close() drops the queue; its reason goes to the close handler.
    void close_after_flush(double linger_seconds);
    void close(const std::string& reason = {});
    // Heartbeats from now on (lib/tree/heartbeat): one goes out when we have been quiet, and a peer that sends
    // nothing for `timeout_seconds` fails the link with a reason saying so. Called again, takes the new timeout.
    void keep_alive(double timeout_seconds);
    // While held, the peer's silence is not a loss (LinkHeartbeat::hold); beats still go out.
    void hold_heartbeat_checks(bool held);
    // The peer fell silent for the heartbeat timeout: hung, stopped or cut off, so it will not leave by itself.
    bool peer_silent() const { return state_ == LinkState::peer_silent; }
    const std::string& peer_name() const { return peer_name_; }
    // Bytes waiting to be written: a bulk sender paces itself on this.
    std::size_t queued_bytes() const { return queued_bytes_; }
    // `room` runs once, as soon as fewer than `bytes` wait to be written (at once if that is so now); never if the
    // link closes first.
    void when_queued_below(std::size_t bytes, std::function<void()> room);
    bool is_open() const { return !link_ended(state_); }
    LinkState state() const { return state_; }
    // While paused, nothing more is read from the peer (what was read is still handled): TCP then holds the
    // peer's next frames in its queue and the kernel's buffers. A relay paces its parent this way (RelayPacing).
    void pause_reading();
    void resume_reading();
    bool reading_paused() const { return reading_ != Reading::on; }
    tcp::endpoint local_endpoint() const;
    // When bytes last arrived from the peer, and when a write of ours last went out (the link's start before
    // either): any traffic proves a peer alive, so heartbeats are only needed on a quiet link.
    Clock::time_point last_received() const { return last_received_; }
    Clock::time_point last_sent() const { return last_sent_; }
    // Bytes the kernel holds for us that we have not read yet: if our own thread was busy, the peer may have
    // spoken although last_received() is old.
    bool has_unread_bytes() const;

private:
    void read_more();
    void write_next();
    void tell_room();   // runs the when_queued_below callbacks whose mark the queue is now under
    void end_our_side();
    void close_as(LinkState how, const std::string& reason);
    void finish(LinkState how, const std::string& reason);
    // The one place state_ changes: a move link_transitions does not list is refused and logged.
    bool move_to(LinkState next);

    tcp::socket socket_;
    std::string peer_name_;
    FrameHandler on_frame_;
    CloseHandler on_close_;
    wire::FrameDecoder decoder_{wire::max_frame};
    // Allocated without zeroing: idle links should not cost resident memory.
    static constexpr std::size_t read_buffer_size = 16 * 1024;
    std::unique_ptr<std::uint8_t[]> read_buffer_;
    std::deque<SharedFrame> write_queue_;
    std::size_t queued_bytes_ = 0;
    std::size_t urgent_queued_ = 0;   // urgent frames behind the front of write_queue_
    LinkState state_ = LinkState::open;
    // Apart from state_: a write is in flight in open and flushing alike (flushing ends when none is).
    bool writing_ = false;
    // Apart from state_: a pacer pauses reading whatever the lifecycle; only our FIN resumes it.
    enum class Reading {
        on,
        paused,   // the read in flight is handled, then no next one starts
        parked,   // paused, and no read is in flight: resuming starts one
    };
    Reading reading_ = Reading::on;
    double linger_seconds_ = 0;
    asio::steady_timer linger_;
    std::unique_ptr<LinkHeartbeat> heartbeat_;
    std::vector<std::pair<std::size_t, std::function<void()>>> waiting_for_room_;   // when_queued_below
    Clock::time_point last_received_ = Clock::now();
    Clock::time_point last_sent_ = last_received_;
};

// Parent side of the handshake: challenge, check the child's proof, prove ourselves, answer clock pings.
// Returns the position the child proved it is.
// Gives up after timeout_seconds, so a silent stranger cannot hold a connection open.
// clock_rounds: ping/pong rounds for the clock offset; 0 when parent and child share a clock (same host).
asio::awaitable<Result<std::uint64_t>> accept_child(tcp::socket& socket, const auth::Key& key,
                                                    double timeout_seconds, int clock_rounds);

struct ParentHandshake {
    timing::ClockOffset offset;   // parent clock = our clock + offset
};

// Child side: answer the challenge for `position`, check the parent's proof, and measure the clock offset.
asio::awaitable<Result<ParentHandshake>> connect_to_parent(tcp::socket& socket, const auth::Key& key,
                                                           std::uint64_t position, double timeout_seconds,
                                                           int clock_rounds);

// Clock ping/pong rounds after the handshake between different hosts; the smallest round trip wins.
inline constexpr int clock_rounds_between_hosts = 3;

} // namespace canopy
