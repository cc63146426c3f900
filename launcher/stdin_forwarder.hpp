// The launcher's stdin, read on a thread of its own and sent to rank 0 no faster than rank 0 takes it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "wire/messages.hpp"

namespace canopy {

// The stdin bytes on their way to rank 0: sent and not yet reported taken (wire::StdinTaken). The reader waits for
// room before it reads, so stdin is read only as fast as rank 0 takes it, and no hop (the launcher's link, each
// daemon on the way, rank 0's daemon in front of its pipe) ever holds more than the window. Thread-safe: the reader
// thread waits and sends, the io thread takes and closes.
class StdinWindow {
public:
    explicit StdinWindow(std::size_t bytes) : bytes_(bytes) {}

    // Blocks until `chunk` more bytes fit (or the window is closed: false).
    bool wait_for_room(std::size_t chunk);
    // Counts `bytes` as on their way and runs `send` under the window's lock, unless it is closed (false): once
    // close() has returned, no send runs.
    bool send(std::size_t bytes, const std::function<void()>& send);
    // Rank 0's node took `bytes` (wrote them to rank 0, or dropped them once rank 0 closed its stdin).
    void taken(std::size_t bytes);
    // No more stdin is wanted: rank 0 closed it, or the job is over. A waiting reader returns.
    void close();
    std::size_t on_the_way();

private:
    std::mutex mutex_;
    std::condition_variable room_;
    const std::size_t bytes_;
    std::size_t on_the_way_ = 0;
    bool closed_ = false;
};

class StdinForwarder {
public:
    // At most this much stdin is on its way at once; read in pieces of chunk_bytes.
    static constexpr std::size_t window_bytes = 1u << 20;
    static constexpr std::size_t chunk_bytes = 64u << 10;

    explicit StdinForwarder(boost::asio::io_context& io) : io_(io) {}
    // Closes the window: a reader still blocked in read() sends nothing after this.
    ~StdinForwarder();
    StdinForwarder(const StdinForwarder&) = delete;
    StdinForwarder& operator=(const StdinForwarder&) = delete;

    // Reads fd 0 until its end on a thread of its own, for the daemon at tree position `target`; `send` puts each
    // frame on its way there, on the io thread.
    void start(std::uint64_t target, std::function<void(std::vector<std::uint8_t> frame)> send);
    // Rank 0's node reported stdin taken.
    void taken(const wire::StdinTaken& taken);

private:
    boost::asio::io_context& io_;
    std::function<void(std::vector<std::uint8_t>)> send_;
    std::shared_ptr<StdinWindow> window_ = std::make_shared<StdinWindow>(window_bytes);
};

} // namespace canopy
