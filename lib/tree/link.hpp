// An authenticated, framed TCP connection between a parent and a child in the tree.
#pragma once

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
#include "util/result.hpp"
#include "wire/auth.hpp"
#include "wire/codec.hpp"

namespace canopy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Moves frames; knows nothing about what they mean. Writes are queued and never interleave.
class Link : public std::enable_shared_from_this<Link> {
public:
    using FrameHandler = std::function<void(wire::Frame frame)>;
    // Called once, when the connection ends; the message is empty for an orderly close.
    using CloseHandler = std::function<void(const std::string& reason)>;

    Link(tcp::socket socket, std::string peer_name);

    void start(FrameHandler on_frame, CloseHandler on_close);
    void send(std::vector<std::uint8_t> frame);
    // Flushes queued frames, then closes. close() drops them; its reason goes to the close handler.
    void close_after_flush();
    void close(const std::string& reason = {});
    const std::string& peer_name() const { return peer_name_; }
    // Bytes waiting to be written: a bulk sender paces itself on this.
    std::size_t queued_bytes() const { return queued_bytes_; }
    bool is_open() const { return !closed_; }
    tcp::endpoint local_endpoint() const;

private:
    void read_more();
    void write_next();
    void finish(const std::string& reason);

    tcp::socket socket_;
    std::string peer_name_;
    FrameHandler on_frame_;
    CloseHandler on_close_;
    wire::FrameDecoder decoder_{wire::max_frame};
    // Allocated without zeroing: idle links should not cost resident memory.
    static constexpr std::size_t read_buffer_size = 16 * 1024;
    std::unique_ptr<std::uint8_t[]> read_buffer_;
    std::deque<std::vector<std::uint8_t>> write_queue_;
    std::size_t queued_bytes_ = 0;
    bool writing_ = false;
    bool close_when_flushed_ = false;
    bool closed_ = false;
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
