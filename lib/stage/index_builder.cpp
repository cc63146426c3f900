// Builds the stage index: stats the requested paths and their components, lists directories, serializes the blob.
#include "stage/index.hpp"
#include "stage/directory_handles.hpp"
#include "stage/filesystem_probe.hpp"
#include "stage/index_internal.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <unordered_map>

namespace canopy::stage {

namespace {

constexpr int max_links = CANOPY_STAGE_MAX_LINKS;

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

} // namespace

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

} // namespace canopy::stage
