// Writes the node-local stage cache: content via temp file + rename, skeletons, and the index last.
#include "stage/node_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "util/private_dir.hpp"
#include "util/remove_tree.h"

namespace canopy::stage {
namespace {

// mkdir -p below `base`: creates each missing component of `path` (which lies under `base`) with mode 0755, but
// never `base` itself. A cache removed at the job's end is then not brought back by an answer that arrives late.
// A node writes thousands of files into directories that mostly exist already: one mkdir of the whole path
// settles that case, and only a missing parent costs the walk from `base` down (a path walk per component).
Status make_dirs(const std::string& base, const std::string& path)
{
    if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST)
        return {};
    if (!path.starts_with(base + "/"))
        return make_error("stage cache: {} is not under {}", path, base);
    std::size_t i = base.size();
    while (i < path.size()) {
        std::size_t next = path.find('/', i + 1);
        if (next == std::string::npos)
            next = path.size();
        std::string partial = path.substr(0, next);
        i = next;
        if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
            struct stat info;
            if (errno == ENOENT && ::stat(base.c_str(), &info) != 0)
                return make_error("stage cache: {} no longer exists: the node cache was removed, as at the job's end",
                                  base);
            return make_error("stage cache: cannot create directory {} ({}); check space and permissions on the "
                              "cache directory", partial, std::strerror(errno));
        }
    }
    return {};
}

// `dir` without trailing slashes, or an error if it is not absolute.
Result<std::string> absolute_dir(std::string dir)
{
    while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();
    if (dir.empty() || dir[0] != '/')
        return make_error("stage cache directory '{}' is not absolute; give an absolute path", dir);
    return dir;
}

// Fills a directory this process has just made (so nobody else can have put anything in it) with the layout;
// removes it if it cannot.
Result<NodeCache> fill_new_cache(const std::string& dir)
{
    auto fail = [&dir](Error error) {
        canopy_remove_tree(dir.c_str());
        return error;
    };
    for (const char* sub : {"/root", "/dirs", "/tmp"})
        if (::mkdir((dir + sub).c_str(), 0755) != 0)
            return fail(make_error("stage cache: cannot create {}{} ({})", dir, sub, std::strerror(errno)));
    auto cache = NodeCache::open(dir);
    if (!cache)
        return fail(cache.error());
    int empty = ::open(cache->empty_entry_path().c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (empty < 0)
        return fail(make_error("stage cache: cannot create {} ({})", cache->empty_entry_path(), std::strerror(errno)));
    ::close(empty);
    return cache;
}

// Whether two stats of one open file describe the same bytes: its identity, size, and the times that a write
// (mtime) or any change, a touch that resets mtime included (ctime), moves.
bool same_version(const struct stat& a, const struct stat& b)
{
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
           a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
           a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

} // namespace

Result<NodeCache> NodeCache::create(std::string dir)
{
    auto path = absolute_dir(std::move(dir));
    if (!path)
        return path.error();
    if (::mkdir(path->c_str(), 0700) != 0)
        return make_error("stage cache: cannot create {} ({}); check that its parent exists and is writable",
                          *path, std::strerror(errno));
    return fill_new_cache(*path);
}

Result<NodeCache> NodeCache::create_unique(const std::string& base, std::string_view prefix,
                                           const std::function<void(const std::string& path)>& before_create)
{
    auto absolute = absolute_dir(base);
    if (!absolute)
        return absolute.error();
    auto path = make_private_dir(*absolute, prefix, before_create);
    if (!path)
        return make_error("stage cache: cannot create a directory in {} ({}); check that it exists and is writable",
                          *absolute, path.error().message);
    return fill_new_cache(*path);
}

Result<NodeCache> NodeCache::open(std::string dir)
{
    auto path = absolute_dir(std::move(dir));
    if (!path)
        return path.error();
    struct stat info {};
    if (::lstat(path->c_str(), &info) != 0)
        return make_error("stage cache: {} is gone ({})", *path, std::strerror(errno));
    if (!S_ISDIR(info.st_mode) || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0)
        return make_error("stage cache: {} is no longer a directory only this user may use; not using it", *path);
    return NodeCache(std::move(*path));
}

NodeCache::ContentWriter::ContentWriter(int fd, std::string tmp, std::string base, std::string final_path,
                                        ContentFile file)
    : fd_(fd), tmp_(std::move(tmp)), base_(std::move(base)), final_(std::move(final_path)), file_(std::move(file))
{
}

NodeCache::ContentWriter::ContentWriter(ContentWriter&& other) noexcept
    : fd_(other.fd_), tmp_(std::move(other.tmp_)), base_(std::move(other.base_)), final_(std::move(other.final_)),
      file_(std::move(other.file_)),
      written_(other.written_)
{
    other.fd_ = -1;
    other.tmp_.clear();
}

NodeCache::ContentWriter::~ContentWriter()
{
    if (fd_ >= 0)
        ::close(fd_);
    if (!tmp_.empty())
        ::unlink(tmp_.c_str());
}

Status NodeCache::ContentWriter::append(std::span<const unsigned char> chunk)
{
    if (fd_ < 0)
        return make_error("stage cache: {} was already committed or failed", final_);
    std::size_t done = 0;
    while (done < chunk.size()) {
        ssize_t n = ::write(fd_, chunk.data() + done, chunk.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return make_error("stage cache: writing {} failed ({}); the node-local cache is full? give a larger "
                              "cache directory", tmp_, std::strerror(errno));
        done += static_cast<std::size_t>(n);
    }
    written_ += chunk.size();
    return {};
}

Status NodeCache::ContentWriter::append_from(int source, std::uint64_t size, const std::string& name)
{
    if (fd_ < 0)
        return make_error("stage cache: {} was already committed or failed", final_);
    std::uint64_t copied = 0;
    while (copied < size) {
        auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size - copied, 1 << 30));
        ssize_t n = ::sendfile(fd_, source, nullptr, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EINVAL || errno == ENOSYS) && copied == 0)
            return append_by_reading(source, size, name);   // a source sendfile cannot read
        if (n < 0)
            return make_error("stage: copying {} into the cache failed ({}); the node-local cache is full? give a "
                              "larger cache directory", name, std::strerror(errno));
        if (n == 0)
            break;   // it shrank: commit() says so
        copied += static_cast<std::uint64_t>(n);
    }
    written_ += copied;
    return {};
}

