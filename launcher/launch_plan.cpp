// Turns the command line, the config and the environment into the plan the root sends down the tree.
#include "launch_plan.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include <fmt/format.h>

#include "affinity/binding_request.hpp"
#include "build_config.hpp"
#include "fabric/endpoint.hpp"
#include "hosts/host_names.hpp"
#include "hosts/hostfile.hpp"
#include "hosts/hostlist.hpp"
#include "hosts/this_host.hpp"
#include "proc/rank_env.hpp"
#include "report_files.hpp"
#include "synthetic/synthetic_exchange.hpp"
#include "tree/agent.hpp"
#include "util/read_file.hpp"
#include "wire/auth.hpp"

namespace canopy {
namespace {

struct ResolvedHosts {
    std::vector<HostEntry> hosts;
    std::string source;
};

Result<ResolvedHosts> resolve_hosts(const Options& options, const std::vector<std::string>& environment)
{
    if (options.sim_nodes > 0) {
        std::vector<HostEntry> hosts;
        for (long i = 0; i < options.sim_nodes; ++i)
            hosts.push_back({simulated_node_name(i), 0});
        return ResolvedHosts{std::move(hosts), "--sim-nodes"};
    }
    if (options.standalone)
        return ResolvedHosts{{{this_host_name(), 0}}, "this machine"};
    if (options.hosts) {
        auto hosts = parse_hosts_option(*options.hosts);
        if (!hosts)
            return hosts.error();
        return ResolvedHosts{std::move(*hosts), "--hosts"};
    }
    if (options.hostfile) {
        auto hosts = read_hostfile(*options.hostfile);
        if (!hosts)
            return hosts.error();
        return ResolvedHosts{std::move(*hosts), "--hostfile " + *options.hostfile};
    }
    if (auto pbs = environment_value(environment, "PBS_NODEFILE"); !pbs.empty()) {
        auto hosts = read_hostfile(pbs);
        if (!hosts)
            return make_error("PBS_NODEFILE: {}", hosts.error().message);
        return ResolvedHosts{std::move(*hosts), "PBS_NODEFILE"};
    }
    if (auto slurm = environment_value(environment, "SLURM_JOB_NODELIST"); !slurm.empty()) {
        auto hosts = hosts_from_slurm(slurm, environment_value(environment, "SLURM_TASKS_PER_NODE"));
        if (!hosts)
            return make_error("SLURM_JOB_NODELIST: {}", hosts.error().message);
        return ResolvedHosts{std::move(*hosts), "SLURM_JOB_NODELIST"};
    }
    return ResolvedHosts{{{this_host_name(), 0}}, "this machine"};
}

// --exclude: a file (an existing path, or a name with a '/'; empty is fine, as --bad-nodes writes it when no node
// was bad) or a hostlist. Hosts it names that the allocation lacks are no error: an earlier job's list names nodes
// of its own allocation.
Status exclude_hosts(const std::string& exclude, ResolvedHosts& resolved)
{
    std::error_code error;
    bool is_file = exclude.find('/') != std::string::npos || std::filesystem::is_regular_file(exclude, error);
    Result<std::vector<HostEntry>> excluded = std::vector<HostEntry>{};
    if (is_file) {
        auto text = read_file(exclude, std::size_t{64} << 20, "--exclude");
        if (!text)
            return text.error();
        excluded = parse_hostfile(*text, exclude);
    } else {
        excluded = parse_hosts_option(exclude);
    }
    if (!excluded)
        return make_error("--exclude: {}", excluded.error().message);
    std::set<std::string> names;
    for (const auto& host : *excluded)
        names.insert(host.name);
    std::size_t before = resolved.hosts.size();
    std::erase_if(resolved.hosts, [&](const HostEntry& host) { return names.contains(host.name); });
    if (resolved.hosts.empty())
        return make_error("--exclude {} leaves none of the {} host{} (from {})", exclude, before, before == 1 ? "" : "s",
                          resolved.source);
    resolved.source += fmt::format(", {} excluded", before - resolved.hosts.size());
    return {};
}

// --env/-genv/-x settings as NAME=VALUE, each over `env`; -x NAME copies NAME from the launcher's environment.
Status apply_assignments(const std::vector<EnvAssignment>& assignments, const std::vector<std::string>& environment,
                         std::vector<std::string>& env)
{
    for (const auto& assignment : assignments) {
        std::string value;
        if (assignment.value) {
            value = *assignment.value;
        } else {
            bool present = std::any_of(environment.begin(), environment.end(), [&](const std::string& entry) {
                return entry.starts_with(assignment.name + "=");
            });
            if (!present)
                return make_error("-x {}: {} is not set in the environment", assignment.name, assignment.name);
            value = environment_value(environment, assignment.name);
        }
        set_environment_value(env, assignment.name, value);
    }
    return {};
}

// The ranks' environment before each program's own settings: what --envall/--envnone/--envlist pass, and -genv.
Result<std::vector<std::string>> job_environment(const Options& options, const std::vector<std::string>& environment)
{
    std::vector<std::string> env;
    switch (options.env_mode) {
    case EnvMode::all:
        env = environment;
        break;
    case EnvMode::none:
        break;
    case EnvMode::list:
        for (const auto& name : options.env_list)
            if (auto value = environment_value(environment, name); !value.empty())
                env.push_back(name + "=" + value);
        break;
    }
    if (Status applied = apply_assignments(options.env, environment, env); !applied)
        return applied.error();
    return env;
}

// "./a x : ./b": the programs as the user gave them, for reports.
std::string command_line(const Options& options)
{
    std::string line;
    for (const auto& app : options.apps)
        line += (line.empty() ? "" : " : ") + shell_join(app.command);
    return line;
}

// Whether the launcher can listen on `address` (an IP address: the config checked that). An address this host
// does not have is the config's error, found before anything starts, not a failure of the job.
Status can_listen_on(const std::string& address)
{
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(address.c_str(), "0", &hints, &found) != 0 || !found)
        return make_error("[tree] bind_address {} is not an IP address", address);
    int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool bound = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0;
    int error = errno;
    if (fd >= 0)
        ::close(fd);
    ::freeaddrinfo(found);
    if (!bound)
        return make_error("cannot listen on [tree] bind_address {}: {}; give an address of this host, or \"\"",
                          address, std::strerror(error));
    return {};
}

// The address children can reach us at: the configured one, loopback for local launches, else our hostname's.
Result<std::string> listen_address(const Config& config, bool local)
{
    if (!config.bind_address.empty()) {
        if (auto usable = can_listen_on(config.bind_address); !usable)
            return usable.error();
        return config.bind_address;
    }
    if (local)
        return std::string("127.0.0.1");
    std::string host = this_host_name();
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found)
        return make_error("cannot find an address for this host ({}); set [tree] bind_address in the config",
                          host);
    char text[NI_MAXHOST];
    int status = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    ::freeaddrinfo(found);
    if (status != 0)
        return make_error("cannot find an address for this host ({})", host);
    return std::string(text);
}

