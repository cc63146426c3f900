// What a program or shared library asks the dynamic loader for (docs/staging.md, "Read-ahead").
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace canopy::stage {

struct ElfNeeds {
    std::vector<std::string> needed;        // DT_NEEDED names, in the loader's order
    std::vector<std::string> search_path;   // DT_RUNPATH (else DT_RPATH) split at ':', $ORIGIN unexpanded
};

// The dynamic section of `file`, an ELF file of this machine's class and byte order. Nullopt for anything else,
// and for a malformed or truncated file. Reads the headers and the names only, never the whole file (a
// library's string table holds every symbol's name too).
std::optional<ElfNeeds> read_elf_needs(const std::string& file);

} // namespace canopy::stage
