// On-demand staging at one tree position: the per-path cache, the merging of in-flight requests, the root's reads.
#include "stage/fetch_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace canopy::stage {
namespace {

struct UniqueDescriptor {
    explicit UniqueDescriptor(int descriptor) : fd(descriptor) {}
    ~UniqueDescriptor()
    {
        if (fd >= 0)
            ::close(fd);
    }
    UniqueDescriptor(const UniqueDescriptor&) = delete;
    UniqueDescriptor& operator=(const UniqueDescriptor&) = delete;
    int fd;
};

std::string descriptor_link(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The path a descriptor names: the canonical path of what was opened, at no extra filesystem operation.
std::string descriptor_path(int fd)
{
    std::string link = descriptor_link(fd);
    std::string out(CANOPY_STAGE_PATH_MAX, '\0');
    ssize_t n = ::readlink(link.c_str(), out.data(), out.size() - 1);
    if (n <= 0 || out[0] != '/')
        return {};
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::string read_link_at(int dirfd, const char* name)
{
    std::string out(CANOPY_STAGE_PATH_MAX, '\0');
    ssize_t n = ::readlinkat(dirfd, name, out.data(), out.size() - 1);
    if (n < 0)
        return {};
    out.resize(static_cast<std::size_t>(n));
    return out;
}

// A mirror path becomes a path inside the cache: it must be absolute and plain, never climb out with "..".
bool plain_absolute(const std::string& path)
{
    if (path.empty() || path[0] != '/' || path.size() >= CANOPY_STAGE_PATH_MAX)
        return false;
    std::size_t start = 1;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos)
            end = path.size();
        std::string_view part(path.data() + start, end - start);
        if ((part.empty() && path.size() > 1) || part == "." || part == "..")
            return false;
        start = end + 1;
    }
    return true;
}

bool plain_name(const std::string& name)
{
    return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
           name.find('\0') == std::string::npos;
}

// What the lookup that opened `fd` brought back: a network filesystem's client need not ask its server again
// (AT_STATX_DONT_SYNC: on FUSE or NFS one metadata round trip fewer per path); a local one answers as fstat does.
int fstat_as_looked_up(int fd, struct stat& out)
{
    struct statx x {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &x) != 0)
        return errno == ENOSYS ? ::fstat(fd, &out) : -1;
    out = {};
    out.st_dev = makedev(x.stx_dev_major, x.stx_dev_minor);
    out.st_ino = x.stx_ino;
    out.st_mode = x.stx_mode;
    out.st_nlink = x.stx_nlink;
    out.st_uid = x.stx_uid;
    out.st_gid = x.stx_gid;
    out.st_rdev = makedev(x.stx_rdev_major, x.stx_rdev_minor);
    out.st_size = static_cast<off_t>(x.stx_size);
    out.st_blksize = static_cast<blksize_t>(x.stx_blksize);
    out.st_blocks = static_cast<blkcnt_t>(x.stx_blocks);
    out.st_atim = {x.stx_atime.tv_sec, x.stx_atime.tv_nsec};
    out.st_mtim = {x.stx_mtime.tv_sec, x.stx_mtime.tv_nsec};
    out.st_ctim = {x.stx_ctime.tv_sec, x.stx_ctime.tv_nsec};
    return 0;
}

// Where a symlink at `path` leads, found without the kernel's walk of the whole path: empty when only that walk
// gets it right (a target that climbs with "..", through directories that may be symlinks themselves, or that
// ends in "/").
std::string link_destination(const std::string& path, const std::string& target)
{
    if (target.empty() || target.back() == '/')
        return {};
    std::string joined = target[0] == '/' ? target : path.substr(0, path.rfind('/')) + "/" + target;
    std::string out;
    std::size_t start = 0;
    while (start < joined.size()) {
        std::size_t end = joined.find('/', start);
        if (end == std::string::npos)
            end = joined.size();
        std::string_view part(joined.data() + start, end - start);
        if (part == "..")
            return {};
        if (!part.empty() && part != ".") {
            out += '/';
            out += part;
        }
        start = end + 1;
    }
    return out.empty() || out.size() >= CANOPY_STAGE_PATH_MAX ? std::string() : out;
}

