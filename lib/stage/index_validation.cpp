// Checks the stage index against the filesystem as it is now, and rebuilds it from its own requests.
#include "stage/index.hpp"
#include "stage/directory_handles.hpp"
#include "stage/filesystem_probe.hpp"
#include "stage/index_internal.hpp"
#include "util/worker_thread.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <thread>

namespace canopy::stage {

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

} // namespace canopy::stage
