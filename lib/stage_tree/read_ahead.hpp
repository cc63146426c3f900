// Which paths the root reads before any rank asks for them (docs/staging.md, "Read-ahead").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "stage_tree/elf_needs.hpp"
#include "stage/fetch_cache.hpp"
#include "stage_tree/import_follower.hpp"

namespace canopy::stage {

// A first job is bound by latency: a rank looks its paths up one after another, and each first lookup waits for
// the root's reads. Read ahead, most of them are answered before they are asked:
//  - any path read: its directory's listing, so that the names it lacks are known missing below;
//  - a directory in use (a rank asked for something in it, or in one of its subdirectories, or listed it): every
//    entry's metadata, so the stats of a module search are known below, and its subdirectories' listings, so
//    that a package's probes (`pkg/__init__.cpython-311-x86_64-linux-gnu.so`, ...) are known missing below
//    before the rank makes them (their entries wait until a rank asks about one: most of a site-packages
//    directory's packages are never imported);
//  - a file read from a directory: that directory's small files whole (a package's compiled modules, a library
//    directory's small libraries), at most small_file_bytes each, since the rank reads its neighbours next;
//  - a program or library a rank opened, or an extension module an import names: the libraries it needs
//    (DT_NEEDED), whole whatever their size, and theirs in turn, since the loader asks for them next, one after
//    another. Each is looked for where the loader would look and the prefixes allow: the file's RUNPATH (RPATH),
//    then the directories ranks loaded libraries from.
//  - the programs the ranks will run (before_ranks), with the libraries they need, while the tree starts, so
//    that a rank's first questions (its program, the loader's libraries) are answered on its node; for a
//    Python interpreter, what its start reads too. A binary's metadata and ELF headers only (the kernel maps it
//    from the shared filesystem), a script whole;
//  - a compiled Python module a rank reads: the modules it imports, and theirs in turn (ImportFollower), before
//    the rest. Module files are left to it: not read ahead, whole or by metadata, for being beside another.
// Only under the staged prefixes, and never entries of a listing longer than max_listing.
class ReadAheadPolicy {
public:
    static constexpr std::int64_t small_file_bytes = 1 << 20;
    static constexpr std::size_t max_listing = 4096;

    // What to read ahead: the metadata of a path, or its content (a directory's listing, a small file whole),
    // and how soon.
    using Read = ImportFollower::Read;

    explicit ReadAheadPolicy(std::vector<std::string> prefixes) : prefixes_(std::move(prefixes)) {}

    // `path` was read at the root for `kind` (`asked`: a rank asked for it, rather than read-ahead) and answered
    // with `answer`; `cache` is the root's, which knows what is read or on its way already.
    void after_read(FetchKind kind, const std::string& path, const FetchAnswer& answer, bool asked,
                    const FetchCache& cache, const Read& read);

    // Before any rank starts, for each program: `argv` as the ranks run it, with their PATH and LD_LIBRARY_PATH.
    // The file argv[0] names (absolute, or each directory of PATH in turn, up to the first that is not staged) is
    // read whole if staged, and what it needs follows, looked for in LD_LIBRARY_PATH first. A program named
    // pythonX.Y in a bin directory (or a symlink to one) also has its start read ahead, and the modules its
    // command line imports first (python_command_imports).
    void before_ranks(const std::vector<std::string>& argv, const std::string& path_variable,
                      const std::string& library_path_variable, const FetchCache& cache, const Read& read);
    // A program read ahead as Ahead::program turned out a binary that needs `needs` (read from its headers at
    // the root, not copied): reads those libraries.
    void program_needs(const std::string& path, const ElfNeeds& needs, const FetchCache& cache, const Read& read);

private:
    bool staged(const std::string& path) const;
    // Marks `dir` as in use; if that is news and its listing is known, reads its entries ahead again.
    void use(const std::string& dir, const FetchCache& cache, const Read& read);
    void read_entries(const std::string& dir, const FetchAnswer& listing, const Read& read) const;
    // `program` is about to start with `arguments`: if it is a Python interpreter, what its start reads, and what
    // its command line imports.
    void python_starts(const std::string& program, const std::vector<std::string>& arguments,
                       const FetchCache& cache, const Read& read);
    // The loader's lookups below each staged library directory, before it opens a library there.
    void loader_searches(const Read& read);
    // `path` was opened (or is needed) and is an ELF file, the root's copy at `copy`: reads what it needs.
    void read_needed_libraries(const std::string& path, const std::string& copy, const FetchCache& cache,
                               const Read& read);
    void read_libraries(const std::string& path, const ElfNeeds& needs, const FetchCache& cache, const Read& read);

    std::vector<std::string> prefixes_;
    std::vector<std::string> library_dirs_;       // where ranks loaded libraries from, in the order first seen
    std::set<std::string> searched_;              // library directories whose loader subdirectories were read
    // What before_ranks read: the programs the ranks may run, and the arguments each runs with.
    std::map<std::string, std::vector<std::string>> programs_;
    std::set<std::string> libraries_;             // files whose needs were looked at
    std::set<std::string> needed_;                // libraries read whole because another needs them
    std::set<std::string> in_use_;          // directories a rank asked about: their subdirectories are listed
    std::set<std::string> reading_files_;   // directories a rank read a file from: their small files go whole
    ImportFollower imports_;
};

} // namespace canopy::stage
