// Builds, serializes, checks, validates and refreshes the stage index (layout in index_format.h).
#include "stage/index.hpp"
#include "stage/directory_handles.hpp"
#include "stage/filesystem_probe.hpp"
#include "stage/record_format.h"
#include "util/read_file.hpp"
#include "util/worker_thread.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace canopy::stage {

static_assert(sizeof(canopy_stage_header) % 8 == 0);
static_assert(sizeof(canopy_stage_entry) == 64);
static_assert(sizeof(canopy_stage_stat) == 120);
static_assert(sizeof(canopy_stage_dirent) == 32);

namespace {

constexpr int max_links = CANOPY_STAGE_MAX_LINKS;

std::string normalize(std::string_view path)
{
    std::string in(path);
    char out[CANOPY_STAGE_PATH_MAX];
    int trailing = 0;
    if (canopy_stage_normalize(in.c_str(), out, &trailing) < 0)
        return {};
    return out;
}

std::vector<std::string> split(const std::string& path)
{
    std::vector<std::string> parts;
    std::size_t i = 0;
    while (i < path.size()) {
        while (i < path.size() && path[i] == '/')
            ++i;
        std::size_t start = i;
        while (i < path.size() && path[i] != '/')
            ++i;
        if (i > start)
            parts.push_back(path.substr(start, i - start));
    }
    return parts;
}

// What the filesystem says about one path now (mirror: its realpath, when the followed view exists).
using Probe = KnownPath;

struct Node {
    Probe p;
    std::uint32_t flags = 0;
};

class Builder {
public:
    explicit Builder(const BuildOptions& options) : options_(options)
    {
        for (const auto& prefix : options.prefixes) {
            std::string n = normalize(prefix);
            if (n.empty())
                continue;
            add_prefix(n);
            std::string real = real_path(n);
            if (!real.empty())
                add_prefix(real);
        }
    }

    bool under_prefix(const std::string& path) const
    {
        return std::any_of(prefixes_.begin(), prefixes_.end(),
                           [&](const std::string& prefix) { return is_under(path, prefix); });
    }

    void request(const PathRequest& req)
    {
        std::string path = normalize(req.path);
        if (path.empty() || !under_prefix(path))
            return;
        Node& n = node(path);
        n.flags |= CANOPY_STAGE_REQUESTED;
        if (req.read_content)
            n.flags |= CANOPY_STAGE_READ;
        walk(path);
    }

    Result<Index> finish();

private:
    void add_prefix(const std::string& p)
    {
        if (std::find(prefixes_.begin(), prefixes_.end(), p) == prefixes_.end())
            prefixes_.push_back(p);
    }

    Node& node(const std::string& path)
    {
        auto it = nodes_.find(path);
        if (it != nodes_.end())
            return it->second;
        Node n;
        if (!options_.known) {
            n.p = probe(path);
        } else if (const KnownPath* known = options_.known(path)) {
            n.p = *known;
        } else {
            // An ancestor nobody asked about: its stat data through its directory's handle, one lookup, and no
            // canonical path (a full-path realpath costs a lookup per component).
            n.p = probe_cheaply(handles_, path);
        }
        return nodes_.emplace(path, std::move(n)).first->second;
    }

    // Visits each component as the kernel would and records it, so the interposer can resolve any
    // spelling of the path (through symlinks and "..") from the index alone.
    void walk(const std::string& path)
    {
        std::vector<std::string> rest = split(path);
        std::reverse(rest.begin(), rest.end());
        std::string done;
        node("/");
        int links = 0;
        while (!rest.empty()) {
            std::string c = std::move(rest.back());
            rest.pop_back();
            if (c == ".")
                continue;
            if (c == "..") {
                done = parent_of(done.empty() ? "/" : done);
                if (done == "/")
                    done.clear();
                continue;
            }
            std::string cand = done + "/" + c;
            const Node& n = node(cand);
            if (n.p.facts.lstat_errno != 0)
                return;
            if (S_ISLNK(n.p.facts.lstat.mode)) {
                if (++links > max_links || n.p.link.empty())
                    return;
                auto target = split(n.p.link);
                for (auto it = target.rbegin(); it != target.rend(); ++it)
                    rest.push_back(*it);
                if (n.p.link[0] == '/')
                    done.clear();
                continue;
            }
            if (!rest.empty() && !S_ISDIR(n.p.facts.lstat.mode))
                return;
            done = cand;
        }
    }

