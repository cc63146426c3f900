// Launch agents: how a parent starts canopyd on a child's host.
#include "tree/agent.hpp"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

namespace canopy {

Result<AgentKind> parse_agent(std::string_view spec)
{
    if (spec == "ssh")
        return AgentKind::ssh;
    if (spec == "rsh")
        return AgentKind::rsh;
    if (spec == "local")
        return AgentKind::local;
    if (spec.starts_with("exec:")) {
        if (spec.size() == 5)
            return make_error("launch agent 'exec:' needs a command, e.g. exec:'ssh -p 2222 %h'");
        return AgentKind::exec;
    }
    return make_error("unknown launch agent '{}'; use ssh, rsh, local or exec:CMD", spec);
}

std::string shell_quote(std::string_view word)
{
    bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789@%+=:,./-_") == std::string_view::npos;
    if (plain)
        return std::string(word);
    std::string quoted = "'";
    for (char c : word) {
        if (c == '\'')
            quoted += "'\\''";
        else
            quoted += c;
    }
    return quoted + "'";
}

std::string shell_join(const std::vector<std::string>& words)
{
    std::string out;
    for (const auto& word : words) {
        if (!out.empty())
            out += ' ';
        out += shell_quote(word);
    }
    return out;
}

Result<std::vector<std::string>> agent_command(const AgentSettings& settings, const std::string& host,
                                               const std::vector<std::string>& daemon_command)
{
    auto kind = parse_agent(settings.spec);
    if (!kind)
        return kind.error();
    switch (*kind) {
    case AgentKind::local:
        return daemon_command;
    case AgentKind::ssh: {
        std::vector<std::string> argv{settings.ssh_command};
        argv.insert(argv.end(), settings.ssh_args.begin(), settings.ssh_args.end());
        argv.push_back(host);
        argv.push_back(shell_join(daemon_command));   // ssh hands one string to the remote shell
        return argv;
    }
    case AgentKind::rsh:
        return std::vector<std::string>{settings.rsh_command, host, shell_join(daemon_command)};
    case AgentKind::exec: {
        // Run directly, like pdsh's exec module: %h becomes the host; without %h the host goes first, as for
        // ssh (and Hydra's -launcher-exec). The daemon command follows as separate words.
        auto words = split_words(std::string_view(settings.spec).substr(5));
        if (!words)
            return words.error();
        bool has_host = false;
        for (auto& word : *words) {
            for (std::size_t at; (at = word.find("%h")) != std::string::npos;) {
                word.replace(at, 2, host);
                has_host = true;
            }
        }
        if (!has_host)
            words->push_back(host);
        words->insert(words->end(), daemon_command.begin(), daemon_command.end());
        return std::move(*words);
    }
    }
    return make_error("unknown launch agent '{}'", settings.spec);
}

Result<std::vector<std::string>> split_words(std::string_view command)
{
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < command.size(); ++i) {
        char c = command[i];
        if (quote) {
            if (c == quote)
                quote = 0;
            else if (c == '\\' && quote == '"' && i + 1 < command.size())
                word += command[++i];
            else
                word += c;
        } else if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
        } else if (c == '\\' && i + 1 < command.size()) {
            word += command[++i];
            in_word = true;
        } else if (c == ' ' || c == '\t') {
            if (in_word)
                words.push_back(std::move(word));
            word.clear();
            in_word = false;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (quote)
        return make_error("launch agent command has an unterminated {} quote: {}", quote, command);
    if (in_word)
        words.push_back(std::move(word));
    if (words.empty())
        return make_error("launch agent 'exec:' needs a command, e.g. exec:'ssh -p 2222 %h'");
    return words;
}

std::string simulated_node_address(long node_index)
{
    // Skip .0 and .255 in the last octet; 254 * 256 addresses cover any simulated job this machine can run.
    long host = node_index % 254 + 1;
    long subnet = node_index / 254;
    return fmt::format("127.1.{}.{}", subnet % 256, host);
}

std::string simulated_node_name(long node_index) { return fmt::format("sim{:04d}", node_index); }

TempBase node_temp_base(const std::string& configured_base)
{
    if (!configured_base.empty())
        return {configured_base, "[job] tmpdir"};
    if (const char* env_tmp = std::getenv("TMPDIR"); env_tmp && *env_tmp)
        return {env_tmp, "TMPDIR"};
    return {default_temp_base(), "the default"};
}

std::string temp_base_problem(const TempBase& base)
{
    struct stat info {};
    if (::stat(base.path.c_str(), &info) != 0)
        return fmt::format("; {} ({}) does not exist", base.path, base.source);
    if (!S_ISDIR(info.st_mode))
        return fmt::format("; {} ({}) is not a directory", base.path, base.source);
    return "";
}

std::string node_dir_prefix(const std::string& job_id, const std::string& node)
{
    return fmt::format("canopy-{}-{}", job_id, node);
}

std::string default_temp_base()
{
    static const std::string base = [] {
        struct statfs info;
        bool tmpfs = ::statfs("/dev/shm", &info) == 0 && info.f_type == TMPFS_MAGIC;
        return tmpfs && ::access("/dev/shm", W_OK | X_OK) == 0 ? std::string("/dev/shm") : std::string("/tmp");
    }();
    return base;
}

} // namespace canopy
