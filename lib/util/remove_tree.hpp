// Removing a node's temp dirs at the end of a job.
#pragma once

#include <string>

namespace canopy {

// Removes `path` and everything under it, without following symlinks; a path that is not there is not an error.
// Unlike std::filesystem::remove_all, a directory is removed with rmdir alone: remove() tries unlink first, and
// that takes the parent directory's lock once more. With every simulated node tearing down under one /tmp, the
// waits for that lock were a seventh of a launch's CPU.
void remove_tree(const std::string& path);

} // namespace canopy
