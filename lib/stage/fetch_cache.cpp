// On-demand staging at one tree position: the per-path cache, the merging of in-flight requests, the root's reads.
#include "stage/fetch_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
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
                               DirectoryHandles* directories)
{
    FetchAnswer answer;
    // One walk of the path: an O_PATH descriptor gives the lstat view, and reopening it through /proc/self/fd
    // reads the file without walking the path again (on a metadata server, each component is a lookup). Through
    // the directory's handle, the walk itself is one lookup. ".." is left to the kernel's own walk.
    bool by_handle = directories && path.size() > 1 && path.find("/..") == std::string::npos;
    UniqueDescriptor handle(by_handle ? directories->open_file(path, O_PATH | O_NOFOLLOW)
                                      : ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat ls {};
    if (handle.fd < 0 || ::fstat(handle.fd, &ls) != 0) {
        answer.facts.lstat_errno = answer.facts.stat_errno = errno;
        return answer;
    }
    answer.facts.lstat = answer.facts.stat = to_stage_stat(ls);
    bool link = S_ISLNK(ls.st_mode);
    if (link) {
        answer.link = read_link_at(handle.fd, "");
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
        answer.mirror = descriptor_path(fd);
        DIR* dir = ::fdopendir(fd);
        if (!dir || answer.mirror.empty()) {
            if (dir)
                ::closedir(dir);
            else
                ::close(fd);
            return make_error("stage: cannot list {} at the root", path);
        }
        while (struct dirent* entry = ::readdir(dir)) {
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
        ::closedir(dir);
        std::sort(answer.listing.begin(), answer.listing.end(),
                  [](const ListedName& a, const ListedName& b) { return a.name < b.name; });
        answer.facts.flags |= CANOPY_STAGE_LISTED;
    }
    return answer;
}

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
        if (ancestor->listed() &&
            !std::binary_search(ancestor->listing.begin(), ancestor->listing.end(), ListedName{name, 0, {}},
                                [](const ListedName& a, const ListedName& b) { return a.name < b.name; }))
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
            pending_[it->second].waiters.push_back(std::move(done));
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

Status FetchCache::answer(std::uint64_t id, FetchAnswer answer, bool content_follows)
{
    auto it = pending_.find(id);
    if (it == pending_.end())
        return make_error("an on-demand stage answer arrived for request {}, which is not waiting", id);
    if (it->second.answer)
        return make_error("a second on-demand stage answer arrived for request {}", id);
    Status checked;
    if ((answer.content() || answer.listed()) && !plain_absolute(answer.mirror))
        checked = make_error("the on-demand stage answer for {} names the unusable path '{}'", it->second.path,
                             answer.mirror);
    for (const auto& name : answer.listing)
        if (checked && !plain_name(name.name))
            checked = make_error("the listing of {} holds the unusable name '{}'", it->second.path, name.name);
    if (checked && answer.listed())
        checked = cache_.make_skeleton(ListedDirectory{answer.mirror, answer.listing});
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
