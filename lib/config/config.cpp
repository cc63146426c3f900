// canopy.toml: reads and validates config layers with toml++, reporting problems as file:line:col.
#include "config/config.hpp"
#include "util/read_file.hpp"
#include "util/suggest.hpp"
#include "wire/messages.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>

#include <toml++/toml.h>

namespace canopy {
namespace {

namespace fs = std::filesystem;

// What is wrong with one value, and where (the node whose position the message should carry).
struct Problem {
    std::string message;
    const toml::source_region* where;
};

using Applier = std::optional<Problem> (*)(const toml::node&, Config&);

struct KeySpec {
    std::string_view table;
    std::string_view key;
    Applier apply;
};

constexpr std::string_view tables[] = {"launch", "tree", "job", "stage"};

std::optional<Problem> problem(const toml::node& node, std::string message)
{
    return Problem{std::move(message), &node.source()};
}

std::optional<Problem> read_string(const toml::node& node, std::string_view key, std::string& field)
{
    if (!node.is_string()) {
        return problem(node, fmt::format("{} must be a string", key));
    }
    field = node.as_string()->get();
    return std::nullopt;
}

std::optional<Problem> read_command(const toml::node& node, std::string_view key, std::string& field)
{
    std::string value;
    if (auto bad = read_string(node, key, value)) {
        return bad;
    }
    if (value.empty()) {
        return problem(node, fmt::format("{} must name a program, e.g. \"/usr/bin/{}\"", key,
                                         key.substr(0, key.find('_'))));
    }
    field = std::move(value);
    return std::nullopt;
}

std::optional<Problem> read_count(const toml::node& node, std::string_view key, long& field)
{
    if (!node.is_integer() || node.as_integer()->get() < 1) {
        return problem(node, fmt::format("{} must be an integer >= 1", key));
    }
    field = static_cast<long>(node.as_integer()->get());
    return std::nullopt;
}

// Seconds may be written as 30 or 30.0; TOML calls these different types, users do not.
std::optional<double> as_seconds(const toml::node& node)
{
    if (node.is_integer()) {
        return static_cast<double>(node.as_integer()->get());
    }
    if (node.is_floating_point() && std::isfinite(node.as_floating_point()->get())) {
        return node.as_floating_point()->get();
    }
    return std::nullopt;
}

std::optional<Problem> apply_agent(const toml::node& node, Config& config)
{
    std::string agent;
    if (auto bad = read_string(node, "agent", agent)) {
        return bad;
    }
    if (agent == "ssh" || agent == "rsh" || agent == "local") {
        config.agent = std::move(agent);
        return std::nullopt;
    }
    if (agent.starts_with("exec:")) {
        if (agent.find_first_not_of(' ', 5) == std::string::npos) {
            return problem(node, "agent \"exec:\" needs a command, e.g. \"exec:srun -N1 -n1 -w %h\"");
        }
        if (agent.find("%h") == std::string::npos) {
            return problem(node, fmt::format("agent \"{}\" must contain %h where the host name goes", agent));
        }
        config.agent = std::move(agent);
        return std::nullopt;
    }
    return problem(node, fmt::format("agent must be ssh, rsh, local or \"exec:CMD %h\", got \"{}\"", agent));
}

std::optional<Problem> apply_ssh_args(const toml::node& node, Config& config)
{
    const toml::array* array = node.as_array();
    if (array == nullptr) {
        return problem(node, "ssh_args must be an array of strings, e.g. [\"-o\", \"BatchMode=yes\"]");
    }
    std::vector<std::string> args;
    for (const toml::node& element : *array) {
        if (!element.is_string()) {
            return problem(element, "ssh_args must contain only strings");
        }
        args.push_back(element.as_string()->get());
    }
    config.ssh_args = std::move(args);
    return std::nullopt;
}

std::optional<Problem> read_absolute_path(const toml::node& node, std::string_view key, std::string& field,
                                          bool empty_allowed)
{
    std::string path;
    if (auto bad = read_string(node, key, path))
        return bad;
    if ((!empty_allowed || !path.empty()) && (path.empty() || path.front() != '/'))
        return problem(node, fmt::format("{} must be an absolute path{}, got \"{}\"", key,
                                         empty_allowed ? " or \"\"" : "", path));
    field = std::move(path);
    return std::nullopt;
}

std::optional<Problem> apply_stage_prefixes(const toml::node& node, Config& config)
{
    const toml::array* array = node.as_array();
    if (array == nullptr)
        return problem(node, "prefixes must be an array of absolute paths, e.g. [\"/soft/venv\"]");
    std::vector<std::string> prefixes;
    for (const toml::node& element : *array) {
        if (!element.is_string() || element.as_string()->get().empty() || element.as_string()->get().front() != '/')
            return problem(element, "prefixes must contain only absolute paths");
        prefixes.push_back(element.as_string()->get());
    }
    config.stage_prefixes = std::move(prefixes);
    return std::nullopt;
}

// Seconds within a range: from `low` (itself allowed or not) to `high`; `expected` is the error, naming the key.
std::optional<Problem> read_seconds(const toml::node& node, double& field, double low, bool low_allowed, double high,
                                    std::string expected)
{
    auto seconds = as_seconds(node);
    if (!seconds || *seconds < low || (*seconds == low && !low_allowed) || *seconds > high) {
        return problem(node, std::move(expected));
    }
    field = *seconds;
    return std::nullopt;
}

std::optional<Problem> apply_tmpdir(const toml::node& node, Config& config)
{
    std::string dir;
    if (auto bad = read_string(node, "tmpdir", dir)) {
        return bad;
    }
    // Every node creates its job directory here, so a relative path would depend on each daemon's cwd.
    if (!dir.empty() && dir.front() != '/') {
        return problem(node, fmt::format("tmpdir must be an absolute path or \"\", got \"{}\"", dir));
    }
    config.tmpdir = std::move(dir);
    return std::nullopt;
}

using Node = toml::node;

// clang-format off
const KeySpec key_table[] = {
    {"launch", "agent", apply_agent},
    {"launch", "ssh_command", [](const Node& n, Config& c) { return read_command(n, "ssh_command", c.ssh_command); }},
    {"launch", "ssh_args", apply_ssh_args},
    {"launch", "rsh_command", [](const Node& n, Config& c) { return read_command(n, "rsh_command", c.rsh_command); }},
    {"launch", "daemon_path", [](const Node& n, Config& c) { return read_string(n, "daemon_path", c.daemon_path); }},
    {"tree", "fanout", [](const Node& n, Config& c) { return read_count(n, "fanout", c.fanout); }},
    {"tree", "window", [](const Node& n, Config& c) { return read_count(n, "window", c.window); }},
    {"tree", "connect_timeout", [](const Node& n, Config& c) {
         return read_seconds(n, c.connect_timeout, 0, false, 86400,
                             "connect_timeout must be a number of seconds above 0, at most 86400 (a day)");
     }},
    {"tree", "heartbeat_timeout", [](const Node& n, Config& c) {
         return read_seconds(n, c.heartbeat_timeout, wire::min_heartbeat_timeout, true, wire::max_heartbeat_timeout,
                             fmt::format("heartbeat_timeout must be a number of seconds from {:g} to {:g} (a day)",
                                         wire::min_heartbeat_timeout, wire::max_heartbeat_timeout));
     }},
    {"tree", "bind_address", [](const Node& n, Config& c) { return read_string(n, "bind_address", c.bind_address); }},
    {"job", "kill_grace", [](const Node& n, Config& c) {
         return read_seconds(n, c.kill_grace, 0, true, 86400,
                             "kill_grace must be a number of seconds from 0 to 86400 (a day)");
     }},
    {"job", "tmpdir", apply_tmpdir},
    {"job", "pmi", [](const Node& n, Config& c) -> std::optional<Problem> {
         auto interfaces = n.is_string() ? parse_pmi_interfaces(n.as_string()->get()) : std::nullopt;
         if (!interfaces)
             return problem(n, "pmi must be \"all\", \"pmix\", \"simple\" or \"none\"");
         c.pmi = *interfaces;
         return std::nullopt;
     }},
    {"job", "pmix", [](const Node& n, Config& c) -> std::optional<Problem> {
         if (n.is_boolean()) {
             c.pmix = n.as_boolean()->get() ? PmixMode::on_demand : PmixMode::off;
             return std::nullopt;
         }
         if (n.is_string() && n.as_string()->get() == "eager") {
             c.pmix = PmixMode::eager;
             return std::nullopt;
         }
         return problem(n, "pmix must be true, false or \"eager\"");
     }},
    {"stage", "prefixes", apply_stage_prefixes},
    {"stage", "manifest", [](const Node& n, Config& c) { return read_absolute_path(n, "manifest", c.stage_manifest, true); }},
    {"stage", "cache_dir", [](const Node& n, Config& c) { return read_absolute_path(n, "cache_dir", c.stage_cache_dir, false); }},
    {"stage", "interposer", [](const Node& n, Config& c) { return read_absolute_path(n, "interposer", c.stage_interposer, true); }},
};
// clang-format on

// The closest candidate, if it is a plausible typo of `word`.
std::optional<std::string_view> closest(std::string_view word, const std::vector<std::string_view>& candidates)
{
    return closest_match(word, candidates, std::max<std::size_t>(1, word.size() / 3));
}

const KeySpec* find_key(std::string_view table, std::string_view key)
{
    for (const auto& spec : key_table) {
        if (spec.table == table && spec.key == key) {
            return &spec;
        }
    }
    return nullptr;
}

// The table a key belongs in, when a user put it in the wrong one.
std::optional<std::string_view> home_of(std::string_view key)
{
    for (const auto& spec : key_table) {
        if (spec.key == key) {
            return spec.table;
        }
    }
    return std::nullopt;
}

std::string unknown_key_message(std::string_view key, std::string_view table)
{
    std::string where = table.empty() ? std::string("at the top level") : fmt::format("in [{}]", table);
    if (auto home = home_of(key); home && *home != table) {
        return fmt::format("unknown key '{}' {}; it belongs in [{}]", key, where, *home);
    }
    std::vector<std::string_view> candidates;
    for (const auto& spec : key_table) {
        if (spec.table == table) {
            candidates.push_back(spec.key);
        }
    }
    if (auto guess = closest(key, candidates)) {
        return fmt::format("unknown key '{}' {}; did you mean '{}'?", key, where, *guess);
    }
    if (table.empty()) {
        return fmt::format("unknown key '{}' {}; settings go in [launch], [tree] or [job]", key, where);
    }
    std::string known;
    for (std::string_view candidate : candidates) {
        known += known.empty() ? "" : ", ";
        known += candidate;
    }
    return fmt::format("unknown key '{}' {}; known keys: {}", key, where, known);
}

std::string unknown_table_message(std::string_view name)
{
    std::vector<std::string_view> candidates(std::begin(tables), std::end(tables));
    if (auto guess = closest(name, candidates)) {
        return fmt::format("unknown table [{}]; did you mean [{}]?", name, *guess);
    }
    return fmt::format("unknown table [{}]; canopy.toml has [launch], [tree] and [job]", name);
}

bool earlier(const toml::source_position& a, const toml::source_position& b)
{
    return a.line != b.line ? a.line < b.line : a.column < b.column;
}

// Checks and applies every key; toml++ tables are not in file order, so report the first problem by position.
std::optional<Problem> apply_document(const toml::table& root, Config& config)
{
    std::optional<Problem> first;
    auto note = [&first](std::optional<Problem> found) {
        if (found && (!first || earlier(found->where->begin, first->where->begin))) {
            first = std::move(found);
        }
    };
    for (const auto& [name, node] : root) {
        const bool known_table = std::find(std::begin(tables), std::end(tables), name.str()) != std::end(tables);
        if (!node.is_table()) {
            note(Problem{known_table ? fmt::format("'{}' must be a table: write [{}] on its own line", name.str(),
                                                   name.str())
                                     : unknown_key_message(name.str(), ""),
                         &name.source()});
            continue;
        }
        if (!known_table) {
            note(Problem{unknown_table_message(name.str()), &name.source()});
            continue;
        }
        for (const auto& [key, value] : *node.as_table()) {
            const KeySpec* spec = find_key(name.str(), key.str());
            if (spec == nullptr) {
                note(Problem{unknown_key_message(key.str(), name.str()), &key.source()});
                continue;
            }
            note(spec->apply(value, config));
        }
    }
    return first;
}

Error located_error(std::string_view source_name, const toml::source_position& where, std::string_view message)
{
    return make_error("config {}:{}:{}: {}", source_name, where.line, where.column, message);
}

// toml++ says "Error while parsing value: ..."; fit that into canopy's one-line lower-case style.
Error syntax_error(std::string_view source_name, const toml::source_position& where, std::string_view description)
{
    std::string text(description);
    if (!text.empty()) {
        text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    }
    std::replace(text.begin(), text.end(), '\n', ' ');
    return located_error(source_name, where, "invalid TOML: " + text);
}

bool file_exists(const fs::path& path)
{
    std::error_code ec;
    return fs::exists(path, ec);
}

Status apply_file(const fs::path& path, Config& config)
{
    // A config is a few lines; 16 MiB is far past any, and keeps a device or a wrong file from being read on.
    auto text = read_file(path.string(), std::size_t{16} << 20, "config");
    if (!text) {
        return text.error();
    }
    auto applied = apply_config(*text, path.string(), std::move(config));
    if (!applied) {
        return applied.error();
    }
    config = std::move(*applied);
    return {};
}

std::vector<std::string> known_profiles(const ConfigSources& dirs)
{
    std::vector<std::string> names;
    for (const std::string& dir : {dirs.system_dir, dirs.source_dir}) {
        if (dir.empty()) {
            continue;
        }
        std::error_code ec;
        for (fs::directory_iterator it(fs::path(dir) / "profiles", ec), end; !ec && it != end; it.increment(ec)) {
            if (it->path().extension() == ".toml") {
                names.push_back(it->path().stem().string());
            }
        }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

Result<fs::path> find_profile(const ConfigSources& dirs, const std::string& name)
{
    // A profile is a name, not a path; refuse anything that could walk out of profiles/.
    const bool valid = !name.empty() && name.front() != '.' &&
                       std::all_of(name.begin(), name.end(), [](unsigned char ch) {
                           return std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.';
                       });
    if (!valid) {
        return make_error("profile name '{}' may only contain letters, digits, '-', '_' and '.'", name);
    }
    for (const std::string& dir : {dirs.system_dir, dirs.source_dir}) {
        if (dir.empty()) {
            continue;
        }
        fs::path candidate = fs::path(dir) / "profiles" / (name + ".toml");
        if (file_exists(candidate)) {
            return candidate;
        }
    }
    std::vector<std::string> known = known_profiles(dirs);
    if (known.empty()) {
        return make_error("profile '{}' not found; no profiles are installed under {}/profiles", name,
                          dirs.system_dir.empty() ? dirs.source_dir : dirs.system_dir);
    }
    std::string list;
    for (const std::string& known_name : known) {
        list += list.empty() ? "" : ", ";
        list += known_name;
    }
    return make_error("profile '{}' not found; known: {}", name, list);
}

std::optional<fs::path> user_config_path()
{
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    if (xdg != nullptr && *xdg != '\0') {
        return fs::path(xdg) / "canopy" / "canopy.toml";
    }
    const char* home = std::getenv("HOME");
    if (home != nullptr && *home != '\0') {
        return fs::path(home) / ".config" / "canopy" / "canopy.toml";
    }
    return std::nullopt;
}

Result<Config> load_layers(const ConfigSources& dirs, const std::optional<std::string>& explicit_file,
                           const std::optional<std::string>& profile)
{
    Config config;
    if (!dirs.system_dir.empty()) {
        fs::path system_file = fs::path(dirs.system_dir) / "canopy.toml";
        if (file_exists(system_file)) {
            if (Status status = apply_file(system_file, config); !status) {
                return status.error();
            }
        }
    }
    if (profile) {
        auto path = find_profile(dirs, *profile);
        if (!path) {
            return path.error();
        }
        if (Status status = apply_file(*path, config); !status) {
            return status.error();
        }
    }
    if (auto user_file = user_config_path(); user_file && file_exists(*user_file)) {
        if (Status status = apply_file(*user_file, config); !status) {
            return status.error();
        }
    }
    if (const char* env_file = std::getenv("CANOPY_CONFIG"); env_file != nullptr && *env_file != '\0') {
        if (!file_exists(env_file)) {
            return make_error("config file '{}' from $CANOPY_CONFIG not found; fix the path or unset CANOPY_CONFIG",
                              env_file);
        }
        if (Status status = apply_file(env_file, config); !status) {
            return status.error();
        }
    }
    if (explicit_file) {
        if (!file_exists(*explicit_file)) {
            return make_error("config file '{}' (from --config) not found", *explicit_file);
        }
        if (Status status = apply_file(*explicit_file, config); !status) {
            return status.error();
        }
    }
    return config;
}

} // namespace

Result<Config> apply_config(std::string_view toml_text, std::string_view source_name, Config base)
{
    try {
        toml::table root;
#if TOML_EXCEPTIONS
        try {
            root = toml::parse(toml_text, source_name);
        } catch (const toml::parse_error& error) {
            return syntax_error(source_name, error.source().begin, error.description());
        }
#else
        toml::parse_result parsed = toml::parse(toml_text, source_name);
        if (!parsed) {
            return syntax_error(source_name, parsed.error().source().begin, parsed.error().description());
        }
        root = std::move(parsed).table();
#endif
        if (auto bad = apply_document(root, base)) {
            return located_error(source_name, bad->where->begin, bad->message);
        }
        base.loaded_from.emplace_back(source_name);
        return base;
    } catch (const std::exception& error) {
        return make_error("config {}: {}", source_name, error.what());
    }
}

Result<Config> load_config(const ConfigSources& dirs, const std::optional<std::string>& explicit_file,
                           const std::optional<std::string>& profile)
{
    try {
        return load_layers(dirs, explicit_file, profile);
    } catch (const std::exception& error) {
        return make_error("config: {}", error.what());
    }
}

} // namespace canopy