    BuildOptions options_;
    std::vector<std::string> prefixes_;
    std::map<std::string, Node> nodes_;
    DirectoryHandles handles_;   // with options_.known: the directories of the paths it did not know
};

class StringTable {
public:
    std::uint32_t add(const std::string& s)
    {
        auto it = offsets_.find(s);
        if (it != offsets_.end())
            return it->second;
        auto off = static_cast<std::uint32_t>(data_.size());
        data_.insert(data_.end(), s.begin(), s.end());
        data_.push_back('\0');
        offsets_.emplace(s, off);
        return off;
    }
    const std::vector<char>& data() const { return data_; }

private:
    std::vector<char> data_;
    std::unordered_map<std::string, std::uint32_t> offsets_;
};

std::uint64_t checksum(const unsigned char* data, std::size_t n)
{
    return canopy_stage_hash(reinterpret_cast<const char*>(data), n);
}

template <typename T>
void append(std::vector<unsigned char>& out, const T* items, std::size_t count)
{
    const auto* bytes = reinterpret_cast<const unsigned char*>(items);
    out.insert(out.end(), bytes, bytes + count * sizeof(T));
    while (out.size() % 8)
        out.push_back(0);
}

Result<Index> Builder::finish()
{
    // Content: every file read through any spelling; all spellings of it (and its canonical path) get it.
    std::set<std::string> content_mirrors;
    for (const auto& [path, n] : nodes_)
        if ((n.flags & CANOPY_STAGE_READ) && n.p.followed_is(S_IFREG) && !n.p.mirror.empty())
            content_mirrors.insert(n.p.mirror);

    std::map<std::string, std::vector<Listed>> listings; // by mirror
    for (const auto& [path, n] : nodes_) {
        if (!options_.list_directories || !n.p.followed_is(S_IFDIR) || n.p.mirror.empty())
            continue;
        if (!under_prefix(path) && !under_prefix(n.p.mirror))
            continue;
        if (listings.count(n.p.mirror))
            continue;
        if (options_.known) {
            // Only the listings that were fetched: listing a directory nobody opened costs the filesystem more
            // than the lookups it would answer.
            if (const KnownPath* known = options_.known(path); known && known->listed()) {
                std::vector<Listed> names;
                for (const auto& name : known->listing)
                    names.push_back({name.name, name.type, 0, name.link_target});
                listings.emplace(n.p.mirror, std::move(names));
            }
            continue;
        }
        bool ok = false;
        auto names = list_directory(n.p.mirror, ok);
        if (ok)
            listings.emplace(n.p.mirror, std::move(names));
    }

    StringTable strings;
    strings.add(""); // offset 0 is the empty string
    std::vector<canopy_stage_stat> stats;
    std::vector<canopy_stage_dirent> dirents;
    std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> listing_ranges;
    for (const auto& [mirror, names] : listings) {
        auto first = static_cast<std::uint32_t>(dirents.size());
        for (const auto& l : names) {
            canopy_stage_dirent d{};
            d.ino = l.ino;
            d.name_off = strings.add(l.name);
            d.name_len = static_cast<std::uint32_t>(l.name.size());
            d.type = l.type;
            d.link_off = CANOPY_STAGE_NONE;
            if (l.type == DT_LNK) {
                d.link_off = strings.add(l.link_target);
                d.link_len = static_cast<std::uint32_t>(l.link_target.size());
            }
            dirents.push_back(d);
        }
        listing_ranges.emplace(mirror, std::make_pair(first, static_cast<std::uint32_t>(names.size())));
    }

    std::vector<canopy_stage_entry> entries;
    entries.reserve(nodes_.size());
    for (const auto& [path, n] : nodes_) {
        canopy_stage_entry e{};
        e.hash = canopy_stage_hash(path.data(), path.size());
        e.path_off = strings.add(path);
        e.path_len = static_cast<std::uint32_t>(path.size());
        e.lstat_errno = n.p.facts.lstat_errno;
        e.stat_errno = n.p.facts.stat_errno;
        e.lstat_stat = e.stat_stat = CANOPY_STAGE_NONE;
        e.link_off = e.mirror_off = CANOPY_STAGE_NONE;
        e.flags = n.flags;
        if (n.p.facts.lstat_errno == 0) {
            e.lstat_stat = static_cast<std::uint32_t>(stats.size());
            stats.push_back(n.p.facts.lstat);
            if (S_ISLNK(n.p.facts.lstat.mode)) {
                e.link_off = strings.add(n.p.link);
                e.link_len = static_cast<std::uint32_t>(n.p.link.size());
                if (n.p.facts.stat_errno == 0) {
                    e.stat_stat = static_cast<std::uint32_t>(stats.size());
                    stats.push_back(n.p.facts.stat);
                }
            } else {
                e.stat_stat = e.lstat_stat;
            }
        }
        bool content = n.p.followed_is(S_IFREG) && content_mirrors.count(n.p.mirror);
        auto listing = n.p.followed_is(S_IFDIR) ? listing_ranges.find(n.p.mirror) : listing_ranges.end();
        if (content)
            e.flags |= CANOPY_STAGE_CONTENT;
        if (listing != listing_ranges.end()) {
            e.flags |= CANOPY_STAGE_LISTED;
            e.dirents_first = listing->second.first;
            e.dirents_count = listing->second.second;
        }
        if (content || listing != listing_ranges.end()) {
            e.mirror_off = strings.add(n.p.mirror);
            e.mirror_len = static_cast<std::uint32_t>(n.p.mirror.size());
        }
        entries.push_back(e);
    }

    std::vector<canopy_stage_string_ref> prefix_refs;
    for (const auto& p : prefixes_)
        prefix_refs.push_back({strings.add(p), static_cast<std::uint32_t>(p.size())});

    if (strings.data().size() >= CANOPY_STAGE_NONE || entries.size() >= CANOPY_STAGE_NONE / 4)
        return make_error("stage index: {} paths with {} bytes of names is too large for one index; stage fewer "
                          "prefixes", entries.size(), strings.data().size());

    std::uint32_t bucket_count = 16;
    while (bucket_count < entries.size() * 2)
        bucket_count *= 2;
    std::vector<std::uint32_t> buckets(bucket_count, 0);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        std::uint32_t b = static_cast<std::uint32_t>(entries[i].hash) & (bucket_count - 1);
        while (buckets[b] != 0)
            b = (b + 1) & (bucket_count - 1);
        buckets[b] = static_cast<std::uint32_t>(i + 1);
    }

