// The node-local stage cache: the index the ranks map, copies of file contents, and directory skeletons.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "stage/index.hpp"
#include "util/result.hpp"

namespace canopy::stage {

// Layout (what the interposer expects, see docs/staging.md):
//   <dir>/index             the index blob, installed last by rename
//   <dir>/root<path>        the content of a staged file, at its canonical path (so $ORIGIN stays in the mirror)
//   <dir>/dirs<path>        a skeleton of a listed directory: the same names and types, its files hard links
//                           to <dir>/empty (a link is a third of the cost of a new file, made and removed)
//   <dir>/tmp/              files being written; renamed into place only when complete
class NodeCache {
public:
    // Creates the directory (mode 0700; its parent must exist, and it must not): never one someone else made.
    static Result<NodeCache> create(std::string dir);
    // Creates a fresh directory BASE/PREFIX-XXXXXX (util/private_dir.hpp) as create() would: under a base other
    // users may write to (/dev/shm), a name they can neither guess nor take first. `before_create` hears the name
    // before it is made.
    static Result<NodeCache> create_unique(const std::string& base, std::string_view prefix,
                                           const std::function<void(const std::string& path)>& before_create = {});
    // A cache this process created, used by another part of it (a reader thread, the node's receiver): still a
    // directory of this user's that only this user may use, else an error.
    static Result<NodeCache> open(std::string dir);

    const std::string& dir() const { return dir_; }
    std::string index_path() const { return dir_ + "/index"; }
    std::string content_path(std::string_view mirror) const { return dir_ + "/root" + std::string(mirror); }
    std::string skeleton_path(std::string_view mirror) const { return dir_ + "/dirs" + std::string(mirror); }
    std::string empty_entry_path() const { return dir_ + "/empty"; }

    // Receives one file's content in order, chunk by chunk, in a temp file; commit() checks the size,
    // sets the original mode (without write bits) and mtime, and renames it into place: a reader sees the
    // whole file or none. Destroying an uncommitted writer removes the temp file.
    class ContentWriter {
    public:
        ContentWriter(ContentWriter&& other) noexcept;
        ContentWriter& operator=(ContentWriter&&) = delete;
        ~ContentWriter();
        Status append(std::span<const unsigned char> chunk);
        // Copies `size` bytes from the descriptor `source` (named `name` in errors) at its offset, in the kernel
        // (sendfile): no copy through this process, and on FUSE and many network filesystems' clients no
        // metadata round trip per read, which read(2) of a file whose attributes have expired costs.
        Status append_from(int source, std::uint64_t size, const std::string& name);
        Status commit();
        std::uint64_t written() const { return written_; }

    private:
        friend class NodeCache;
        ContentWriter(int fd, std::string tmp, std::string base, std::string final_path, ContentFile file);
        Status append_by_reading(int source, std::uint64_t size, const std::string& name);
        int fd_ = -1;
        std::string tmp_;
        std::string base_;   // the cache's content root: directories are made below it, never it
        std::string final_;
        ContentFile file_;
        std::uint64_t written_ = 0;
    };

    Result<ContentWriter> begin_content(const ContentFile& file);
    // Copies a file's content from `source` (default: file.mirror on this machine's filesystem).
    Status copy_content(const ContentFile& file, const std::string& source = {});
    // The same from an open descriptor, read to its end; `source` names it in errors. The caller closes `fd`.
    Status copy_content_from(int fd, const ContentFile& file, const std::string& source);
    // Copies every file the index stages (the root's path, or a node that can read the prefixes itself).
    Status copy_all_content(const Index& index);
    bool has_content(const ContentFile& file) const;

    // Creates the skeleton of one listed directory (what on-demand staging does per directory it lists).
    Status make_skeleton(const ListedDirectory& dir);
    // Creates the directory skeletons, then writes the index atomically: the ranks use the cache from then on.
    Status install_index(const Index& index);

    // Removes the whole cache directory (at the end of the job).
    Status remove();

private:
    explicit NodeCache(std::string dir) : dir_(std::move(dir)) {}
    std::string dir_;
};

} // namespace canopy::stage
