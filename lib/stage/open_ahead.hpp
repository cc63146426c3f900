// Opens a list of files in order on several threads, a bounded window ahead of the one that reads them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stage/directory_handles.hpp"

namespace canopy::stage {

// On a shared filesystem each open waits out a metadata round trip, while reading the bytes does not. Sending a
// manifest's files one open after another cost the root a round trip per file; here up to `threads` opens wait
// at once, at most `window` files ahead of the last one taken, so at most that many descriptors are held.
class OpenAhead {
public:
    static constexpr std::size_t default_threads = 8;
    static constexpr std::size_t default_window = 32;

    // Opens `paths` (absolute, normalised) for reading through `handles`, which must outlive this.
    OpenAhead(DirectoryHandles& handles, std::vector<std::string> paths, std::size_t threads = default_threads,
              std::size_t window = default_window);
    // Waits for the opens in progress, then closes what was opened and not taken.
    ~OpenAhead();
    OpenAhead(const OpenAhead&) = delete;
    OpenAhead& operator=(const OpenAhead&) = delete;

    // File `index`'s descriptor, which the caller then owns, or -1 with `error` set; waits until it is open.
    // Indices are taken in order, each once.
    int take(std::size_t index, int& error);

private:
    void open_files(DirectoryHandles& handles);

    std::vector<std::string> paths_;
    std::size_t window_;
    std::mutex mutex_;
    std::condition_variable opened_, room_;
    std::vector<int> fds_, errors_;
    std::vector<bool> done_;
    std::size_t next_ = 0;    // the next file a thread opens
    std::size_t taken_ = 0;   // files taken so far
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

} // namespace canopy::stage