// Links followed through handles before the kernel's own walk takes over (and says ELOOP where it must).
constexpr int max_link_hops = 40;

Result<FetchAnswer> read_followed(FetchKind kind, const std::string& path, NodeCache& cache,
                                  DirectoryHandles* directories, std::int64_t content_limit, int hops);

} // namespace

bool FetchAnswer::serves(FetchKind kind) const
{
    if (kind == FetchKind::metadata || facts.stat_errno != 0 || facts.open_errno != 0)
        return true;
    if (S_ISREG(facts.stat.mode))
        return content();
    if (S_ISDIR(facts.stat.mode))
        return listed();
    return true;
}

ContentFile FetchAnswer::content_file() const
{
    return ContentFile{mirror, facts.stat.size, facts.stat.mtime_sec, facts.stat.mtime_nsec, facts.stat.mode};
}

Result<FetchAnswer> read_local(FetchKind kind, const std::string& path, NodeCache& cache,
                               DirectoryHandles* directories, std::int64_t content_limit)
{
    return read_followed(kind, path, cache, directories, content_limit, 0);
}

namespace {

Result<FetchAnswer> read_followed(FetchKind kind, const std::string& path, NodeCache& cache,
                                  DirectoryHandles* directories, std::int64_t content_limit, int hops)
{
    FetchAnswer answer;
    // One walk of the path: an O_PATH descriptor gives the lstat view, and reopening it through /proc/self/fd
    // reads the file without walking the path again (on a metadata server, each component is a lookup). Through
    // the directory's handle, the walk itself is one lookup. ".." is left to the kernel's own walk.
    bool by_handle = directories && path.size() > 1 && path.find("/..") == std::string::npos;
    UniqueDescriptor handle(by_handle ? directories->open_file(path, O_PATH | O_NOFOLLOW)
                                      : ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat ls {};
    if (handle.fd < 0 || fstat_as_looked_up(handle.fd, ls) != 0) {
        answer.facts.lstat_errno = answer.facts.stat_errno = errno;
        return answer;
    }
    answer.facts.lstat = answer.facts.stat = to_stage_stat(ls);
    bool link = S_ISLNK(ls.st_mode);
    if (link) {
        answer.link = read_link_at(handle.fd, "");
        // The target through its directory's handle: a library's versioned symlinks cost a lookup or two, not
        // two walks of the whole path.
        auto destination = directories && hops < max_link_hops ? link_destination(path, answer.link) : std::string();
        if (!destination.empty()) {
            auto followed = read_followed(kind, destination, cache, directories, content_limit, hops + 1);
            if (!followed)
                return followed.error();
            answer.facts.stat = followed->facts.stat;
            answer.facts.stat_errno = followed->facts.stat_errno;
            answer.facts.open_errno = followed->facts.open_errno;
            answer.facts.flags |= followed->facts.flags & (CANOPY_STAGE_CONTENT | CANOPY_STAGE_LISTED);
            answer.mirror = std::move(followed->mirror);
            answer.listing = std::move(followed->listing);
            return answer;
        }
        struct stat s {};
        if (::stat(path.c_str(), &s) != 0)
            answer.facts.stat_errno = errno;
        else
            answer.facts.stat = to_stage_stat(s);
    }
    if (kind == FetchKind::metadata || answer.facts.stat_errno != 0)
        return answer;
    // The followed object: a symlink's target is reached by its path, anything else through the handle.
    auto reopen = [&](int flags) {
        return ::open(link ? path.c_str() : descriptor_link(handle.fd).c_str(), flags | O_CLOEXEC);
    };

    if (S_ISREG(answer.facts.stat.mode)) {
        if (content_limit >= 0 && answer.facts.stat.size > content_limit)
            return answer;
        int fd = reopen(O_RDONLY | O_NOCTTY);
        if (fd < 0) {
            answer.facts.open_errno = errno;
            return answer;
        }
        answer.mirror = descriptor_path(fd);
        if (answer.mirror.empty()) {
            ::close(fd);
            return make_error("stage: cannot tell where {} leads at the root", path);
        }
        auto file = answer.content_file();
        // Another spelling of the same file may have brought its copy already.
        Status copied = cache.has_content(file) ? Status{} : cache.copy_content_from(fd, file, file.mirror);
        ::close(fd);
        if (!copied)
            return copied.error();
        answer.facts.flags |= CANOPY_STAGE_CONTENT;
        return answer;
    }
    if (S_ISDIR(answer.facts.stat.mode)) {
        int fd = reopen(O_RDONLY | O_DIRECTORY);
        if (fd < 0) {
            answer.facts.open_errno = errno;
            return answer;
        }
        UniqueDescriptor dir(fd);
        answer.mirror = descriptor_path(fd);
        if (answer.mirror.empty())
            return make_error("stage: cannot list {} at the root", path);
        // getdents64 rather than fdopendir, whose fstat is one more metadata round trip per directory.
        alignas(struct dirent64) char buffer[32768];
        for (;;) {
            long got = ::getdents64(fd, buffer, sizeof buffer);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                return make_error("stage: cannot list {} at the root ({})", path, std::strerror(errno));
            if (got == 0)
                break;
            for (long at = 0; at < got;) {
                const auto* entry = reinterpret_cast<const struct dirent64*>(buffer + at);
                at += entry->d_reclen;
                if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0)
                    continue;
                ListedName name{entry->d_name, entry->d_type, {}};
                if (name.type == DT_UNKNOWN) {
                    struct stat s {};
                    if (::fstatat(fd, entry->d_name, &s, AT_SYMLINK_NOFOLLOW) == 0)
                        name.type = static_cast<unsigned char>(IFTODT(s.st_mode));
                }
                if (name.type == DT_LNK)
                    name.link_target = read_link_at(fd, entry->d_name);
                answer.listing.push_back(std::move(name));
            }
        }
        std::sort(answer.listing.begin(), answer.listing.end(),
                  [](const ListedName& a, const ListedName& b) { return a.name < b.name; });
        answer.facts.flags |= CANOPY_STAGE_LISTED;
    }
    return answer;
}

} // namespace

