// The stage index's checked view over its blob: loading, saving and reading entries (layout in index_format.h).
#include "stage/index.hpp"
#include "stage/index_internal.hpp"
#include "util/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

namespace canopy::stage {

static_assert(sizeof(canopy_stage_header) % 8 == 0);
static_assert(sizeof(canopy_stage_entry) == 64);
static_assert(sizeof(canopy_stage_stat) == 120);
static_assert(sizeof(canopy_stage_dirent) == 32);

std::string normalize(std::string_view path)
{
    std::string in(path);
    char out[CANOPY_STAGE_PATH_MAX];
    int trailing = 0;
    if (canopy_stage_normalize(in.c_str(), out, &trailing) < 0)
        return {};
    return out;
}

std::uint64_t checksum(const unsigned char* data, std::size_t n)
{
    return canopy_stage_hash(reinterpret_cast<const char*>(data), n);
}

EntryInfo info_of(const canopy_stage_view& v, const canopy_stage_entry& e)
{
    EntryInfo info;
    const char* path = canopy_stage_string(&v, e.path_off, e.path_len);
    info.path = path ? path : "";
    info.facts.lstat_errno = e.lstat_errno;
    info.facts.stat_errno = e.stat_errno;
    if (const auto* s = e.lstat_errno == 0 ? canopy_stage_stat_at(&v, e.lstat_stat) : nullptr)
        info.facts.lstat = *s;
    if (const auto* s = e.stat_errno == 0 ? canopy_stage_stat_at(&v, e.stat_stat) : nullptr)
        info.facts.stat = *s;
    if (const char* link = canopy_stage_string(&v, e.link_off, e.link_len))
        info.link_target = link;
    if (const char* mirror = canopy_stage_string(&v, e.mirror_off, e.mirror_len))
        info.mirror = mirror;
    info.facts.flags = e.flags;
    if (e.flags & CANOPY_STAGE_LISTED) {
        for (std::uint32_t i = 0; i < e.dirents_count && e.dirents_first + i < v.header->dirent_count; ++i) {
            const auto& d = v.dirents[e.dirents_first + i];
            if (const char* name = canopy_stage_string(&v, d.name_off, d.name_len))
                info.listing.emplace_back(name);
        }
    }
    return info;
}

Index::Index(std::vector<unsigned char> blob) : blob_(std::move(blob)) {}

Index::Index(Index&& other) noexcept : blob_(std::move(other.blob_))
{
    canopy_stage_view_open(&view_, blob_.data(), blob_.size());
    other.view_ = {};
}

Index& Index::operator=(Index&& other) noexcept
{
    blob_ = std::move(other.blob_);
    canopy_stage_view_open(&view_, blob_.data(), blob_.size());
    other.view_ = {};
    return *this;
}

Result<Index> Index::from_blob(std::vector<unsigned char> blob, std::string_view origin)
{
    Index index(std::move(blob));
    if (canopy_stage_view_open(&index.view_, index.blob_.data(), index.blob_.size()) != 0)
        return make_error("{}: not a canopy stage index of this version ({} bytes); rebuild it with "
                          "`canopy stage record`", origin, index.blob_.size());
    const auto& h = *index.view_.header;
    if (checksum(index.blob_.data() + h.header_size, index.blob_.size() - h.header_size) != h.checksum)
        return make_error("{}: checksum mismatch (truncated or corrupted); rebuild it with `canopy stage record`",
                          origin);
    // Everything downstream walks these as absolute paths from /; a valid checksum says nothing about who wrote it.
    for (const auto& prefix : index.prefixes())
        if (prefix.empty() || prefix[0] != '/')
            return make_error("{}: prefix '{}' is not an absolute path; rebuild it with `canopy stage record`",
                              origin, prefix);
    for (std::uint32_t i = 0; i < h.entry_count; ++i) {
        const auto& e = index.view_.entries[i];
        const char* path = canopy_stage_string(&index.view_, e.path_off, e.path_len);
        const char* mirror = canopy_stage_string(&index.view_, e.mirror_off, e.mirror_len);
        for (const char* name : {path, mirror})
            if (name && name[0] != '/')
                return make_error("{}: entry '{}' is not an absolute path; rebuild it with `canopy stage record`",
                                  origin, name);
        // The node cache copies to <cache>/root<mirror>: a ".." there would write outside the cache.
        if (mirror && (std::string_view(mirror).find("/../") != std::string_view::npos ||
                       std::string_view(mirror).ends_with("/..")))
            return make_error("{}: entry '{}' leaves the node cache (..); rebuild it with `canopy stage record`",
                              origin, mirror);
        if (!path)
            return make_error("{}: entry {} has no path; rebuild it with `canopy stage record`", origin, i);
    }
    return index;
}

Result<Index> Index::load(const std::string& file)
{
    auto text = read_file(file, std::size_t{16} << 30, "stage manifest");
    if (!text)
        return make_error("{}; check the path given to --stage-manifest", text.error().message);
    std::vector<unsigned char> blob(text->begin(), text->end());
    return from_blob(std::move(blob), "stage manifest " + file);
}

Status Index::save(const std::string& file, std::string_view what) const
{
    // The errors name `file`: the temp file beside it is no name the user knows.
    std::string tmp = file + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return make_error("{} {}: cannot create ({}); check that its directory is writable and has space", what,
                          file, std::strerror(errno));
    std::size_t done = 0;
    while (done < blob_.size()) {
        ssize_t n = ::write(fd, blob_.data() + done, blob_.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            return make_error("{} {}: write failed ({}); check free space", what, file, std::strerror(err));
        }
        done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 || ::rename(tmp.c_str(), file.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        return make_error("{} {}: cannot write ({})", what, file, std::strerror(err));
    }
    return {};
}

std::vector<std::string> Index::prefixes() const
{
    std::vector<std::string> out;
    for (std::uint32_t i = 0; i < view_.header->prefix_count; ++i)
        if (const char* p = canopy_stage_string(&view_, view_.prefixes[i].off, view_.prefixes[i].len))
            out.emplace_back(p);
    return out;
}

std::optional<EntryInfo> Index::find(std::string_view path) const
{
    std::string n = normalize(path);
    const auto* e = canopy_stage_find(&view_, n.data(), n.size());
    if (!e)
        return std::nullopt;
    return info_of(view_, *e);
}

std::vector<EntryInfo> Index::entries() const
{
    std::vector<EntryInfo> out;
    for (std::uint32_t i = 0; i < view_.header->entry_count; ++i)
        out.push_back(info_of(view_, view_.entries[i]));
    return out;
}

std::vector<PathRequest> Index::requests() const
{
    std::vector<PathRequest> out;
    for (std::uint32_t i = 0; i < view_.header->entry_count; ++i) {
        const auto& e = view_.entries[i];
        if (!(e.flags & CANOPY_STAGE_REQUESTED))
            continue;
        if (const char* p = canopy_stage_string(&view_, e.path_off, e.path_len))
            out.push_back({p, (e.flags & CANOPY_STAGE_READ) != 0});
    }
    return out;
}

std::vector<ContentFile> Index::content_files() const
{
    std::map<std::string, ContentFile> by_mirror;
    for (std::uint32_t i = 0; i < view_.header->entry_count; ++i) {
        const auto& e = view_.entries[i];
        if (!(e.flags & CANOPY_STAGE_CONTENT))
            continue;
        const char* mirror = canopy_stage_string(&view_, e.mirror_off, e.mirror_len);
        const auto* s = canopy_stage_stat_at(&view_, e.stat_stat);
        if (!mirror || !s || by_mirror.count(mirror))
            continue;
        by_mirror.emplace(mirror, ContentFile{mirror, s->size, s->mtime_sec, s->mtime_nsec, s->mode});
    }
    std::vector<ContentFile> out;
    for (auto& [m, f] : by_mirror)
        out.push_back(std::move(f));
    return out;
}

std::vector<ListedDirectory> Index::listed_directories() const
{
    std::map<std::string, ListedDirectory> by_mirror;
    for (std::uint32_t i = 0; i < view_.header->entry_count; ++i) {
        const auto& e = view_.entries[i];
        if (!(e.flags & CANOPY_STAGE_LISTED))
            continue;
        const char* mirror = canopy_stage_string(&view_, e.mirror_off, e.mirror_len);
        if (!mirror || by_mirror.count(mirror))
            continue;
        ListedDirectory dir{mirror, {}};
        for (std::uint32_t k = 0; k < e.dirents_count && e.dirents_first + k < view_.header->dirent_count; ++k) {
            const auto& d = view_.dirents[e.dirents_first + k];
            const char* name = canopy_stage_string(&view_, d.name_off, d.name_len);
            if (!name)
                continue;
            ListedName n{name, d.type, {}};
            if (const char* t = canopy_stage_string(&view_, d.link_off, d.link_len))
                n.link_target = t;
            dir.names.push_back(std::move(n));
        }
        by_mirror.emplace(mirror, std::move(dir));
    }
    std::vector<ListedDirectory> out;
    for (auto& [m, d] : by_mirror)
        out.push_back(std::move(d));
    return out;
}

std::uint64_t Index::content_bytes() const
{
    std::uint64_t total = 0;
    for (const auto& f : content_files())
        total += static_cast<std::uint64_t>(f.size);
    return total;
}

std::vector<ListedName>::const_iterator KnownPath::listed_from(std::string_view name) const
{
    return std::lower_bound(listing.begin(), listing.end(), name,
                            [](const ListedName& entry, std::string_view wanted) { return entry.name < wanted; });
}

const ListedName* KnownPath::listed_name(std::string_view name) const
{
    auto found = listed_from(name);
    return found == listing.end() || found->name != name ? nullptr : &*found;
}

std::string parent_of(const std::string& path)
{
    auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0)
        return "/";
    return path.substr(0, slash);
}

std::string child_of(const std::string& dir, const std::string& name)
{
    return dir == "/" ? "/" + name : dir + "/" + name;
}

bool is_under(std::string_view path, std::string_view prefix)
{
    if (prefix == "/")
        return true;
    return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

canopy_stage_stat to_stage_stat(const struct stat& s)
{
    canopy_stage_stat out{};
    out.dev = s.st_dev;
    out.ino = s.st_ino;
    out.nlink = s.st_nlink;
    out.rdev = s.st_rdev;
    out.mode = s.st_mode;
    out.uid = s.st_uid;
    out.gid = s.st_gid;
    out.size = s.st_size;
    out.blksize = s.st_blksize;
    out.blocks = s.st_blocks;
    out.atime_sec = s.st_atim.tv_sec;
    out.atime_nsec = s.st_atim.tv_nsec;
    out.mtime_sec = s.st_mtim.tv_sec;
    out.mtime_nsec = s.st_mtim.tv_nsec;
    out.ctime_sec = s.st_ctim.tv_sec;
    out.ctime_nsec = s.st_ctim.tv_nsec;
    return out;
}

} // namespace canopy::stage
