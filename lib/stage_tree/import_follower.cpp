// Which Python modules the root reads ahead because a module that runs imports them.
#include "stage_tree/import_follower.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "stage_tree/python_imports.hpp"

namespace canopy::stage {
namespace {

constexpr std::size_t max_unresolved = 4096;

std::string name_of(const std::string& path)
{
    return path.substr(path.rfind('/') + 1);
}

// "mod.cpython-311-x86_64-linux-gnu.so", "mod.abi3.so": what Python loads as the extension module "mod".
bool extension_module_name(const std::string& name)
{
    return name.ends_with(".so") &&
           (name.find(".cpython-") != std::string::npos || name.ends_with(".abi3.so"));
}

bool file_entry(const FetchAnswer& listing, const std::string& name)
{
    const ListedName* found = listing.listed_name(name);
    return found && found->type != DT_DIR;
}

// The extension module `module` in `listing` ("mod.<suffix>.so" or "mod.so"), empty if none.
std::string extension_entry(const FetchAnswer& listing, const std::string& module)
{
    const std::string stem = module + ".";
    for (auto it = listing.listed_from(stem); it != listing.listing.end() && it->name.starts_with(stem); ++it) {
        const std::string& name = it->name;
        if (it->type == DT_DIR || !name.ends_with(".so"))
            continue;
        if (name.size() == module.size() + 3)   // "mod.so"
            return name;
        auto suffix = std::string_view(name).substr(module.size() + 1, name.size() - module.size() - 4);
        if (suffix.find('.') == std::string_view::npos)
            return name;
    }
    return {};
}

std::vector<std::string> split_dotted(const std::string& dotted)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= dotted.size()) {
        auto dot = dotted.find('.', start);
        auto part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (!part.empty())
            parts.push_back(part);
        if (dot == std::string::npos)
            break;
        start = dot + 1;
    }
    return parts;
}

// "cpython-311" of "mod.cpython-311.pyc" (empty for "mod.pyc", which Python 3 does not write in __pycache__).
std::string bytecode_tag(const std::string& pyc_name)
{
    auto first = pyc_name.find('.');
    auto last = pyc_name.rfind('.');
    return first == last ? std::string() : pyc_name.substr(first + 1, last - first - 1);
}

} // namespace

bool ImportFollower::follows(const std::string& name, const FetchAnswer& listing) const
{
    if (bytecode_ == Bytecode::unreadable)
        return false;
    if (name.ends_with(".py")) {   // only where Python runs bytecode instead (a script's directory has none)
        const ListedName* bytecode = listing.listed_name("__pycache__");
        return bytecode && bytecode->type == DT_DIR;
    }
    return name.ends_with(".pyc") || name.ends_with(".pyi") || extension_module_name(name);
}

void ImportFollower::after_read(const std::string& path, const FetchAnswer& answer, bool asked,
                                const FetchCache& cache, const Read& read)
{
    if (answer.listed()) {
        auto waiting = waiting_.find(path);
        if (waiting != waiting_.end()) {
            auto lookups = std::move(waiting->second);
            waiting_.erase(waiting);
            for (auto& lookup : lookups)
                look_up(std::move(lookup), cache, read);
        }
    }
    // A sys.path directory is known now, listed or missing: the imports that waited for it go on.
    if (std::find(roots_.begin(), roots_.end(), path) != roots_.end())
        retry_unresolved(cache, read);
    if (answer.listed())
        return;
    if (!answer.content() || !answer.followed_is(S_IFREG) || !(asked || predicted_.count(path)))
        return;
    std::string name = name_of(path);
    std::string dir = parent_of(path);
    if (name.ends_with(".pyc") && name_of(dir) == "__pycache__") {
        learn_root(parent_of(dir), cache, read);
        follow(path, cache.cache().content_path(answer.mirror), cache, read);
    } else if (extension_module_name(name) || name.ends_with(".py")) {
        learn_root(dir, cache, read);
    }
}