Status NodeCache::ContentWriter::append_by_reading(int source, std::uint64_t size, const std::string& name)
{
    std::vector<unsigned char> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(size, 1 << 20)));
    std::uint64_t copied = 0;
    while (copied < size) {
        auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - copied));
        ssize_t n = ::read(source, buffer.data(), want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return make_error("stage: reading {} failed ({})", name, std::strerror(errno));
        if (n == 0)
            break;
        if (auto st = append({buffer.data(), static_cast<std::size_t>(n)}); !st)
            return st;
        copied += static_cast<std::uint64_t>(n);
    }
    return {};
}

Status NodeCache::ContentWriter::commit()
{
    if (fd_ < 0)
        return make_error("stage cache: {} was already committed or failed", final_);
    if (written_ != static_cast<std::uint64_t>(file_.size))
        return make_error("stage cache: {} got {} bytes, expected {}; the file changed at the root while staging",
                          file_.mirror, written_, file_.size);
    // Same mode (no write bits: nobody may change the cache) and the original mtime, so fstat agrees with
    // stat and Python's .pyc checks see the source's time.
    const struct timespec times[2] = {{file_.mtime_sec, file_.mtime_nsec}, {file_.mtime_sec, file_.mtime_nsec}};
    if (::fchmod(fd_, file_.mode & 07555) != 0 || ::futimens(fd_, times) != 0)
        return make_error("stage cache: cannot set mode/mtime of {} ({})", tmp_, std::strerror(errno));
    if (::close(fd_) != 0) {
        fd_ = -1;
        return make_error("stage cache: closing {} failed ({})", tmp_, std::strerror(errno));
    }
    fd_ = -1;
    // Its directory usually exists (an earlier file made it): rename first, make the directories only if not.
    bool moved = ::rename(tmp_.c_str(), final_.c_str()) == 0;
    if (!moved && errno == ENOENT) {
        if (auto st = make_dirs(base_, final_.substr(0, final_.rfind('/'))); !st)
            return st;
        moved = ::rename(tmp_.c_str(), final_.c_str()) == 0;
    }
    if (!moved)
        return make_error("stage cache: cannot move {} into place ({})", final_, std::strerror(errno));
    tmp_.clear();
    return {};
}