FetchCache::FetchCache(NodeCache cache, SendUp send_up) : cache_(std::move(cache)), send_up_(std::move(send_up)) {}

const FetchAnswer* FetchCache::cached(const std::string& path) const
{
    auto it = answers_.find(path);
    return it == answers_.end() ? nullptr : &it->second;
}

int FetchCache::known_failure(const std::string& path) const
{
    // The kernel walks a path from the left: the first ancestor we know to be missing, not a directory, or
    // listed without the next name decides the lookup, whatever follows.
    std::size_t end = path.size();
    while (end > 0) {
        std::size_t slash = path.rfind('/', end - 1);
        if (slash == std::string::npos)
            return 0;
        std::string name = path.substr(slash + 1, end - slash - 1);
        if (name == ".." || name == "." || name.empty())
            return 0;   // ".." could climb back out of a missing directory through a symlink: not inferred
        end = slash;
        const FetchAnswer* ancestor = cached(slash == 0 ? std::string("/") : path.substr(0, slash));
        if (!ancestor)
            continue;
        if (ancestor->facts.stat_errno != 0)
            return ancestor->facts.stat_errno;
        if (!S_ISDIR(ancestor->facts.stat.mode))
            return ENOTDIR;
        if (ancestor->listed() && !ancestor->listed_name(name))
            return ENOENT;
        return 0;   // the nearest known ancestor holds the name: only the root can tell the rest
    }
    return 0;
}

