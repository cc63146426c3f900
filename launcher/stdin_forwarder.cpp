// The launcher's stdin, sent to rank 0 within a window of bytes on their way.
#include "stdin_forwarder.hpp"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include <boost/asio/post.hpp>

#include "util/worker_thread.hpp"

namespace canopy {

bool StdinWindow::wait_for_room(std::size_t chunk)
{
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return closed_ || on_the_way_ + chunk <= bytes_; });
    return !closed_;
}

bool StdinWindow::send(std::size_t bytes, const std::function<void()>& send)
{
    std::lock_guard lock(mutex_);
    if (closed_)
        return false;
    on_the_way_ += bytes;
    send();
    return true;
}

void StdinWindow::taken(std::size_t bytes)
{
    {
        std::lock_guard lock(mutex_);
        on_the_way_ -= std::min(bytes, on_the_way_);
    }
    room_.notify_all();
}

void StdinWindow::close()
{
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
    }
    room_.notify_all();
}

std::size_t StdinWindow::on_the_way()
{
    std::lock_guard lock(mutex_);
    return on_the_way_;
}

StdinForwarder::~StdinForwarder() { window_->close(); }

void StdinForwarder::start(std::uint64_t target, std::function<void(std::vector<std::uint8_t>)> send)
{
    send_ = std::move(send);
    // A blocking reader thread: stdin may be a file, a pipe or a terminal, and epoll accepts only some of those.
    // Detached: it may block in read() until the process exits; the window keeps it from sending after we are gone.
    worker_thread([this, window = window_, target] {
        auto buffer = std::make_unique_for_overwrite<char[]>(chunk_bytes);
        for (;;) {
            if (!window->wait_for_room(chunk_bytes))
                return;
            ssize_t got = ::read(STDIN_FILENO, buffer.get(), chunk_bytes);
            if (got < 0 && errno == EINTR)
                continue;
            wire::StdinData data{target, {}, got <= 0};
            if (got > 0)
                data.data.assign(buffer.get(), static_cast<std::size_t>(got));
            bool sent = window->send(data.data.size(), [&] {
                boost::asio::post(io_, [this, frame = wire::to_frame(data)]() mutable { send_(std::move(frame)); });
            });
            if (!sent || got <= 0)
                return;
        }
    }).detach();
}

void StdinForwarder::taken(const wire::StdinTaken& taken)
{
    window_->taken(taken.bytes);
    if (taken.closed)
        window_->close();   // rank 0 will read no more: stdin is left unread, as mpirun leaves it
}

} // namespace canopy
