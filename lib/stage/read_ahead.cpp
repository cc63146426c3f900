// Which paths the root reads before any rank asks for them.
#include "stage/read_ahead.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

namespace canopy::stage {
namespace {

std::string parent_of(const std::string& path)
{
    auto slash = path.rfind('/');
    return slash == 0 || slash == std::string::npos ? std::string("/") : path.substr(0, slash);
}

std::string child_of(const std::string& dir, const std::string& name)
{
    return dir == "/" ? "/" + name : dir + "/" + name;
}

} // namespace

bool ReadAheadPolicy::staged(const std::string& path) const
{
    return std::any_of(prefixes_.begin(), prefixes_.end(),
                       [&](const std::string& prefix) { return is_under(path, prefix); });
}

void ReadAheadPolicy::after_read(FetchKind kind, const std::string& path, const FetchAnswer& answer, bool asked,
                                 const FetchCache& cache, const Read& read)
{
    if (!staged(path))
        return;
    if (asked && answer.listed())
        in_use_.insert(path);   // a rank lists it to look for something in it
    if (answer.listed() && in_use_.count(path))
        read_entries(path, answer, read);   // else when a rank first asks about something in it
    if (path == "/")
        return;
    std::string dir = parent_of(path);
    if (!staged(dir))
        return;
    const FetchAnswer* parent = cache.cached(dir);
    if (!parent || !parent->listed())
        read(FetchKind::content, dir);   // read_entries follows when the listing comes
    if (!asked)
        return;
    // What a rank asks for tells where it is working: there, and one level up (a package, when the rank reads
    // its __pycache__). Its entries are read again (what is known or on its way is skipped) when that is news.
    bool reading_files = kind == FetchKind::content && answer.content() && reading_files_.insert(dir).second;
    bool newly_used = in_use_.insert(dir).second;
    if ((reading_files || newly_used) && parent && parent->listed())
        read_entries(dir, *parent, read);
    if (dir != "/" && staged(parent_of(dir)))
        use(parent_of(dir), cache, read);
}

void ReadAheadPolicy::use(const std::string& dir, const FetchCache& cache, const Read& read)
{
    if (!in_use_.insert(dir).second)
        return;
    if (const FetchAnswer* known = cache.cached(dir); known && known->listed())
        read_entries(dir, *known, read);
}

void ReadAheadPolicy::read_entries(const std::string& dir, const FetchAnswer& listing, const Read& read) const
{
    if (listing.listing.size() > max_listing)
        return;
    bool whole_files = reading_files_.count(dir) > 0;
    bool list_subdirectories = in_use_.count(dir) > 0;
    for (const auto& entry : listing.listing) {
        bool file = entry.type == DT_REG || entry.type == DT_LNK;
        bool content = (whole_files && file) || (list_subdirectories && entry.type == DT_DIR);
        read(content ? FetchKind::content : FetchKind::metadata, child_of(dir, entry.name));
    }
}

} // namespace canopy::stage
