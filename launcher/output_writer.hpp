// The launcher's stdout and stderr, written on a thread of their own so that a reader who stalls does not stall
// the launcher.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace canopy {

// A paused pager or a full pipe blocks write(). On the io thread that would stop the launcher's heartbeats, and
// every daemon would take the launcher for hung (docs/architecture.md, "Liveness"). So the io thread only queues,
// and this thread writes, in the order queued across both streams. What a stalled reader has not taken waits here.
class OutputWriter {
public:
    // The streams' descriptors: the launcher's own, or a test's pipes.
    explicit OutputWriter(int stdout_fd = 1, int stderr_fd = 2) : fds_{stdout_fd, stderr_fd} {}
    ~OutputWriter();   // writes what is queued first
    OutputWriter(const OutputWriter&) = delete;
    OutputWriter& operator=(const OutputWriter&) = delete;

    void to_stdout(std::string data) { queue(fds_[0], std::move(data)); }
    void to_stderr(std::string data) { queue(fds_[1], std::move(data)); }
    // Returns once everything queued so far is written (or its stream has gone).
    void flush();
    // Bytes queued and not yet written.
    std::size_t queued_bytes();
    // Calls `below` once, on the writer's thread, when fewer than `bytes` remain queued (at once if that is so now).
    void when_below(std::size_t bytes, std::function<void()> below);
    // Called on the writer's thread, once per stream, when a write to it fails: its reader has gone (EPIPE), or the
    // output cannot be stored (ENOSPC on a full disk, EBADF on a descriptor the launcher was started without).
    // Later output to it is dropped. Set before the first output.
    void on_failed(std::function<void(int fd, int error)> failed) { failed_ = std::move(failed); }
    // The errno that made a write to the stream `fd` fail, or 0: what flush() leaves to be reported.
    int write_error(int fd);

private:
    void queue(int fd, std::string data);
    void run();
    // Writes the piece at the front of the queue: called and returns with `lock` held, which it drops meanwhile.
    void write_front(std::unique_lock<std::mutex>& lock);

    int fds_[2];
    int errors_[2] = {0, 0};   // why writing the stream failed: set by the writer's thread, under mutex_
    std::function<void(int fd, int error)> failed_;
    std::mutex mutex_;
    std::condition_variable queued_;    // wakes the writer
    std::condition_variable written_;   // wakes flush()
    std::deque<std::pair<int, std::string>> queue_;
    std::size_t queued_bytes_ = 0;   // in queue_ and in the piece being written
    std::size_t below_bytes_ = 0;
    std::function<void()> below_;
    bool writing_ = false;   // the writer holds a piece it took off the queue
    bool stopping_ = false;
    bool inline_ = false;   // no thread could be started: the caller writes, blocking
    std::thread thread_;
};

} // namespace canopy