std::string new_job_id()
{
    auto nonce = auth::generate_nonce();
    return auth::to_hex(std::span(nonce.data(), 4));
}

// The job's binding: the command line's, else the config's [bind] (a site profile's); a count per rank alone
// means --gpu-bind closest, as Hydra's -gpus-per-proc and Slurm's --gpus-per-task do.
Result<wire::BindingSpec> binding_spec(const Options& options, const Config& config)
{
    wire::BindingSpec spec;
    spec.cpu_bind = options.cpu_bind.value_or(config.cpu_bind);
    spec.depth = static_cast<std::uint64_t>(options.depth);
    bool counted = options.gpus_per_rank || options.gpu_tiles_per_rank;
    spec.gpu_bind = options.gpu_bind.value_or(counted ? "closest" : config.gpu_bind);
    spec.gpus_optional = !options.gpu_bind && !counted;
    spec.gpus_per_rank = static_cast<std::uint64_t>(options.gpus_per_rank.value_or(0));
    spec.gpu_tiles_per_rank = static_cast<std::uint64_t>(options.gpu_tiles_per_rank.value_or(0));
    spec.mem_bind = options.mem_bind.value_or(config.mem_bind);
    spec.reserved_cpus = config.reserved_cpus;
    spec.cpus_shared_ok = options.oversubscribe;
    spec.report_bindings = options.report_bindings;
    if (options.topology_file) {
        std::error_code error;
        auto absolute = std::filesystem::absolute(*options.topology_file, error);
        spec.topology_file = error ? *options.topology_file : absolute.string();
        if (::access(spec.topology_file.c_str(), R_OK) != 0)
            return make_error("--topology {}: {}", *options.topology_file, std::strerror(errno));
    }
    if (auto request = binding_request(spec); !request)
        return request.error();
    return spec;
}

