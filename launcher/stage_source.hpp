// The root's side of file staging: prepares the index, then streams it and the staged contents down the tree.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launch_plan.hpp"
#include "proc/process.hpp"
#include "stage/directory_handles.hpp"
#include "stage/fetch_cache.hpp"
#include "stage/index.hpp"
#include "stage/open_ahead.hpp"
#include "tree/bulk_route.hpp"
#include "util/result.hpp"

namespace canopy {

struct PreparedStage {
    stage::Index index;
    std::string warning;   // set when a manifest was stale: what changed, for one line to the user
    std::string learn;     // a manifest that does not exist yet: staged on demand, written from what was fetched
};

// Whether the job stages on demand: no manifest, or one that does not exist yet (to be learned).
bool stages_on_demand(const StageSettings& settings);

// Runs on a worker thread while the tree starts. A manifest is loaded and validated against the filesystem
// (size, mtime, inode, listings) and refreshed if anything changed; without a manifest the index holds only the
// prefixes and their listings, and the nodes fetch the rest on demand through the tree (StageFetchTree).
// A manifest that does not exist yet is learned: the job stages on demand and learn_manifest writes it at the end.
Result<PreparedStage> prepare_stage(const StageSettings& settings);

// Builds a manifest from what the root fetched on demand (no filesystem lookups beyond the paths' ancestors)
// and writes it to `file`. Returns the index written.
Result<stage::Index> learn_manifest(const std::string& file, const std::vector<std::string>& prefixes,
                                    const std::map<std::string, stage::FetchAnswer>& answers);

// Streams the index, then every staged file in content order, to all children, chunk by chunk. The index goes at
// once, ahead of what the links have queued (a first job's read-ahead): every node waits for it before its ranks
// start. Each file chunk waits while any child still has more than a few chunks queued, so memory stays bounded
// however large the files are and every daemon forwards each chunk as soon as it has it (a pipelined broadcast
// down the tree).
class StageSender {
public:
    static constexpr std::size_t chunk_bytes = 1 << 20;
    static constexpr std::size_t max_queued_bytes = 4 * chunk_bytes;

    struct Progress {
        std::uint64_t bytes_sent = 0, bytes_total = 0;
        std::size_t files_sent = 0, files_total = 0;
    };

    StageSender(boost::asio::io_context& io, BulkRoute& children, const stage::Index& index);

    // `done` runs once: when everything is queued, or with an error naming a file the root could not read.
    void start(std::function<void(Status)> done);
    void stop();
    const Progress& progress() const { return progress_; }

private:
    void pump();
    Status send_next_chunk();
    void finish(Status status);

    boost::asio::steady_timer timer_;
    BulkRoute& children_;
    const stage::Index& index_;
    std::vector<stage::ContentFile> files_;
    std::size_t index_offset_ = 0;   // bytes of the index blob sent so far
    bool index_sent_ = false;
    stage::DirectoryHandles directories_;   // each directory of the staged files opened once
    std::unique_ptr<stage::OpenAhead> opener_;   // the files, opened ahead of the one being sent
    UniqueFd file_;                  // the file being sent, open
    std::uint64_t file_offset_ = 0;
    std::vector<std::uint8_t> chunk_buffer_ = std::vector<std::uint8_t>(chunk_bytes);   // read into, then framed
    Progress progress_;
    std::function<void(Status)> done_;
    bool stopped_ = false;
};

} // namespace canopy
