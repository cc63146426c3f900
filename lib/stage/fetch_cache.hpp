// On-demand staging at one tree position: answers cached per path, identical requests merged, misses sent up.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stage/directory_handles.hpp"
#include "stage/index.hpp"
#include "stage/node_cache.hpp"
#include "util/result.hpp"

namespace canopy::stage {

enum class FetchKind : std::uint8_t {
    metadata = 1, // the lstat and stat views and the symlink target
    content = 2,  // also a regular file's content, or a directory's listing (and its skeleton)
};

// How the root reads a path ahead of any request, and how soon.
enum class Ahead : std::uint8_t {
    neighbour,   // beside what ranks use: a small file whole, a larger one's metadata only; after the others
    next,        // what a rank is about to ask for (a module an import names, the listing that says where it is)
    load,        // a library the ranks will load: as soon as `next`, and whole whatever its size
    program,     // a program the ranks run: as soon as `load`. A binary's metadata and ELF headers only: the kernel
                 // maps it from the shared filesystem, not from the nodes' caches. A script as `next` (its
                 // interpreter opens it)
};

// What the root's filesystem said about one path, as the program spelled it (absolute, normalized).
// `mirror` is set for content and listings: content() is a regular file whose copy is at
// NodeCache::content_path(mirror), listed() a directory whose skeleton is at skeleton_path(mirror); facts.open_errno
// is what opening either at the root failed with.
struct FetchAnswer : KnownPath {
    // Whether this answer also serves a request of `kind` (a metadata answer to a file lacks its content).
    bool serves(FetchKind kind) const;
    ContentFile content_file() const;

    // Came down in a read-ahead push, which this position passed on to all its children before using it: they
    // have its content, and a reply need not carry it again.
    bool pushed = false;
};

// The root's side: lstat, stat and readlink of `path`; for content, a regular file is copied into `cache` and a
// directory listed. An unreadable path is an answer (its errno); an error is a failure of the cache itself.
// With `directories`, a path is reached through its directory's handle: one lookup instead of one per component,
// and so is a symlink's target when it can be found without "..".
// A regular file larger than `content_limit` bytes (when >= 0) is not copied: the answer holds its metadata only.
Result<FetchAnswer> read_local(FetchKind kind, const std::string& path, NodeCache& cache,
                               DirectoryHandles* directories = nullptr, std::int64_t content_limit = -1);

// The cache and the in-flight table of one tree position. Not thread-safe: the daemon's (or root's) event loop
// owns it. A miss goes up through `send_up` once, however many callers wait; its answer comes back through
// answer()/content()/fail() and is kept for every later caller.
class FetchCache {
public:
    // `status` is an error when no answer could be had (parent lost, root cache full): fall back.
    using Done = std::function<void(const Status& status, const FetchAnswer& answer)>;
    using SendUp = std::function<void(std::uint64_t id, FetchKind kind, const std::string& path)>;

    struct Counters {
        std::uint64_t from_cache = 0;       // answered from what this position already had (pushed or asked)
        std::uint64_t inferred_missing = 0; // ENOENT/ENOTDIR known from an ancestor (missing, or its listing)
        std::uint64_t merged = 0;           // joined a request already on its way up
        std::uint64_t sent_up = 0;          // requests sent to the parent (the root: filesystem reads)
        std::uint64_t failed = 0;
        std::uint64_t content_bytes = 0;    // written into this position's cache
        std::uint64_t pushed = 0;           // answers learned from read-ahead pushes
        std::uint64_t read_ahead = 0;       // the root: reads started ahead of any request
        std::uint64_t fetched_ahead = 0;    // files fetched whole because a push said the ranks will load them
        // Questions this position answered without asking its parent (the root: without reading).
        std::uint64_t answered_here() const { return from_cache + inferred_missing + merged; }
    };

    FetchCache(NodeCache cache, SendUp send_up);

    // `path` must be absolute and normalized (canopy_stage_normalize); `done` may run before this returns.
    void fetch(FetchKind kind, const std::string& path, Done done);

    // The answer to request `id`. With `content_follows` (a regular file's content), the bytes arrive through
    // content(); otherwise a content answer's copy must already be in the cache (the root wrote it).
    Status answer(std::uint64_t id, FetchAnswer answer, bool content_follows);
    Status content(std::uint64_t id, std::span<const unsigned char> chunk, bool last);
    void fail(std::uint64_t id, const std::string& why);
    void fail_all(const std::string& why);

    // An answer pushed ahead of any request (`content`: a regular file's whole bytes when it says CONTENT, written
    // into the cache first). Kept unless a richer one is here; callers waiting for `path` whom it serves are
    // answered at once, and the replies to their requests, still on the way, are then dropped.
    Status learn(const std::string& path, FetchAnswer answer, std::span<const unsigned char> content);

    // The root's read-ahead: reads `path` through `send_ahead` unless it is known or on its way (then `hasten`
    // hears of a read on its way as a neighbour that is now wanted sooner). A caller who then asks for it waits
    // for that read; `promote` hears of it, so that the read can move ahead of other read-ahead.
    using SendAhead = std::function<void(std::uint64_t id, FetchKind kind, const std::string& path, Ahead ahead)>;
    using Reorder = std::function<void(std::uint64_t id)>;
    void set_read_ahead(SendAhead send_ahead, Reorder promote, Reorder hasten);
    void read_ahead(FetchKind kind, const std::string& path, Ahead ahead = Ahead::neighbour);
    // A node's side of a pushed library too large for the push: fetches its content now, for the ranks to come.
    void fetch_ahead(const std::string& path);
    // Whether request `id` has callers waiting (a read-ahead may have none).
    bool has_waiters(std::uint64_t id) const;
    // Whether read-ahead `id` was wanted whole after it was started as a small-file read.
    bool wanted_whole(std::uint64_t id) const;

    const NodeCache& cache() const { return cache_; }
    NodeCache& cache() { return cache_; }
    const Counters& counters() const { return counters_; }
    std::size_t in_flight() const { return pending_.size(); }
    const FetchAnswer* cached(const std::string& path) const;
    // Every answer this position holds, by path as the program spelled it.
    const std::map<std::string, FetchAnswer>& answers() const { return answers_; }

private:
    struct Pending {
        FetchKind kind;
        std::string path;
        std::vector<Done> waiters;
        std::optional<FetchAnswer> answer;
        std::optional<NodeCache::ContentWriter> writer;
        bool ahead = false;     // a read-ahead no caller has asked for yet
        bool whole = false;     // a read-ahead of a file, whatever its size (Ahead::load)
        bool learned = false;   // a push answered its callers: its own reply is dropped
    };

    // An errno the cache can tell without asking: an ancestor is missing or not a directory, or its complete
    // listing lacks the next name. 0 when it cannot tell.
    int known_failure(const std::string& path) const;
    // An answer from elsewhere is usable here: its mirror and names are plain, and a listing's skeleton is made.
    Status checked(const std::string& path, const FetchAnswer& answer);
    void complete(std::uint64_t id, Status status);

    NodeCache cache_;
    SendUp send_up_;
    SendAhead send_ahead_;
    Reorder promote_;
    Reorder hasten_;
    std::map<std::string, FetchAnswer> answers_;
    std::map<std::pair<FetchKind, std::string>, std::uint64_t> in_flight_;
    std::map<std::uint64_t, Pending> pending_;
    std::uint64_t next_id_ = 1;
    Counters counters_;
};

} // namespace canopy::stage