// Plans each distinct number of ranks a node gets once, on the first node that has it.
Status check_bindings(const wire::BindingSpec& spec, const Placement& placement)
{
    std::set<long> planned;
    for (const auto& node : placement.nodes)
        if (planned.insert(node.count).second)
            if (auto bindings = plan_node_bindings(spec, node.count, BindingSite{node.host, node.first_rank});
                !bindings)
                return bindings.error();
    return {};
}

} // namespace

Result<RootPlan> make_root_plan(const Options& options, const Config& config,
                                const std::vector<std::string>& environment, const std::string& daemon_path)
{
    auto resolved = resolve_hosts(options, environment);
    if (!resolved)
        return resolved.error();
    if (options.exclude)
        if (Status left_out = exclude_hosts(*options.exclude, *resolved); !left_out)
            return left_out.error();
    if (options.nnodes && options.sim_nodes == 0) {
        auto wanted = static_cast<std::size_t>(*options.nnodes);
        if (resolved->hosts.size() < wanted)
            return make_error("--nnodes {}: only {} host{} (from {})", wanted, resolved->hosts.size(),
                              resolved->hosts.size() == 1 ? "" : "s", resolved->source);
        resolved->hosts.resize(wanted);
    }
    auto placement = place_ranks({options.total_ranks(), options.ppn, resolved->hosts});
    if (!placement)
        return placement.error();
    auto binding = binding_spec(options, config);
    if (!binding)
        return binding.error();
    auto env = job_environment(options, environment);
    if (!env)
        return env.error();

    bool simulated = options.sim_nodes > 0;
    if (simulated && options.agent)
        return make_error("--sim-nodes starts its daemons directly, so a launch agent does not apply; to try an "
                          "agent, name hosts with --hosts and keep --agent");
    std::string agent = options.agent.value_or(config.agent);
    // `--hosts $(hostname)`, or an allocation of this node alone: started directly, as with no hosts at all.
    bool on_this_machine = resolved->source == "this machine" ||
                           ((agent == "ssh" || agent == "rsh") &&
                            std::all_of(placement->nodes.begin(), placement->nodes.end(),
                                        [](const NodeRanks& node) { return names_this_host(node.host); }));
    if (simulated || on_this_machine)
        agent = "local";
    if (auto kind = parse_agent(agent); !kind)
        return kind.error();
    auto address = listen_address(config, simulated || on_this_machine || agent == "local");
    if (!address)
        return address.error();

    RootPlan root;
    root.placement = std::move(*placement);
    root.listen_address = *address;
    root.host_source = resolved->source;
    root.timeout_seconds = options.timeout_seconds;
    root.label = options.label;
    root.timing = options.timing;
    root.timing_file = options.timing_file;
    root.trace_file = options.trace_file;
    // Found out now, not after the whole job has run.
    root.bad_nodes_file = options.bad_nodes_file;
    for (const auto& [option, file] : {std::pair{"--timing", options.timing_file}, {"--trace", options.trace_file},
                                       {"--bad-nodes", options.bad_nodes_file}})
        if (file)
            if (auto writable = check_report_file(*file); !writable)
                return make_error("{}: {}", option, writable.error().message);
    root.command_line = command_line(options);

    wire::LaunchPlan& plan = root.plan;
    plan.job_id = new_job_id();
    std::vector<std::string> hosts;
    for (const auto& node : root.placement.nodes)
        hosts.push_back(node.host);
    plan.hosts = HostNames(hosts);
    plan.job.ranks_per_node = root.placement.blocks().counts();
    plan.simulated = simulated;
    plan.agent = agent;
    plan.ssh_command = config.ssh_command;
    plan.ssh_args = config.ssh_args;
    plan.rsh_command = config.rsh_command;
    plan.daemon_path = config.daemon_path.empty() ? daemon_path : config.daemon_path;
    plan.bind_address = simulated ? std::string() : config.bind_address;
    plan.fanout = static_cast<std::uint64_t>(options.fanout.value_or(config.fanout));
    plan.window = static_cast<std::uint64_t>(options.window.value_or(config.window));
    plan.connect_timeout = config.connect_timeout;
    plan.kill_grace = config.kill_grace;
    plan.heartbeat_timeout = config.heartbeat_timeout;
    plan.tmpdir = config.tmpdir;
    plan.verbosity = static_cast<std::uint32_t>(options.verbosity);

    wire::JobSpec& job = plan.job;
    job.env = std::move(*env);
    auto interfaces = options.pmi.value_or(config.pmi);
    job.simple_pmi = serves_simple_pmi(interfaces);
    job.pmix = options.pmix.value_or(config.pmix);
    if (!serves_pmix(interfaces)) {
        if (options.pmix && *options.pmix != PmixMode::off)
            return make_error("--pmix {} needs PMIx served, but --pmi leaves it out; use --pmi all or --pmi pmix",
                              *options.pmix == PmixMode::eager ? "eager" : "on");
        job.pmix = PmixMode::off;
    }
    job.trace = options.trace_file.has_value();
    job.timing_top = static_cast<std::uint64_t>(options.timing_top);
    job.output_marks = options.output_marks;
    std::error_code error;
    std::string current_dir = std::filesystem::current_path(error).string();
    for (const auto& app : options.apps) {
        wire::AppSpec& spec = job.apps.emplace_back();
        spec.argv = app.command;
        if (Status applied = apply_assignments(app.env, environment, spec.env); !applied)
            return applied.error();
        spec.ranks = static_cast<std::uint64_t>(app.ranks.value_or(root.placement.world_size));
        spec.wdir = app.wdir.value_or(current_dir);
        // Nodes on this machine share its file system: a missing directory is known before anything starts.
        // Elsewhere each node finds out, and the job ends with 126 naming the node.
        if (app.wdir && (simulated || on_this_machine) && !std::filesystem::is_directory(spec.wdir, error))
            return make_error("--wdir {}: {}", spec.wdir,
                              std::filesystem::exists(spec.wdir, error) ? "not a directory" : "no such directory");
    }
    job.binding = std::move(*binding);
    job.line_buffer = options.line_buffer;
    // Nodes on this machine, or nodes the user described with --topology: a binding they cannot honour is known
    // before anything starts. Elsewhere each node finds out from its own topology, and the job ends with 126
    // naming the node.
    if (simulated || on_this_machine || !job.binding.topology_file.empty())
        if (Status honoured = check_bindings(job.binding, root.placement); !honoured)
            return honoured.error();
    job.health_check = config.health;
    if (options.health_check) {
        job.health_check.enabled = true;
        if (!options.health_check->empty())
            job.health_check.command = *options.health_check;
    }
    if (options.bad_nodes_file && !job.health_check.enabled)
        return make_error("--bad-nodes {} lists the nodes the health check finds bad: give --health-check too (or set "
                          "[health] enabled = true)",
                          *options.bad_nodes_file);
    job.spawn_slots = static_cast<std::uint64_t>(options.spawn_slots);
    job.max_restarts = static_cast<std::uint64_t>(options.max_restarts);
    if (job.max_restarts > 0 && job.spawn_slots > 0)
        return make_error("--max-restarts cannot be combined with --spawn-slots yet: a restart does not know what "
                          "to do with the namespaces ranks spawned");
    if (job.max_restarts > 0 && options.synthetic_ranks)
        return make_error("--max-restarts restarts real ranks; --synthetic-ranks has none");
    job.rank_store_limit = options.rank_store_limit.value_or(config.rank_store_limit);
    if (options.synthetic_ranks) {
        // The synthetic ranks stand in for the PMIx server on the PMIx paths (docs/scale.md): no node starts one.
        job.synthetic_ranks = *options.synthetic_ranks;
        job.pmix = PmixMode::off;
        if (synthetic::parse_spec(job.synthetic_ranks)->path == synthetic::Path::pmi && !job.simple_pmi)
            return make_error("--synthetic-ranks on the PMI path needs simple PMI served; leave out --pmi or give "
                              "--pmi all or simple");
    }

    // An explicit --env MASTER_ADDR/PORT wins (rank 0's program's, else -genv's); otherwise rank 0's node and a
    // port derived from the job id, so two jobs sharing a node do not collide on torch's default 29500.
    auto explicitly_set = [&](const std::string& name) {
        for (auto [given, settings] : {std::pair{&options.apps.front().env, &job.apps.front().env},
                                       std::pair{&options.env, &job.env}})
            if (std::any_of(given->begin(), given->end(), [&](const EnvAssignment& a) { return a.name == name; }))
                return environment_value(*settings, name);
        return std::string();
    };
    std::string explicit_addr = explicitly_set("MASTER_ADDR"), explicit_port = explicitly_set("MASTER_PORT");
    job.master_addr = !explicit_addr.empty() ? explicit_addr
                      : simulated            ? simulated_node_address(0)
                                             : plan.hosts[0];
    job.master_port = 20000 + static_cast<std::uint32_t>(std::hash<std::string>{}(plan.job_id) % 20000);
    if (!explicit_port.empty()) {
        try {
            job.master_port = static_cast<std::uint32_t>(std::stoul(explicit_port));
        } catch (const std::exception&) {
            return make_error("MASTER_PORT must be a port number, got '{}'", explicit_port);
        }
    }

    StageSettings stage;
    stage.prefixes = options.stage_prefixes.empty() ? config.stage_prefixes : options.stage_prefixes;
    stage.manifest = options.stage_manifest.value_or(config.stage_manifest);
    job.fabric = options.fabric.value_or(config.fabric);
    if (job.fabric != "off" && job.fabric != "auto")
        // The launcher sends to its children over it, so it must have it; found out before anything starts.
        if (auto available = fabric::provider_available(fabric::parse_provider_choice(job.fabric, false)); !available)
            return make_error("--fabric {}: {}", job.fabric, available.error().message);
    if (!stage.prefixes.empty() || !stage.manifest.empty()) {
        job.stage = true;
        job.stage_cache_base = config.stage_cache_dir;
        if (!config.stage_interposer.empty()) {
            job.stage_interposer = config.stage_interposer;
        } else {
            auto interposer = find_interposer(daemon_path);
            if (!interposer)
                return interposer.error();
            job.stage_interposer = *interposer;
        }
        root.stage = std::move(stage);
    }
    return root;
}

