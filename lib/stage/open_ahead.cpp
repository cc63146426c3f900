#include "stage/open_ahead.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "util/worker_thread.hpp"

namespace canopy::stage {

OpenAhead::OpenAhead(DirectoryHandles& handles, std::vector<std::string> paths, std::size_t threads,
                     std::size_t window)
    : paths_(std::move(paths)),
      window_(std::max<std::size_t>(window, 1)),
      fds_(paths_.size(), -1),
      errors_(paths_.size(), 0),
      done_(paths_.size(), false)
{
    threads = std::min(std::max<std::size_t>(threads, 1), paths_.size());
    for (std::size_t t = 0; t < threads; ++t)
        threads_.push_back(worker_thread([this, &handles] { open_files(handles); }));
}

OpenAhead::~OpenAhead()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    room_.notify_all();
    for (auto& thread : threads_)
        thread.join();
    for (int fd : fds_)   // taken ones are -1
        if (fd >= 0)
            ::close(fd);
}

void OpenAhead::open_files(DirectoryHandles& handles)
{
    std::unique_lock lock(mutex_);
    for (;;) {
        room_.wait(lock, [&] { return stopping_ || next_ >= paths_.size() || next_ < taken_ + window_; });
        if (stopping_ || next_ >= paths_.size())
            return;
        std::size_t index = next_++;
        lock.unlock();
        int fd = handles.open_file(paths_[index], O_RDONLY);
        int error = fd < 0 ? errno : 0;
        lock.lock();
        fds_[index] = fd;
        errors_[index] = error;
        done_[index] = true;
        opened_.notify_all();
    }
}

int OpenAhead::take(std::size_t index, int& error)
{
    std::unique_lock lock(mutex_);
    opened_.wait(lock, [&] { return done_[index]; });
    taken_ = std::max(taken_, index + 1);
    room_.notify_all();
    error = errors_[index];
    return std::exchange(fds_[index], -1);
}

} // namespace canopy::stage
