// What a compiled Python module imports as it runs (docs/staging.md, "Read-ahead").
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace canopy::stage {

// One `import` statement: `from ..pkg import a, b` is {"pkg", 2, {"a", "b"}}, `import os.path` is {"os.path", 0}.
struct PythonImport {
    std::string module;                  // dotted; empty for `from . import x`
    int level = 0;                       // 0 absolute, else the number of leading dots
    std::vector<std::string> fromlist;   // the names after `import` in a `from` statement

    bool operator==(const PythonImport&) const = default;
};

// The imports of `pyc_file`'s module body and class bodies, in order and each once, as its bytecode has them:
// what importing the module runs. Not its functions' (they run later, if ever). Nullopt for a file that is not
// a .pyc of a Python whose bytecode this reads (3.8 to 3.12), and for a malformed or truncated one.
std::optional<std::vector<PythonImport>> read_python_imports(const std::string& pyc_file);

} // namespace canopy::stage
