// The launcher's stdout and stderr, written on a thread of their own.
#include "output_writer.hpp"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <string_view>
#include <system_error>

#include "util/worker_thread.hpp"

namespace canopy {
namespace {

// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view data)
{
    while (!data.empty()) {
        ssize_t written = ::write(fd, data.data(), data.size());
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        data.remove_prefix(static_cast<std::size_t>(written));
    }
    return 0;
}

} // namespace

OutputWriter::~OutputWriter()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    queued_.notify_one();
    if (thread_.joinable())
        thread_.join();
}

void OutputWriter::queue(int fd, std::string data)
{
    if (data.empty())
        return;
    std::unique_lock lock(mutex_);
    queued_bytes_ += data.size();
    queue_.emplace_back(fd, std::move(data));
    // Started by the first output, not before: the launcher forks guards early, best with no other thread.
    if (!thread_.joinable() && !inline_) {
        try {
            thread_ = worker_thread([this] { run(); });
        } catch (const std::system_error&) {
            inline_ = true;   // at the process limit: what says so must still come out, if on the caller's thread
        }
    }
    if (inline_) {
        while (!queue_.empty())
            write_front(lock);
        return;
    }
    lock.unlock();
    queued_.notify_one();
}

void OutputWriter::flush()
{
    std::unique_lock lock(mutex_);
    written_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

std::size_t OutputWriter::queued_bytes()
{
    std::lock_guard lock(mutex_);
    return queued_bytes_;
}

int OutputWriter::write_error(int fd)
{
    std::lock_guard lock(mutex_);
    return errors_[fd == fds_[0] ? 0 : 1];
}

void OutputWriter::when_below(std::size_t bytes, std::function<void()> below)
{
    {
        std::lock_guard lock(mutex_);
        if (queued_bytes_ >= bytes) {
            below_bytes_ = bytes;
            below_ = std::move(below);
            return;
        }
    }
    below();
}

void OutputWriter::run()
{
    // Every signal is the io thread's to handle, SIGTTOU too: a write to the terminal from the background goes
    // through rather than stopping the launcher.
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::unique_lock lock(mutex_);
    for (;;) {
        queued_.wait(lock, [this] { return !queue_.empty() || stopping_; });
        if (queue_.empty())
            return;
        write_front(lock);
    }
}

void OutputWriter::write_front(std::unique_lock<std::mutex>& lock)
{
    auto [fd, data] = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    int stream = fd == fds_[0] ? 0 : 1;
    int error = errors_[stream] ? 0 : write_all(fd, data);   // only the writing thread sets errors_
    if (error) {
        {
            std::lock_guard failed_lock(mutex_);
            errors_[stream] = error;
        }
        if (failed_)
            failed_(fd, error);
    }
    lock.lock();
    writing_ = false;
    queued_bytes_ -= data.size();
    if (below_ && queued_bytes_ < below_bytes_) {
        auto below = std::exchange(below_, nullptr);
        lock.unlock();
        below();
        lock.lock();
    }
    if (queue_.empty())
        written_.notify_all();
}

} // namespace canopy