namespace {

// The launcher's own path with links resolved, so the build tree or install next to it can be found.
std::filesystem::path resolved_path(const std::string& path)
{
    std::error_code error;
    auto resolved = std::filesystem::canonical(path, error);
    return error ? std::filesystem::path(path) : resolved;
}

} // namespace

Result<std::string> find_interposer(const std::string& launcher_path)
{
    namespace fs = std::filesystem;
    fs::path self = resolved_path(launcher_path);
    const fs::path name = "libcanopy_interpose.so";
    // The build tree first, so a build never picks up an older installed copy.
    for (const auto& candidate : {self.parent_path().parent_path() / "lib" / "interpose" / name,
                                  fs::path(CANOPY_LIBDIR) / "canopy" / name})
        if (::access(candidate.c_str(), R_OK) == 0)
            return candidate.string();
    return make_error("cannot find {} (looked in {}/canopy and the build tree); set [stage] interposer in the config",
                      name.string(), CANOPY_LIBDIR);
}

Result<std::string> find_local_daemon(const std::string& launcher_path)
{
    std::filesystem::path self = resolved_path(launcher_path);
    for (const auto& candidate : {self.parent_path() / "canopyd", self.parent_path().parent_path() / "daemon" / "canopyd"})
        if (::access(candidate.c_str(), X_OK) == 0)
            return candidate.string();
    return make_error("cannot find canopyd next to {}; set [launch] daemon_path in the config", self.string());
}

} // namespace canopy
