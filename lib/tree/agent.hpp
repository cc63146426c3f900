// Launch agents: how a parent starts canopyd on a child's host (ssh, rsh, exec:CMD, or local processes).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

enum class AgentKind { ssh, rsh, exec, local };

struct AgentSettings {
    std::string spec = "ssh";                 // ssh | rsh | local | exec:CMD (%h is the host, else it goes first)
    std::string ssh_command = "ssh";
    std::vector<std::string> ssh_args;
    std::string rsh_command = "rsh";
};

Result<AgentKind> parse_agent(std::string_view spec);

// The argv that runs `daemon_command` on `host` through the agent. For local, the daemon command itself.
Result<std::vector<std::string>> agent_command(const AgentSettings& settings, const std::string& host,
                                               const std::vector<std::string>& daemon_command);

// Quotes a word for a POSIX shell (remote commands go through the remote user's shell).
std::string shell_quote(std::string_view word);
// The words, each quoted so, joined by spaces: one command line for a shell (or for the user to read).
std::string shell_join(const std::vector<std::string>& words);

// Splits a command into words the way a shell would for plain words, 'single' and "double" quotes and
// backslashes (no expansions).
Result<std::vector<std::string>> split_words(std::string_view command);

// Simulated node i binds 127.1.X.Y: a distinct loopback address per node, without touching 127.0.0.1.
std::string simulated_node_address(long node_index);
// Simulated nodes get distinct 127.1.x.y addresses: 254 per /24, 256 of them.
constexpr long max_simulated_nodes = 254 * 256;
// Simulated node names: sim0000, sim0001, ...
std::string simulated_node_name(long node_index);

// Where a node's per-job temp dir goes: the configured dir, else $TMPDIR, else default_temp_base(). `source` says
// which, for a message about it.
struct TempBase {
    std::string path;
    std::string source;   // "[job] tmpdir", "TMPDIR" or "the default"
};
TempBase node_temp_base(const std::string& configured_base);
// What is wrong with a base a node temp dir could not be made in, and where it came from ("; /x ([job] tmpdir)
// does not exist"), so that the user fixes the setting that named it; "" if nothing is.
std::string temp_base_problem(const TempBase& base);

// How the names of a node's dirs for a job start: canopy-JOB-NODE. Each dir adds -XXXXXX, random
// (util/private_dir.hpp), so that another user who sees the job's id cannot make the dir first.
std::string node_dir_prefix(const std::string& job_id, const std::string& node);

// /dev/shm when it is a tmpfs this user may write, else /tmp. The dir holds sockets, PMIx's session files and
// shared-memory backing files, none of which should outlive the node's boot, and on a tmpfs creating and removing
// it costs a tenth of what it costs on a disk file system's journal (docs/performance.md).
std::string default_temp_base();

} // namespace canopy
