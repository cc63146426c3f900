// What a Python command line imports first: its -c code's top-level import statements, or its -m module.
#include "stage_tree/python_command.hpp"

#include <optional>
#include <regex>
#include <string_view>

#include "util/text.hpp"

namespace canopy::stage {
namespace {

bool dotted_name(std::string_view text)
{
    static const std::regex dotted(R"([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)");
    return std::regex_match(text.begin(), text.end(), dotted);
}

// "a.b as c" -> "a.b"
std::string_view before_as(std::string_view item)
{
    item = trim(item);
    return trim(item.substr(0, item.find_first_of(" \t")));
}

// Each comma-separated name of `list` ("a as b, c"), without aliases or parentheses; nothing if one is not a name.
std::optional<std::vector<std::string>> names_of(std::string_view list, bool dotted)
{
    std::vector<std::string> names;
    std::string_view rest = trim(list);
    if (rest.starts_with('('))
        rest = rest.substr(1);
    if (rest.ends_with(')'))
        rest.remove_suffix(1);
    for (const auto& item : split_commas(rest)) {
        auto name = before_as(item);
        if (name.empty())   // a trailing comma before ')' leaves blanks
            continue;
        if (!dotted_name(name) || (!dotted && name.find('.') != std::string_view::npos))
            return std::nullopt;
        names.emplace_back(name);
    }
    return names;
}

// One statement: `import a.b as c, d` or `from a.b import x, y`; relative ones import nothing here.
void statement_imports(std::string_view statement, std::vector<PythonImport>& imports)
{
    statement = trim(statement.substr(0, statement.find('#')));
    if (statement.starts_with("import ")) {
        if (auto modules = names_of(statement.substr(7), true))
            for (auto& module : *modules)
                imports.push_back({std::move(module), 0, {}});
    } else if (statement.starts_with("from ")) {
        auto rest = trim(statement.substr(5));
        auto space = rest.find_first_of(" \t");
        if (space == std::string_view::npos)
            return;
        auto module = rest.substr(0, space);
        auto after = trim(rest.substr(space));
        if (!after.starts_with("import") || !dotted_name(module))
            return;
        auto names = trim(after.substr(6)) == "*" ? std::optional<std::vector<std::string>>({"*"})
                                                      : names_of(after.substr(6), false);
        if (names)
            imports.push_back({std::string(module), 0, std::move(*names)});
    }
}

// Statements that start a line run when the code does; indented ones may be in a function that never runs.
std::vector<PythonImport> code_imports(std::string_view code)
{
    std::vector<PythonImport> imports;
    while (!code.empty()) {
        auto end = code.find('\n');
        std::string_view line = code.substr(0, end);
        code = end == std::string_view::npos ? std::string_view() : code.substr(end + 1);
        if (line.empty() || line.front() == ' ' || line.front() == '\t')
            continue;
        while (!line.empty()) {
            auto semicolon = line.find(';');
            statement_imports(line.substr(0, semicolon), imports);
            line = semicolon == std::string_view::npos ? std::string_view() : line.substr(semicolon + 1);
        }
    }
    return imports;
}

} // namespace

std::vector<PythonImport> python_command_imports(const std::vector<std::string>& arguments)
{
    // Python's own option syntax: flags combine (`-Bc CODE`), and -c, -m, -W and -X take the rest of their
    // argument or the next one.
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        const std::string& argument = arguments[i];
        if (argument.size() < 2 || argument[0] != '-' || argument == "--")
            return {};   // a script, standard input ("-"), or the end of the options
        if (argument[1] == '-')
            continue;    // --long options take no value this needs
        for (std::size_t at = 1; at < argument.size(); ++at) {
            char flag = argument[at];
            if (flag != 'c' && flag != 'm' && flag != 'W' && flag != 'X')
                continue;
            std::string value = at + 1 < argument.size() ? argument.substr(at + 1)
                                : i + 1 < arguments.size() ? arguments[++i] : std::string();
            if (flag == 'c')
                return code_imports(value);
            if (flag == 'm')
                return dotted_name(value) ? std::vector<PythonImport>{{value, 0, {}}} : std::vector<PythonImport>{};
            break;   // -W ARG or -X OPT: the value was consumed
        }
    }
    return {};
}

} // namespace canopy::stage
