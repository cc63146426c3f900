// How canopy's command line is read: where parsing is, and the table that maps every mpiexec-style spelling to its
// handler and its --help line (option_table.cpp). The parser that walks the arguments is options.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "options.hpp"

namespace canopy::option_parsing {

// Where parsing is: the arguments, the next unread one, and the option being handled.
struct ArgCursor {
    const std::vector<std::string>& args;
    std::size_t next;                        // index of the next unread argument
    std::string spelling;                    // as the user typed it, without "=value"
    std::optional<std::string> inline_value; // from "--opt=value"
};

// Options plus the spellings used for options that can conflict, so errors name what the user typed.
struct ParseState {
    Options options;
    std::size_t app = 0;   // the program whose options are being read
    std::string hosts_spelling, hostfile_spelling, sim_nodes_spelling, standalone_spelling;
    std::optional<std::string> configfile;   // -configfile: the programs, one per line
    std::string program_option;               // a program option given on the command line, e.g. "-n"

    AppOptions& program() { return options.apps[app]; }
};

using Handler = Status (*)(ParseState&, ArgCursor&);

enum class Takes {
    nothing,        // a flag
    value,          // "-o V" or "--opt=V"
    env_pair,       // "K=V", or Hydra's two arguments "K V"
    optional_inline // only "--opt=V"; never consumes the next argument
};

// One option: its spellings, what it takes, its --help line and what it does.
struct OptionSpec {
    std::vector<std::string_view> spellings; // the first is the one --help shows first
    Takes takes;
    std::string_view metavar;
    std::string_view group;
    std::string_view help;
    Handler handler;
    bool per_program = false;   // also allowed after a ':' and on -configfile's lines
};

// Every option, in --help's order.
const std::vector<OptionSpec>& option_table();
// The option with this exact spelling, or null.
const OptionSpec* find_option(std::string_view spelling);

} // namespace canopy::option_parsing
