// `canopy stage record`: runs a command once under the interposer and writes the manifest later jobs stage.
#pragma once

#include <string>
#include <vector>

namespace canopy {

// args: what follows "canopy stage". Returns the process exit code; errors are printed as one line.
int run_stage_command(const std::vector<std::string>& args, const std::string& launcher_path);

} // namespace canopy