void FetchCache::fetch(FetchKind kind, const std::string& path, Done done)
{
    if (const FetchAnswer* known = cached(path); known && known->serves(kind)) {
        ++counters_.from_cache;
        done(Status{}, *known);
        return;
    }
    if (int failure = known_failure(path)) {
        ++counters_.inferred_missing;
        FetchAnswer missing;
        missing.facts.lstat_errno = missing.facts.stat_errno = failure;
        answers_[path] = missing;
        done(Status{}, missing);
        return;
    }
    // A content request on its way serves a metadata request too.
    for (FetchKind joinable : {FetchKind::content, FetchKind::metadata}) {
        if (joinable == FetchKind::metadata && kind == FetchKind::content)
            continue;
        if (auto it = in_flight_.find({joinable, path}); it != in_flight_.end()) {
            ++counters_.merged;
            auto& pending = pending_[it->second];
            pending.waiters.push_back(std::move(done));
            if (std::exchange(pending.ahead, false) && promote_)
                promote_(it->second);
            return;
        }
    }
    std::uint64_t id = next_id_++;
    auto& pending = pending_[id];
    pending.kind = kind;
    pending.path = path;
    pending.waiters.push_back(std::move(done));
    in_flight_[{kind, path}] = id;
    ++counters_.sent_up;
    send_up_(id, kind, path);
}

Status FetchCache::checked(const std::string& path, const FetchAnswer& answer)
{
    if ((answer.content() || answer.listed()) && !plain_absolute(answer.mirror))
        return make_error("the on-demand stage answer for {} names the unusable path '{}'", path, answer.mirror);
    for (const auto& name : answer.listing)
        if (!plain_name(name.name))
            return make_error("the listing of {} holds the unusable name '{}'", path, name.name);
    if (answer.listed())
        return cache_.make_skeleton(ListedDirectory{answer.mirror, answer.listing});
    return {};
}

Status FetchCache::answer(std::uint64_t id, FetchAnswer answer, bool content_follows)
{
    auto it = pending_.find(id);
    if (it == pending_.end())
        return make_error("an on-demand stage answer arrived for request {}, which is not waiting", id);
    if (it->second.answer)
        return make_error("a second on-demand stage answer arrived for request {}", id);
    if (it->second.learned) {
        // A push answered this request's callers already; its content, if any follows, is not needed again.
        it->second.answer = std::move(answer);
        if (!content_follows)
            complete(id, {});
        return {};
    }
    Status checked = this->checked(it->second.path, answer);
    if (checked && answer.content() && !content_follows && !cache_.has_content(answer.content_file()))
        checked = make_error("the on-demand stage answer for {} says its content is here, and it is not",
                             it->second.path);
    if (checked && answer.content() && content_follows) {
        auto writer = cache_.begin_content(answer.content_file());
        if (!writer) {
            checked = writer.error();
        } else {
            it->second.writer.emplace(std::move(*writer));
            it->second.answer = std::move(answer);
            return {};
        }
    }
    if (!checked) {
        fail(id, checked.error().message);
        return checked;
    }
    it->second.answer = std::move(answer);
    complete(id, {});
    return {};
}

Status FetchCache::content(std::uint64_t id, std::span<const unsigned char> chunk, bool last)
{
    auto it = pending_.find(id);
    if (it != pending_.end() && it->second.learned && it->second.answer) {
        if (last)
            complete(id, {});
        return {};
    }
    if (it == pending_.end() || !it->second.writer)
        return make_error("on-demand stage content arrived for request {}, which expects none", id);
    Status status = it->second.writer->append(chunk);
    counters_.content_bytes += chunk.size();
    if (status && last)
        status = it->second.writer->commit();
    if (!status) {
        fail(id, status.error().message);
        return status;
    }
    if (last) {
        it->second.writer.reset();
        complete(id, {});
    }
    return {};
}

void FetchCache::fail(std::uint64_t id, const std::string& why)
{
    if (pending_.count(id))
        complete(id, make_error("{}", why));
}

void FetchCache::fail_all(const std::string& why)
{
    while (!pending_.empty())
        complete(pending_.begin()->first, make_error("{}", why));
}

