// Launch agents: how a parent starts canopyd on a child's host.
#include "tree/agent.hpp"

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

namespace {

std::string join_quoted(const std::vector<std::string>& words)
{
    std::string out;
    for (const auto& word : words) {
        if (!out.empty())
            out += ' ';
        out += shell_quote(word);
    }
    return out;
}

} // namespace

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
        argv.push_back(join_quoted(daemon_command));   // ssh hands one string to the remote shell
        return argv;
    }
    case AgentKind::rsh:
        return std::vector<std::string>{settings.rsh_command, host, join_quoted(daemon_command)};
    case AgentKind::exec: {
        std::string command = settings.spec.substr(5);
        std::string expanded;
        for (std::size_t i = 0; i < command.size(); ++i) {
            if (command[i] == '%' && i + 1 < command.size() && command[i + 1] == 'h') {
                expanded += shell_quote(host);
                ++i;
            } else {
                expanded += command[i];
            }
        }
        return std::vector<std::string>{"/bin/sh", "-c", expanded + " " + join_quoted(daemon_command)};
    }
    }
    return make_error("unknown launch agent '{}'", settings.spec);
}

std::string simulated_node_address(long node_index)
{
    // Skip .0 and .255 in the last octet; 254 * 256 addresses cover any simulated job this machine can run.
    long host = node_index % 254 + 1;
    long subnet = node_index / 254;
    return fmt::format("127.1.{}.{}", subnet % 256, host);
}

std::string simulated_node_name(long node_index) { return fmt::format("sim{:04d}", node_index); }

std::string node_temp_dir(const std::string& configured_base, const std::string& job_id, const std::string& node)
{
    std::string base = configured_base;
    if (base.empty()) {
        const char* env_tmp = std::getenv("TMPDIR");
        base = env_tmp && *env_tmp ? env_tmp : "/tmp";
    }
    return fmt::format("{}/canopy-{}-{}", base, job_id, node);
}

} // namespace canopy
