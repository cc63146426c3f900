// What the filesystem says about a path or a directory now, for building and validating the stage index.
#pragma once

#include <dirent.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stage/directory_handles.hpp"
#include "stage/index.hpp"

namespace canopy::stage {

std::string read_link(const std::string& path);   // empty if it is not a readable link
std::string real_path(const std::string& path);   // empty if it does not resolve

// lstat, then stat and readlink for a link; mirror: its realpath, when the followed view exists.
KnownPath probe(const std::string& path);
// probe() without the canonical path, through cached directory handles: what validation needs.
KnownPath probe_cheaply(DirectoryHandles& handles, const std::string& path);

// The sorted names in a directory, opened through the cached handles: what validation compares.
std::vector<std::string> list_names(DirectoryHandles& handles, const std::string& dir, bool& ok);

struct Listed {
    std::string name;
    unsigned char type = DT_UNKNOWN;
    std::uint64_t ino = 0;
    std::string link_target;
};
// A directory's entries sorted by name, with their types (lstat where readdir does not say) and link targets.
std::vector<Listed> list_directory(const std::string& dir, bool& ok);

} // namespace canopy::stage