Status FetchCache::learn(const std::string& path, FetchAnswer answer, std::span<const unsigned char> content)
{
    if (auto valid = checked(path, answer); !valid)
        return valid;
    if (answer.content()) {
        auto file = answer.content_file();
        if (static_cast<std::uint64_t>(std::max<std::int64_t>(0, file.size)) != content.size())
            return make_error("the pushed content of {} has {} bytes where its answer says {}", path, content.size(),
                              file.size);
        if (!cache_.has_content(file)) {
            auto writer = cache_.begin_content(file);
            Status written = writer ? writer->append(content) : Status(writer.error());
            if (written)
                written = writer->commit();
            if (!written)
                return written;
            counters_.content_bytes += content.size();
        }
    }
    ++counters_.pushed;
    answer.pushed = true;
    auto [slot, fresh] = answers_.try_emplace(path, answer);
    if (!fresh && (!slot->second.serves(FetchKind::content) || answer.serves(FetchKind::content)))
        slot->second = std::move(answer);
    // Callers waiting for this path whom it serves need not wait for their own replies.
    for (FetchKind kind : {FetchKind::metadata, FetchKind::content}) {
        auto it = in_flight_.find({kind, path});
        if (it == in_flight_.end() || !slot->second.serves(kind))
            continue;
        auto& pending = pending_[it->second];
        pending.learned = true;
        pending.writer.reset();
        auto waiters = std::exchange(pending.waiters, {});
        FetchAnswer copy = slot->second;
        for (auto& waiter : waiters)
            waiter(Status{}, copy);
    }
    return {};
}

void FetchCache::set_read_ahead(SendAhead send_ahead, Reorder promote, Reorder hasten)
{
    send_ahead_ = std::move(send_ahead);
    promote_ = std::move(promote);
    hasten_ = std::move(hasten);
}

void FetchCache::read_ahead(FetchKind kind, const std::string& path, Ahead ahead)
{
    const bool whole = ahead == Ahead::load;
    if (!send_ahead_)
        return;
    if (const FetchAnswer* known = cached(path); known && known->serves(kind))
        return;
    if (known_failure(path))
        return;
    for (FetchKind serving : {kind, FetchKind::content})
        if (auto it = in_flight_.find({serving, path}); it != in_flight_.end()) {
            auto& pending = pending_[it->second];
            pending.whole |= whole && serving == FetchKind::content;
            if (pending.ahead && ahead != Ahead::neighbour && hasten_)
                hasten_(it->second);
            return;
        }
    std::uint64_t id = next_id_++;
    auto& pending = pending_[id];
    pending.kind = kind;
    pending.path = path;
    pending.ahead = true;
    pending.whole = whole;
    in_flight_[{kind, path}] = id;
    ++counters_.read_ahead;
    send_ahead_(id, kind, path, ahead);
}

bool FetchCache::has_waiters(std::uint64_t id) const
{
    auto it = pending_.find(id);
    return it != pending_.end() && !it->second.waiters.empty();
}

void FetchCache::fetch_ahead(const std::string& path)
{
    ++counters_.fetched_ahead;
    fetch(FetchKind::content, path, [](const Status&, const FetchAnswer&) {});
}

bool FetchCache::wanted_whole(std::uint64_t id) const
{
    auto it = pending_.find(id);
    return it != pending_.end() && it->second.whole;
}

void FetchCache::complete(std::uint64_t id, Status status)
{
    auto node = pending_.extract(id);
    if (node.empty())
        return;
    Pending& pending = node.mapped();
    in_flight_.erase({pending.kind, pending.path});
    pending.writer.reset();   // an unfinished copy is removed
    FetchAnswer empty;
    const FetchAnswer* answer = &empty;
    if (status && pending.answer) {
        auto [slot, fresh] = answers_.try_emplace(pending.path, *pending.answer);
        // Keep the richer answer: a metadata answer arriving late must not hide a copy already cached.
        if (!fresh && (!slot->second.serves(FetchKind::content) || pending.answer->serves(FetchKind::content)))
            slot->second = std::move(*pending.answer);
        answer = &slot->second;
    } else if (status) {
        status = make_error("no on-demand stage answer for {}", pending.path);
    }
    if (!status)
        ++counters_.failed;
    // A waiter may fetch again (and so rehash answers_): hand each a copy.
    FetchAnswer copy = *answer;
    for (auto& waiter : pending.waiters)
        waiter(status, copy);
}

} // namespace canopy::stage