void ImportFollower::interpreter_starts(const std::string& stdlib, const std::vector<std::string>& site_dirs,
                                        const std::string& tag, const FetchCache& cache, const Read& read)
{
    std::vector<std::string> sys_path{stdlib, child_of(stdlib, "lib-dynload")};
    sys_path.insert(sys_path.end(), site_dirs.begin(), site_dirs.end());
    for (auto& dir : sys_path)
        if (std::find(roots_.begin(), roots_.end(), dir) == roots_.end())
            roots_.push_back(std::move(dir));
    std::vector<std::string> modules{"encodings", "encodings.utf_8", "sitecustomize"};
    // "cpython-3" and the minor version: 3.11 freezes site and the modules it imports.
    if (tag.starts_with("cpython-3") && tag.size() > 9 && std::atoi(tag.c_str() + 9) < 11)
        modules.push_back("site");
    for (const auto& module : modules)
        look_up({stdlib, split_dotted(module), {}, tag, false}, cache, read);
}

void ImportFollower::command_imports(std::vector<PythonImport> imports, const std::string& tag,
                                     const FetchCache& cache, const Read& read)
{
    for (auto& import : imports)
        look_up_absolute_or_wait({"", split_dotted(import.module), std::move(import.fromlist), tag, false}, cache,
                                 read);
}

void ImportFollower::follow(const std::string& pyc, const std::string& copy, const FetchCache& cache,
                            const Read& read)
{
    if (!followed_.insert(pyc).second)
        return;
    auto imports = read_python_imports(copy);   // another Python's bytecode: nothing
    std::string tag = bytecode_tag(name_of(pyc));
    if (!imports || tag.empty()) {
        if (bytecode_ == Bytecode::unseen)
            bytecode_ = Bytecode::unreadable;   // module files are read ahead as any others from now on
        return;
    }
    bytecode_ = Bytecode::read;
    // `from . import x` is relative to the module's package: the directory above __pycache__, whether the
    // module is that package's __init__ or a module in it.
    std::string package = parent_of(parent_of(pyc));
    for (auto& import : *imports) {
        Lookup lookup{package, split_dotted(import.module), std::move(import.fromlist), tag, false};
        if (import.level == 0) {
            look_up_absolute_or_wait(std::move(lookup), cache, read);
            continue;
        }
        for (int up = 1; up < import.level; ++up)
            lookup.dir = parent_of(lookup.dir);
        look_up(std::move(lookup), cache, read);
    }
}

void ImportFollower::look_up_absolute_or_wait(Lookup lookup, const FetchCache& cache, const Read& read)
{
    if (!lookup.parts.empty() && !look_up_absolute(lookup, cache, read) && unresolved_.size() < max_unresolved)
        unresolved_.push_back(std::move(lookup));
}

bool ImportFollower::look_up_absolute(const Lookup& lookup, const FetchCache& cache, const Read& read)
{
    const std::string& top = lookup.parts.front();
    for (const auto& root : roots_) {
        // Python looks in each in turn: a directory not listed yet holds up the rest (after_read tries again).
        const FetchAnswer* listing = cache.cached(root);
        if (!listing || (!listing->listed() && listing->followed_is(S_IFDIR)))
            return false;
        if (!listing->listed())
            continue;   // missing, or not a directory
        const ListedName* found = listing->listed_name(top);
        if ((found && found->type == DT_DIR) || file_entry(*listing, top + ".py") ||
            !extension_entry(*listing, top).empty()) {
            Lookup here = lookup;
            here.dir = root;
            look_up(std::move(here), cache, read);
            return true;
        }
    }
    return false;
}

