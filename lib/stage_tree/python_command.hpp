// What a Python command line imports first, read from its arguments (docs/staging.md, "Read-ahead").
#pragma once

#include <string>
#include <vector>

#include "stage_tree/python_imports.hpp"

namespace canopy::stage {

// `arguments` follow the interpreter (argv[1:]). For `-c CODE`: the absolute imports of CODE's statements that
// start a line, in order (what `python -c 'import numpy'` runs first). For `-m MODULE`: that module. Nothing
// for a script, standard input, or a command line this does not read.
std::vector<PythonImport> python_command_imports(const std::vector<std::string>& arguments);

} // namespace canopy::stage
