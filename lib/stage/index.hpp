// The stage index at the root: built from looked-up paths, serialized to one blob, validated and refreshed.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stage/index_format.h"
#include "stage/path_facts.h"
#include "util/result.hpp"

namespace canopy::stage {

// One path the program looked up, and whether it read the content (then the content is staged).
struct PathRequest {
    std::string path; // absolute
    bool read_content = false;
};

// A file whose content the node cache must hold at <cache>/root<mirror>.
struct ContentFile {
    std::string mirror; // canonical absolute path on the root's filesystem
    std::int64_t size = 0;
    std::int64_t mtime_sec = 0;
    std::int64_t mtime_nsec = 0;
    std::uint32_t mode = 0;
};

struct ListedName {
    std::string name;
    unsigned char type = 0;  // DT_*
    std::string link_target; // DT_LNK only
};

// A directory whose skeleton the node cache creates at <cache>/dirs<mirror>.
struct ListedDirectory {
    std::string mirror;
    std::vector<ListedName> names;
};

// What is known about one path: what the filesystem says now, or what the root learned from on-demand answers
// (so that building an index from them needs no lookup of its own).
struct KnownPath {
    canopy_stage_path_facts facts{};
    std::string link;                // the lstat view is a symlink: its target
    std::string mirror;              // canonical path of the followed object; empty when not known
    std::vector<ListedName> listing; // listed(): the directory's names

    bool content() const { return (facts.flags & CANOPY_STAGE_CONTENT) != 0; }
    bool listed() const { return (facts.flags & CANOPY_STAGE_LISTED) != 0; }
    // The listing's entry `name`, or null. A listing is sorted by name, as the root reads and sends it.
    const ListedName* listed_name(std::string_view name) const;
    // The listing's first entry whose name is not less than `name`: entries that start with it follow.
    std::vector<ListedName>::const_iterator listed_from(std::string_view name) const;
    // The followed view exists and is of `type` (S_IFREG, S_IFDIR, ...).
    bool followed_is(std::uint32_t type) const
    {
        return facts.stat_errno == 0 && (facts.stat.mode & S_IFMT) == type;
    }
};

struct BuildOptions {
    std::vector<std::string> prefixes; // absolute; symlinked prefixes are added in their resolved form too
    // Store the complete listing of every directory under a prefix that the index holds, so that a lookup of
    // a name the recording never saw is answered ENOENT locally instead of reaching the shared filesystem.
    bool list_directories = true;
    // Asked before the filesystem for each path the index needs (empty: the filesystem answers everything).
    std::function<const KnownPath*(const std::string& path)> known = nullptr;
};

// The read-only view of one entry (a path as the program spelled it).
struct EntryInfo {
    std::string path;
    canopy_stage_path_facts facts{}; // flags: the entry's (canopy_stage_flags)
    std::string link_target;
    std::string mirror;
    std::vector<std::string> listing; // names, sorted
};

// An index: the blob plus a checked view over it. Move-only in spirit: the view points into blob_.
class Index {
public:
    // Checks magic, version, bounds and checksum; the error names `origin` (a file or "the tree").
    static Result<Index> from_blob(std::vector<unsigned char> blob, std::string_view origin = "stage index");
    static Result<Index> load(const std::string& file);

    Index(Index&& other) noexcept;
    Index& operator=(Index&& other) noexcept;
    Index(const Index&) = delete;
    Index& operator=(const Index&) = delete;

    // Writes the blob to `file` atomically (temp file + rename), so a concurrent reader sees old or new. `what`
    // names the file in errors: a manifest the user keeps, or the stage index of a node cache.
    Status save(const std::string& file, std::string_view what = "stage manifest") const;

    const std::vector<unsigned char>& blob() const { return blob_; }
    const canopy_stage_view& view() const { return view_; }
    std::size_t size() const { return view_.header->entry_count; }
    std::int64_t built_sec() const { return view_.header->built_sec; }

    std::vector<std::string> prefixes() const;
    std::optional<EntryInfo> find(std::string_view path) const;
    std::vector<EntryInfo> entries() const;
    // What build_index was asked for: the requested paths and whether their content was read.
    std::vector<PathRequest> requests() const;
    std::vector<ContentFile> content_files() const;         // unique by mirror
    std::vector<ListedDirectory> listed_directories() const; // unique by mirror
    std::uint64_t content_bytes() const;

private:
    explicit Index(std::vector<unsigned char> blob);
    std::vector<unsigned char> blob_;
    canopy_stage_view view_{};
};

// True when `path` is `prefix` or lies below it (both absolute and normalised; "/" holds everything).
bool is_under(std::string_view path, std::string_view prefix);
// The directory holding `path` (absolute and normalised): "/" for "/" and for a name in it.
std::string parent_of(const std::string& path);
// `name` in `dir`.
std::string child_of(const std::string& dir, const std::string& name);

// The index's stat record of what stat(2) returned.
canopy_stage_stat to_stage_stat(const struct stat& s);

// Stats every requested path and the components on its way (following symlinks as the kernel does), lists
// the directories under the prefixes, and serializes. Paths outside every prefix are ignored.
Result<Index> build_index(const std::vector<PathRequest>& requests, const BuildOptions& options);

// Requests for every path under the prefixes, content included: staging without a recording.
Result<std::vector<PathRequest>> walk_prefixes(const std::vector<std::string>& prefixes);

// Reads the interposer's record files (CANOPY_STAGE_RECORD) into requests, merged and deduplicated.
Result<std::vector<PathRequest>> read_records(const std::vector<std::string>& files);

// read_records + build_index: what `canopy stage record` runs after the command.
Result<Index> index_from_records(const std::vector<std::string>& files, const BuildOptions& options);

enum class ChangeKind { appeared, vanished, changed, link_changed, listing_changed };

struct Change {
    std::string path;
    ChangeKind kind;
    std::string detail; // e.g. "size 10 -> 12, mtime"
};

std::string_view to_string(ChangeKind kind);

// Re-stats every entry and reports what differs from the index: size, mtime, inode, device, type, mode,
// symlink target, directory listing, a path that appeared or vanished. Empty when the index is current.
std::vector<Change> validate(const Index& index);

// Rebuilds the index from its own requests and prefixes against the filesystem as it is now.
Result<Index> refresh(const Index& index, const BuildOptions& extra = {});

} // namespace canopy::stage