void ImportFollower::look_up(Lookup lookup, const FetchCache& cache, const Read& read)
{
    for (;;) {
        const FetchAnswer* listing = cache.cached(lookup.dir);
        if (!listing || !listing->listed()) {
            if (listing && !listing->followed_is(S_IFDIR))   // known, and not a directory
                return;
            read(FetchKind::content, lookup.dir, Ahead::next);
            // A package's __init__ is read with its listing, not after it: one read less in the chain of
            // imports. (A namespace package has none: two lookups lost.)
            if (lookup.package)
                predict_module(lookup.dir, "__init__", lookup.tag, cache, read);
            lookup.package = false;
            auto& waiting = waiting_[lookup.dir];
            if (waiting.size() < max_unresolved)
                waiting.push_back(std::move(lookup));
            return;
        }
        if (lookup.package) {
            if (file_entry(*listing, "__init__.py"))
                predict_module(lookup.dir, "__init__", lookup.tag, cache, read);
            lookup.package = false;
        }
        if (lookup.parts.empty()) {   // a package: the names it imports from it may be its modules
            for (auto& name : lookup.fromlist)
                if (name != "*")
                    look_up({lookup.dir, {name}, {}, lookup.tag, false}, cache, read);
            return;
        }
        std::string part = lookup.parts.front();
        lookup.parts.erase(lookup.parts.begin());
        const ListedName* found = listing->listed_name(part);
        if (found && found->type == DT_DIR) {
            lookup.dir = child_of(lookup.dir, part);
            lookup.package = true;
            continue;
        }
        // Python tries an extension module before source (and so its bytecode).
        if (std::string extension = extension_entry(*listing, part); !extension.empty())
            predict(child_of(lookup.dir, extension), Ahead::load, cache, read);
        else if (file_entry(*listing, part + ".py"))
            predict_module(lookup.dir, part, lookup.tag, cache, read);
        return;
    }
}

void ImportFollower::learn_root(std::string dir, const FetchCache& cache, const Read& read)
{
    // A module's package, and its package's, up to the first directory that is not a package: sys.path's.
    for (;;) {
        const FetchAnswer* listing = cache.cached(dir);
        if (!listing || !listing->listed())
            return;   // not known yet: a later module of this directory tells
        if (!file_entry(*listing, "__init__.py"))
            break;
        if (dir == "/")
            return;
        dir = parent_of(dir);
    }
    if (std::find(roots_.begin(), roots_.end(), dir) != roots_.end())
        return;
    roots_.push_back(dir);
    retry_unresolved(cache, read);
}

void ImportFollower::retry_unresolved(const FetchCache& cache, const Read& read)
{
    auto unresolved = std::move(unresolved_);
    unresolved_.clear();
    for (auto& lookup : unresolved)
        if (!look_up_absolute(lookup, cache, read))
            unresolved_.push_back(std::move(lookup));
}

void ImportFollower::predict_module(const std::string& dir, const std::string& module, const std::string& tag,
                                    const FetchCache& cache, const Read& read)
{
    // Python stats the source to check that its bytecode is current, then reads the bytecode.
    read(FetchKind::metadata, child_of(dir, module + ".py"), Ahead::next);
    predict(child_of(dir, "__pycache__/" + module + "." + tag + ".pyc"), Ahead::next, cache, read);
}

void ImportFollower::predict(const std::string& path, Ahead ahead, const FetchCache& cache, const Read& read)
{
    // Known not to be there (a package without bytecode): nothing to read, not even a lookup.
    if (const FetchAnswer* dir = cache.cached(parent_of(path)); dir && dir->listed() && !dir->listed_name(name_of(path)))
        return;
    if (!predicted_.insert(path).second)
        return;
    const FetchAnswer* known = cache.cached(path);
    if (!known || !known->serves(FetchKind::content)) {   // unknown, or its metadata only
        read(FetchKind::content, path, ahead);   // after_read follows it when read
        return;
    }
    // Read before anything imported it (asked, or beside another): its imports are looked up now.
    if (known->content() && known->followed_is(S_IFREG) && path.ends_with(".pyc"))
        follow(path, cache.cache().content_path(known->mirror), cache, read);
}

} // namespace canopy::stage