    canopy_stage_header h{};
    std::memcpy(h.magic, CANOPY_STAGE_MAGIC, 8);
    h.version = CANOPY_STAGE_VERSION;
    h.endian = CANOPY_STAGE_ENDIAN;
    h.built_sec = static_cast<std::int64_t>(::time(nullptr));
    h.header_size = sizeof h;
    h.entry_count = static_cast<std::uint32_t>(entries.size());
    h.bucket_count = bucket_count;
    h.stat_count = static_cast<std::uint32_t>(stats.size());
    h.dirent_count = static_cast<std::uint32_t>(dirents.size());
    h.prefix_count = static_cast<std::uint32_t>(prefix_refs.size());

    std::vector<unsigned char> blob(sizeof h, 0);
    h.buckets_off = blob.size();
    append(blob, buckets.data(), buckets.size());
    h.entries_off = blob.size();
    append(blob, entries.data(), entries.size());
    h.stats_off = blob.size();
    append(blob, stats.data(), stats.size());
    h.dirents_off = blob.size();
    append(blob, dirents.data(), dirents.size());
    h.prefixes_off = blob.size();
    append(blob, prefix_refs.data(), prefix_refs.size());
    h.strings_off = blob.size();
    h.strings_size = strings.data().size();
    append(blob, strings.data().data(), strings.data().size());
    h.total_size = blob.size();
    h.checksum = checksum(blob.data() + sizeof h, blob.size() - sizeof h);
    std::memcpy(blob.data(), &h, sizeof h);
    return Index::from_blob(std::move(blob), "the index just built");
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

std::string unescape(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            char c = s[++i];
            out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

bool same_object(const canopy_stage_stat& a, const canopy_stage_stat& b, std::string& detail)
{
    auto note = [&](const std::string& what) { detail += (detail.empty() ? "" : ", ") + what; };
    if ((a.mode & S_IFMT) != (b.mode & S_IFMT))
        note("type");
    else if (a.mode != b.mode)
        note("mode");
    if (a.size != b.size && !S_ISDIR(a.mode))
        note("size " + std::to_string(a.size) + " -> " + std::to_string(b.size));
    if (a.mtime_sec != b.mtime_sec || a.mtime_nsec != b.mtime_nsec)
        note("mtime");
    if (a.ino != b.ino || a.dev != b.dev)
        note("inode");
    return detail.empty();
}

} // namespace

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

Result<Index> build_index(const std::vector<PathRequest>& requests, const BuildOptions& options)
{
    if (options.prefixes.empty())
        return make_error("stage index: no prefixes given; name the directories to stage with --stage");
    for (const auto& p : options.prefixes)
        if (p.empty() || p[0] != '/')
            return make_error("stage prefix '{}' is not an absolute path; give --stage absolute directories", p);
    Builder builder(options);
    for (const auto& p : options.prefixes)
        builder.request({p, false});
    for (const auto& r : requests)
        builder.request(r);
    return builder.finish();
}

Result<std::vector<PathRequest>> walk_prefixes(const std::vector<std::string>& prefixes)
{
    std::vector<PathRequest> out;
    std::set<std::string> seen_dirs;
    std::vector<std::string> stack;
    for (const auto& p : prefixes) {
        std::string n = normalize(p);
        if (n.empty())
            return make_error("stage prefix '{}' is not an absolute path; give --stage absolute directories", p);
        struct stat s {};
        if (::stat(n.c_str(), &s) != 0)
            return make_error("stage prefix {}: {}; check the path given to --stage", n, std::strerror(errno));
        stack.push_back(n);
    }
    while (!stack.empty()) {
        std::string dir = std::move(stack.back());
        stack.pop_back();
        out.push_back({dir, false}); // a symlink to a directory seen already still needs its own entry
        std::string real = real_path(dir);
        if (real.empty() || !seen_dirs.insert(real).second)
            continue;
        bool ok = false;
        for (const auto& l : list_directory(dir, ok)) {
            std::string child = dir == "/" ? "/" + l.name : dir + "/" + l.name;
            struct stat s {};
            bool is_dir = ::stat(child.c_str(), &s) == 0 && S_ISDIR(s.st_mode);
            if (is_dir)
                stack.push_back(child);
            else
                out.push_back({child, l.type == DT_REG || (l.type == DT_LNK && S_ISREG(s.st_mode))});
        }
    }
    return out;
}

Result<std::vector<PathRequest>> read_records(const std::vector<std::string>& files)
{
    std::map<std::string, bool> merged;
    for (const auto& file : files) {
        auto text = read_file(file, std::size_t{4} << 30, "stage record");
        if (!text)
            return make_error("{}; was the command run with the interposer?", text.error().message);
        std::istringstream in(*text);
        std::string line;
        while (std::getline(in, line)) {
            // "OP<TAB>RESULT<TAB>PATH" (record_format.h).
            auto t1 = line.find('\t');
            auto t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
            if (t1 != 1 || t2 == std::string::npos)
                continue; // a line cut by a crash, or a future field: skip it rather than fail the job
            char op = line[0];
            std::string path = unescape(std::string_view(line).substr(t2 + 1));
            if (path.empty() || path[0] != '/' || op == CANOPY_STAGE_RECORD_WRITE)
                continue;
            // An open for reading means the program wants the content: stage it if the file exists when the
            // index is built, even if it did not exist yet while recording (a .pyc written by that same run).
            bool read = op == CANOPY_STAGE_RECORD_OPEN || op == CANOPY_STAGE_RECORD_LOAD;
            merged[path] = merged[path] || read;
        }
    }
    std::vector<PathRequest> out;
    for (auto& [path, read] : merged)
        out.push_back({path, read});
    return out;
}

Result<Index> index_from_records(const std::vector<std::string>& files, const BuildOptions& options)
{
    auto requests = read_records(files);
    if (!requests)
        return requests.error();
    return build_index(*requests, options);
}

std::string_view to_string(ChangeKind kind)
{
    switch (kind) {
    case ChangeKind::appeared: return "appeared";
    case ChangeKind::vanished: return "vanished";
    case ChangeKind::changed: return "changed";
    case ChangeKind::link_changed: return "link-changed";
    case ChangeKind::listing_changed: return "listing-changed";
    }
    return "changed";
}

namespace {

// Checks one entry against the filesystem as it is now; appends what changed.
void check_entry(const EntryInfo& old, const std::vector<std::string>& prefixes, DirectoryHandles& handles,
                 std::vector<Change>& changes)
{
    Probe now = probe_cheaply(handles, old.path);
    bool inside = std::any_of(prefixes.begin(), prefixes.end(),
                              [&](const std::string& p) { return is_under(old.path, p); });
    if (!inside) {
        // An ancestor of a prefix (e.g. /home): only the path walk through it matters, not its times.
        const auto &was = old.facts, &is = now.facts;
        bool same = was.lstat_errno == is.lstat_errno &&
                    (was.lstat_errno != 0 ||
                     ((was.lstat.mode & S_IFMT) == (is.lstat.mode & S_IFMT) && old.link_target == now.link));
        if (!same)
            changes.push_back({old.path, ChangeKind::changed, "type or symlink target"});
        return;
    }
    if (old.facts.lstat_errno != 0 && now.facts.lstat_errno == 0) {
        changes.push_back({old.path, ChangeKind::appeared, {}});
        return;
    }
    if (old.facts.lstat_errno == 0 && now.facts.lstat_errno != 0) {
        changes.push_back({old.path, ChangeKind::vanished, std::strerror(now.facts.lstat_errno)});
        return;
    }
    if (old.facts.lstat_errno != 0)
        return; // still missing (the errno may differ, ENOENT vs ENOTDIR: same answer for a loader)
    std::string detail;
    if (!same_object(old.facts.lstat, now.facts.lstat, detail)) {
        changes.push_back({old.path, ChangeKind::changed, detail});
        return;
    }
    if (S_ISLNK(old.facts.lstat.mode)) {
        if (old.link_target != now.link) {
            changes.push_back({old.path, ChangeKind::link_changed, old.link_target + " -> " + now.link});
            return;
        }
        if ((old.facts.stat_errno == 0) != (now.facts.stat_errno == 0)) {
            changes.push_back({old.path, old.facts.stat_errno ? ChangeKind::appeared : ChangeKind::vanished,
                               "symlink target"});
            return;
        }
        detail.clear();
        if (old.facts.stat_errno == 0 && !same_object(old.facts.stat, now.facts.stat, detail)) {
            changes.push_back({old.path, ChangeKind::changed, "symlink target: " + detail});
            return;
        }
    }
    if (old.facts.flags & CANOPY_STAGE_LISTED) {
        bool ok = false;
        auto names = list_names(handles, old.mirror, ok);
        if (!ok || names != old.listing)
            changes.push_back({old.path, ChangeKind::listing_changed, {}});
    }
}

} // namespace

std::vector<Change> validate(const Index& index)
{
    const auto& v = index.view();
    const auto prefixes = index.prefixes();
    const std::uint32_t count = v.header->entry_count;
    // A metadata server answers many requests at once while each one waits out its latency: check the entries
    // from several threads, each with its own directory handles. A thread costs far less than one round trip,
    // so even a small manifest is split (at 1 ms a round trip, numpy's 445 entries took 1.2 s on one thread).
    const std::uint32_t threads = std::clamp<std::uint32_t>(count / 32, 1, 16);
    std::vector<std::vector<Change>> found(threads);
    std::vector<std::thread> workers;
    for (std::uint32_t t = 0; t < threads; ++t)
        workers.push_back(worker_thread([&, t] {
            DirectoryHandles handles;
            // Contiguous slices of the entry table.
            for (std::uint32_t i = t * count / threads; i < (t + 1) * count / threads; ++i)
                check_entry(info_of(v, v.entries[i]), prefixes, handles, found[t]);
        }));
    for (auto& worker : workers)
        worker.join();
    std::vector<Change> changes;
    for (auto& part : found)
        changes.insert(changes.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) { return a.path < b.path; });
    return changes;
}

Result<Index> refresh(const Index& index, const BuildOptions& extra)
{
    BuildOptions options = extra;
    for (const auto& p : index.prefixes())
        if (std::find(options.prefixes.begin(), options.prefixes.end(), p) == options.prefixes.end())
            options.prefixes.push_back(p);
    return build_index(index.requests(), options);
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
