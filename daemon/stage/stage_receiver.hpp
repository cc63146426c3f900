// A node's side of file staging: writes the index and the file contents arriving from the parent into the node
// cache, so the ranks can be served from it (docs/staging.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stage/index.hpp"
#include "stage/node_cache.hpp"
#include "util/result.hpp"
#include "wire/codec.hpp"

namespace canopy {

class StageReceiver {
public:
    // `cache_dir`: the node cache the daemon created for the job (stage::NodeCache::create).
    explicit StageReceiver(std::string cache_dir) : dir_(std::move(cache_dir)) {}

    // Takes the next stage-index or stage-content frame, in the order the parent sent them. An error is one
    // line naming what failed (a full /dev/shm, a damaged index); the job cannot run staged after it.
    Status take(const wire::Frame& frame);

    // The index and every file have arrived: install() may run.
    bool ready_to_install() const { return index_ && next_file_ == files_.size() && !complete_; }
    // Writes the directory skeleton and the index: thousands of file creations, seconds on a busy disk, so the
    // node runs it off its event loop. Nothing else may use the receiver until it returns.
    Status install();
    // install() succeeded: ranks started from now on are served by the cache.
    void mark_installed() { complete_ = true; }
    bool complete() const { return complete_; }
    const std::string& cache_dir() const { return dir_; }
    // The installed index holds `path`, and says it is a regular file (symlinks followed) this process may run.
    bool knows_executable(const std::string& path) const;
    // The installed index's prefixes hold `path`.
    bool staged(const std::string& path) const;
    // `facts` say a regular file (symlinks followed) this process may run.
    static bool executable(const canopy_stage_path_facts& facts);
    std::uint64_t content_bytes() const { return content_bytes_; }
    std::size_t files() const { return files_.size(); }

private:
    Status take_index(bool more, std::span<const std::uint8_t> chunk);
    Status take_content(std::uint32_t file, bool last, std::span<const std::uint8_t> chunk);

    std::string dir_;
    std::vector<std::uint8_t> index_blob_;
    std::optional<stage::Index> index_;
    std::optional<stage::NodeCache> cache_;
    std::vector<stage::ContentFile> files_;
    std::optional<stage::NodeCache::ContentWriter> writer_;
    std::uint32_t next_file_ = 0;
    std::uint64_t content_bytes_ = 0;
    bool complete_ = false;
};

} // namespace canopy
