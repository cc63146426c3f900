// Which Python modules the root reads ahead because a module that runs imports them (docs/staging.md,
// "Read-ahead").
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "stage/fetch_cache.hpp"
#include "stage_tree/python_imports.hpp"

namespace canopy::stage {

// A rank imports a module's imports next, one after another, each a question to the root on a first job. When
// the root reads a compiled module (`pkg/__pycache__/mod.cpython-311.pyc`) for a rank, or because one it read
// imports it, it reads what that module's body imports, and theirs in turn: each package's `__init__`
// bytecode, each module's bytecode, each extension module. Where to look is what Python does: relative to the
// package for `from . import x`, and for an absolute name in the directories ranks imported top-level modules
// from (their sys.path, learned as they go). Imports in functions are not followed: they run later, if ever.
// So a module file (bytecode, stub, extension module, or a source whose bytecode is beside it) is not read
// ahead, whole or by its metadata, just for being beside one a rank read: most of the standard library's never
// run, and those that do are followed. Unless the ranks' bytecode turns out to be one this cannot read.
class ImportFollower {
public:
    using Read = std::function<void(FetchKind kind, const std::string& path, Ahead ahead)>;

    // `path` was read at the root and answered with `answer`, for a rank (`asked`) or ahead; `cache` is the
    // root's, whose listings tell where modules are.
    void after_read(const std::string& path, const FetchAnswer& answer, bool asked, const FetchCache& cache,
                    const Read& read);

    // Whether the file `name` in a directory a rank works in is left to this, not read ahead with the others.
    // `listing` is that directory's.
    bool follows(const std::string& name, const FetchAnswer& listing) const;

    // A Python interpreter is about to start (before any rank does): `stdlib` is its standard library's directory,
    // `site_dirs` where its site module looks for packages, and `tag` its bytecode's ("cpython-311"). Those, and
    // `lib-dynload`, are its sys.path. Reads what every start imports from there (the `encodings` package and
    // `utf_8`, `sitecustomize`; before 3.11, which freezes them, `site` and what it imports).
    void interpreter_starts(const std::string& stdlib, const std::vector<std::string>& site_dirs,
                            const std::string& tag, const FetchCache& cache, const Read& read);

    // The ranks' command line imports `imports` first (`python -c 'import numpy'`): each is followed as soon as
    // a sys.path directory that has it is listed, before a rank asks.
    void command_imports(std::vector<PythonImport> imports, const std::string& tag, const FetchCache& cache,
                         const Read& read);

    // Whether `path` is an extension module an import names: the loader maps it next, and what it needs.
    bool loads(const std::string& path) const { return path.ends_with(".so") && predicted_.count(path) > 0; }

private:
    // An import being looked for: `parts` of a dotted name still to find from `dir`.
    struct Lookup {
        std::string dir;
        std::vector<std::string> parts;
        std::vector<std::string> fromlist;
        std::string tag;        // the bytecode's, "cpython-311"
        bool package = false;   // `dir` is a package the import runs: its __init__ too
    };

    void follow(const std::string& pyc, const std::string& copy, const FetchCache& cache, const Read& read);
    void look_up(Lookup lookup, const FetchCache& cache, const Read& read);
    // An absolute import: from the first sys.path directory that has its top level; false if none known has, or
    // one before it is not listed yet.
    bool look_up_absolute(const Lookup& lookup, const FetchCache& cache, const Read& read);
    // The same, or kept (unresolved_) until a sys.path directory's listing or a new one can tell.
    void look_up_absolute_or_wait(Lookup lookup, const FetchCache& cache, const Read& read);
    void learn_root(std::string dir, const FetchCache& cache, const Read& read);
    // A sys.path directory is new, or its listing is: the absolute imports no root had are looked up again.
    void retry_unresolved(const FetchCache& cache, const Read& read);
    // Module `module` in `dir`, whose source Python checks and whose bytecode it runs.
    void predict_module(const std::string& dir, const std::string& module, const std::string& tag,
                        const FetchCache& cache, const Read& read);
    void predict(const std::string& path, Ahead ahead, const FetchCache& cache, const Read& read);

    // Whether the ranks' Python writes bytecode this reads. Until the first compiled module a rank reads says,
    // it is taken to: a Python's start lists the standard library's directory before it reads any.
    enum class Bytecode { unseen, read, unreadable } bytecode_ = Bytecode::unseen;
    std::vector<std::string> roots_;         // the ranks' sys.path as far as seen, in the order first seen
    std::set<std::string> followed_;         // compiled modules whose imports were looked up
    std::set<std::string> predicted_;        // modules read ahead because an import names them
    std::map<std::string, std::vector<Lookup>> waiting_;   // lookups waiting for a directory's listing
    std::vector<Lookup> unresolved_;         // absolute imports no known root has: tried again with a new root
};

} // namespace canopy::stage
