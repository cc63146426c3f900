// `canopy stage record`: runs a command once under the interposer and writes the manifest later jobs stage.
#include "stage_record.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "launch_plan.hpp"
#include "options.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "stage/index.hpp"

namespace canopy {
namespace {


constexpr const char* record_usage =
    "usage: canopy stage record --stage DIR[,DIR...] [-o MANIFEST] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM once on this machine with canopy's interposer, which notes every path it looks up under the\n"
    "prefixes and which files it reads. Writes a manifest (default: canopy-stage.manifest) that later jobs pass\n"
    "to --stage-manifest, so those files' contents are staged to every node as well as their metadata.\n"
    "Record with the same environment the job will have (same venv, same PYTHONPATH).\n"
    "\n"
    "example: canopy stage record --stage /soft/venv -o torch.manifest -- python3 -c 'import torch'\n";

int usage_error(const std::string& message)
{
    fmt::print(stderr, "canopy stage: {} (see canopy stage record --help)\n", message);
    return exit_usage;
}

std::string join(const std::vector<std::string>& parts, char separator)
{
    std::string out;
    for (const auto& part : parts)
        out += (out.empty() ? "" : std::string(1, separator)) + part;
    return out;
}

// Runs the command with the recording environment; returns its wait status, or an error.
Result<int> run_recorded(const std::vector<std::string>& command, const std::vector<std::string>& extra_env)
{
    std::vector<std::string> env = environment_with(own_environment(), extra_env);
    std::vector<char*> argv, envp;
    for (const auto& arg : command)
        argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    for (const auto& kv : env)
        envp.push_back(const_cast<char*>(kv.c_str()));
    envp.push_back(nullptr);
    pid_t pid;
    int error = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
    if (error != 0)
        return make_error("cannot run {}: {}", command[0], std::strerror(error));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return make_error("lost track of {}: {}", command[0], std::strerror(errno));
    return status;
}

int record(const std::vector<std::string>& args, const std::string& launcher_path)
{
    std::vector<std::string> prefixes;
    std::string output = "canopy-stage.manifest";
    std::vector<std::string> command;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& arg = args[i];
        if (arg == "--") {
            command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
            break;
        }
        if (arg == "-h" || arg == "--help") {
            fmt::print("{}", record_usage);
            return 0;
        }
        bool takes_value = arg == "--stage" || arg == "-o" || arg == "--output";
        if (takes_value && i + 1 >= args.size())
            return usage_error(fmt::format("{} needs a value", arg));
        if (arg == "--stage") {
            auto dirs = parse_directory_list(args[++i], arg);
            if (!dirs)
                return usage_error(dirs.error().message);
            prefixes.insert(prefixes.end(), dirs->begin(), dirs->end());
        } else if (arg == "-o" || arg == "--output") {
            output = args[++i];
        } else if (arg.starts_with("-")) {
            return usage_error(fmt::format("unknown option '{}'", arg));
        } else {
            command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
            break;
        }
    }
    if (prefixes.empty())
        return usage_error("--stage DIR is required: which prefixes to record");
    if (command.empty())
        return usage_error("no program given");
    for (const auto& prefix : prefixes)
        if (!std::filesystem::is_directory(prefix))
            return usage_error(fmt::format("--stage {}: not a directory", prefix));

    auto interposer = find_interposer(launcher_path);
    if (!interposer) {
        fmt::print(stderr, "canopy stage: {}\n", interposer.error().message);
        return exit_usage;
    }
    std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    std::string scratch = base + "/canopy-record-XXXXXX";
    if (!::mkdtemp(scratch.data())) {
        fmt::print(stderr, "canopy stage: cannot create a temp dir under {}: {}\n", base, std::strerror(errno));
        return 1;
    }
    std::string records = scratch + "/lookups";
    auto status = run_recorded(command, {"LD_PRELOAD=" + *interposer, "LD_AUDIT=" + *interposer,
                                         "CANOPY_STAGE_RECORD=" + records,
                                         "CANOPY_STAGE_PREFIXES=" + join(prefixes, ':')});
    int code = 0;
    Status written;
    if (!status) {
        fmt::print(stderr, "canopy stage: {}\n", status.error().message);
        code = 127;
    } else {
        code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
        if (code != 0)
            fmt::print(stderr, "canopy stage: {} {}; the manifest holds what it looked up until then\n", command[0],
                       describe_wait_status(*status));
        auto index = stage::index_from_records({records}, stage::BuildOptions{prefixes, true});
        if (!index) {
            written = index.error();
        } else if (written = index->save(output); written) {
            fmt::print(stderr, "canopy stage: recorded {} paths under {}: {} files, {:.1f} MiB to stage; wrote {}\n",
                       index->size(), join(prefixes, ','), index->content_files().size(),
                       static_cast<double>(index->content_bytes()) / (1 << 20), output);
        }
    }
    std::error_code ignored;
    std::filesystem::remove_all(scratch, ignored);
    if (!written.ok()) {
        fmt::print(stderr, "canopy stage: {}\n", written.error().message);
        return 1;
    }
    return code;
}

} // namespace

int run_stage_command(const std::vector<std::string>& args, const std::string& launcher_path)
{
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
        fmt::print("{}", record_usage);
        return args.empty() ? exit_usage : 0;
    }
    if (args[0] != "record")
        return usage_error(fmt::format("unknown subcommand '{}'; the only one is 'record'", args[0]));
    return record(std::vector<std::string>(args.begin() + 1, args.end()), launcher_path);
}

} // namespace canopy
