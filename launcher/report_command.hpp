// `canopy report`: prints a saved --timing JSON file again, or two side by side.
#pragma once

#include <string>
#include <vector>

namespace canopy {

// args: what follows "canopy report". Returns the exit code; errors are one line naming the file.
int run_report_command(const std::vector<std::string>& args);

} // namespace canopy