Result<NodeCache::ContentWriter> NodeCache::begin_content(const ContentFile& file)
{
    if (file.mirror.empty() || file.mirror[0] != '/')
        return make_error("stage cache: content path '{}' is not absolute", file.mirror);
    // One counter per process, not per object: the root's reader threads each write through their own copy.
    static std::atomic<std::uint64_t> sequence{0};
    std::string tmp = dir_ + "/tmp/" + std::to_string(::getpid()) + "." + std::to_string(sequence++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return make_error("stage cache: cannot create {} ({})", tmp, std::strerror(errno));
    return ContentWriter(fd, std::move(tmp), dir_ + "/root", content_path(file.mirror), file);
}

Status NodeCache::copy_content(const ContentFile& file, const std::string& source)
{
    const std::string& from = source.empty() ? file.mirror : source;
    int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return make_error("stage: cannot read {} ({}); it changed since the index was built, refresh the manifest",
                          from, std::strerror(errno));
    Status copied = copy_content_from(in, file, from);
    ::close(in);
    return copied;
}

Status NodeCache::copy_content_from(int fd, const ContentFile& file, const std::string& source)
{
    auto writer = begin_content(file);
    if (!writer)
        return writer.error();
    struct stat before {};
    if (::fstat(fd, &before) != 0)
        return make_error("stage: cannot stat {} ({})", source, std::strerror(errno));
    // Exactly the size the file was found with, never past it; a file that shrank fails the size check in commit().
    if (auto st = writer->append_from(fd, static_cast<std::uint64_t>(std::max<std::int64_t>(0, file.size)), source);
        !st)
        return st;
    // A write or truncation while the file was read leaves a copy that mixes two versions, which never existed on
    // disk: such a copy is never installed.
    struct stat after {};
    if (::fstat(fd, &after) != 0 || !same_version(before, after))
        return make_error("stage: {} changed while it was being staged, so its copy would mix two versions; "
                          "stage it once nothing writes it any more", source);
    return writer->commit();
}

Status NodeCache::copy_all_content(const Index& index)
{
    for (const auto& file : index.content_files())
        if (!has_content(file))
            if (auto st = copy_content(file); !st)
                return st;
    return {};
}

bool NodeCache::has_content(const ContentFile& file) const
{
    struct stat s {};
    return ::stat(content_path(file.mirror).c_str(), &s) == 0 && s.st_size == file.size &&
           s.st_mtim.tv_sec == file.mtime_sec && s.st_mtim.tv_nsec == file.mtime_nsec;
}

Status NodeCache::make_skeleton(const ListedDirectory& dir)
{
    std::string base = skeleton_path(dir.mirror);
    if (auto st = make_dirs(dir_ + "/dirs", base); !st)
        return st;
    const std::string empty = empty_entry_path();
    for (const auto& n : dir.names) {
        std::string path = base + (dir.mirror == "/" ? "" : "/") + n.name;
        int rc = 0;
        if (n.type == DT_DIR) {
            rc = ::mkdir(path.c_str(), 0755);
        } else if (n.type == DT_LNK) {
            rc = ::symlink(n.link_target.empty() ? "." : n.link_target.c_str(), path.c_str());
        } else if (rc = ::link(empty.c_str(), path.c_str()); rc != 0 && errno != EEXIST) {
            // Out of links (a filesystem with a limit) or of the shared file: a file of its own.
            int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
            if (fd >= 0)
                ::close(fd);
            rc = fd >= 0 ? 0 : -1;
        }
        if (rc != 0 && errno != EEXIST)
            return make_error("stage cache: cannot create {} ({}); check space in the cache directory", path,
                              std::strerror(errno));
    }
    return {};
}

Status NodeCache::install_index(const Index& index)
{
    for (const auto& dir : index.listed_directories())
        if (auto st = make_skeleton(dir); !st)
            return st;
    return index.save(index_path(), "stage index");
}

Status NodeCache::remove()
{
    if (int error = canopy_remove_tree(dir_.c_str()); error != 0)
        return make_error("stage cache: cannot remove all of {} ({})", dir_, std::strerror(-error));
    return {};
}

} // namespace canopy::stage
