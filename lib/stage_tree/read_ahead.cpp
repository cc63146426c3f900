// Which paths the root reads before any rank asks for them.
#include "stage_tree/read_ahead.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>

#include "stage_tree/elf_needs.hpp"
#include "stage/loader_subdirs.h"
#include "stage_tree/python_command.hpp"

namespace canopy::stage {
namespace {

// `path` with "." and ".." resolved by name (a guess: the kernel follows symlinks first), without a trailing
// '/'; empty if not absolute.
std::string lexically_normal(const std::string& path)
{
    if (path.empty() || path[0] != '/')
        return {};
    std::string out = std::filesystem::path(path).lexically_normal().string();
    while (out.size() > 1 && out.back() == '/')
        out.pop_back();   // "/a/b/.." is "/a/"
    return out;
}

// A RUNPATH entry with $ORIGIN (the loading file's directory) put in.
std::string expand_origin(std::string entry, const std::string& origin)
{
    for (const char* name : {"${ORIGIN}", "$ORIGIN"})
        for (auto at = entry.find(name); at != std::string::npos; at = entry.find(name, at + origin.size()))
            entry.replace(at, std::strlen(name), origin);
    return lexically_normal(entry);
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
    imports_.after_read(path, answer, asked, cache, read);
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
        read(FetchKind::content, dir, Ahead::neighbour);   // read_entries follows when the listing comes
    // A program or library read for a rank, needed by one, or an extension module an import names: the loader
    // asks for what it needs next. Not a neighbour read ahead: those nobody opened yet bring libraries no rank
    // loads (docs/performance.md).
    if (kind == FetchKind::content && answer.content() && answer.followed_is(S_IFREG) &&
        (asked || needed_.count(path) || imports_.loads(path)))
        read_needed_libraries(path, cache.cache().content_path(answer.mirror), cache, read);
    // `python3` a symlink to `python3.11`: the name that tells the version is the link's.
    if (auto program = programs_.find(path); !answer.link.empty() && program != programs_.end())
        if (auto target = lexically_normal(answer.link[0] == '/' ? answer.link : child_of(dir, answer.link));
            !target.empty())
            python_starts(target, program->second, cache, read);
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

void ReadAheadPolicy::before_ranks(const std::vector<std::string>& argv, const std::string& path_variable,
                                   const std::string& library_path_variable, const FetchCache& cache,
                                   const Read& read)
{
    if (argv.empty())
        return;
    const std::string& program = argv.front();
    const std::vector<std::string> arguments(argv.begin() + 1, argv.end());
    auto entries = [](const std::string& variable) {
        std::vector<std::string> dirs;
        for (std::size_t at = 0; at <= variable.size();) {
            auto end = std::min(variable.find(':', at), variable.size());
            if (auto dir = lexically_normal(variable.substr(at, end - at)); !dir.empty())
                dirs.push_back(dir);
            at = end + 1;
        }
        return dirs;
    };
    for (const auto& dir : entries(library_path_variable))
        if (std::find(library_dirs_.begin(), library_dirs_.end(), dir) == library_dirs_.end())
            library_dirs_.push_back(dir);
    std::vector<std::string> candidates;
    if (program.find('/') != std::string::npos)
        candidates.push_back(lexically_normal(program));   // relative to the rank's directory: not guessed
    else
        for (const auto& dir : entries(path_variable)) {
            if (!staged(dir))
                break;   // the program may be there, and then nothing further is
            candidates.push_back(child_of(dir, program));
        }
    for (const auto& path : candidates)
        if (!path.empty() && staged(path) && needed_.insert(path).second) {
            programs_.emplace(path, arguments);
            read(FetchKind::content, path, Ahead::program);
            loader_searches(read);
            python_starts(path, arguments, cache, read);
        }
}

void ReadAheadPolicy::loader_searches(const Read& read)
{
    // The loader's first lookups, before any library: whether each LD_LIBRARY_PATH directory has its hwcaps and
    // platform subdirectories. Once the node knows they are missing, the interposer names each library at once.
#if CANOPY_LOADER_SUBDIRS_KNOWN
    for (const auto& dir : library_dirs_)
        if (staged(dir) && searched_.insert(dir).second)
            for (const char* sub : canopy_loader_subdirs)
                read(FetchKind::metadata, child_of(dir, sub), Ahead::next);
#else
    (void)read;
#endif
}

void ReadAheadPolicy::python_starts(const std::string& program, const std::vector<std::string>& arguments,
                                    const FetchCache& cache, const Read& read)
{
    // PREFIX/bin/pythonX.Y, whose standard library is PREFIX/lib/pythonX.Y (a bare `python3` names no version).
    static const std::regex interpreter(R"(python(\d)\.(\d+))");
    std::smatch version;
    std::string name = program.substr(program.rfind('/') + 1);
    std::string bin = parent_of(program);
    if (!std::regex_match(name, version, interpreter) || !bin.ends_with("/bin"))
        return;
    std::string lib = child_of(parent_of(bin), "lib");
    std::string stdlib = child_of(lib, name);
    if (!staged(stdlib))
        return;
    // What its start lists, as a rank asking there would: the standard library is then a directory in use.
    in_use_.insert(stdlib);
    read(FetchKind::content, stdlib, Ahead::next);
    read(FetchKind::metadata, child_of(stdlib, "os.py"), Ahead::next);   // the landmark of a standard library
    // Where its site module looks, in its order: upstream's, or Debian's (lib/python3 before lib/python3.11).
    // Only staged ones: the follower waits for each one's listing before looking in the next.
    std::vector<std::string> site_dirs;
    for (auto dir : {child_of(stdlib, "site-packages"), child_of(lib, "python" + version[1].str() + "/dist-packages"),
                     child_of(stdlib, "dist-packages")})
        if (staged(dir)) {
            read(FetchKind::content, dir, Ahead::next);
            site_dirs.push_back(dir);
        }
    read(FetchKind::content, child_of(stdlib, "lib-dynload"), Ahead::next);
    std::string tag = "cpython-" + version[1].str() + version[2].str();
    imports_.interpreter_starts(stdlib, site_dirs, tag, cache, read);
    imports_.command_imports(python_command_imports(arguments), tag, cache, read);
}

void ReadAheadPolicy::read_needed_libraries(const std::string& path, const std::string& copy,
                                            const FetchCache& cache, const Read& read)
{
    if (!libraries_.insert(path).second)
        return;
    if (auto needs = read_elf_needs(copy))   // not ELF (a .pyc, a script): nothing
        read_libraries(path, *needs, cache, read);
}

void ReadAheadPolicy::program_needs(const std::string& path, const ElfNeeds& needs, const FetchCache& cache,
                                    const Read& read)
{
    if (staged(path) && libraries_.insert(path).second)
        read_libraries(path, needs, cache, read);
}

void ReadAheadPolicy::read_libraries(const std::string& path, const ElfNeeds& needs, const FetchCache& cache,
                                     const Read& read)
{
    std::string origin = parent_of(path);
    if (std::find(library_dirs_.begin(), library_dirs_.end(), origin) == library_dirs_.end())
        library_dirs_.push_back(origin);
    std::vector<std::string> dirs;
    for (const auto& entry : needs.search_path)
        if (auto dir = expand_origin(entry, origin); !dir.empty())
            dirs.push_back(dir);
    dirs.insert(dirs.end(), library_dirs_.begin(), library_dirs_.end());
    for (const auto& name : needs.needed) {
        if (name.find('/') != std::string::npos) {   // a path, not a name to look for
            if (auto named = lexically_normal(name); !named.empty() && staged(named) && needed_.insert(named).second)
                read(FetchKind::content, named, Ahead::load);
            continue;
        }
        // The loader takes the first directory that has it: where a listing says so, the search stops there.
        for (const auto& dir : dirs) {
            if (!staged(dir))
                continue;
            std::string candidate = child_of(dir, name);
            const FetchAnswer* listing = cache.cached(dir);
            bool listed = listing && listing->listed();
            bool there = listed && listing->listed_name(name);
            if (listed && !there)
                continue;
            if (needed_.insert(candidate).second)
                read(FetchKind::content, candidate, Ahead::load);
            if (there)
                break;
        }
    }
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
        if (file && imports_.follows(entry.name, listing))
            continue;
        bool content = (whole_files && file) || (list_subdirectories && entry.type == DT_DIR);
        read(content ? FetchKind::content : FetchKind::metadata, child_of(dir, entry.name), Ahead::neighbour);
    }
}

} // namespace canopy::stage
