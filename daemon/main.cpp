// canopyd entry point: read the job secret from stdin, join the tree, run until the job is done.
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "build_config.hpp"
#include "daemon.hpp"
#include "pmix/pmix_module.hpp"
#include "proc/process.hpp"
#include "timing/clock.hpp"
#include "util/io_loop.hpp"
#include "util/log.hpp"

namespace {

constexpr const char* usage =
    "usage: canopyd --parent HOST:PORT --position P [--node NAME] [--bind ADDRESS] [--same-clock]\n"
    "               [--join-timeout SECONDS] [-v]\n"
    "canopyd is started by canopy (or by another canopyd) on each node of a job; it is not run by hand.\n"
    "It reads the job secret from its standard input.\n";

// The secret arrives on stdin so that it never shows in argv or the environment of a process listing.
canopy::Result<canopy::auth::Key> read_secret()
{
    std::string line;
    pollfd input{STDIN_FILENO, POLLIN, 0};
    while (line.find('\n') == std::string::npos) {
        if (::poll(&input, 1, 30000) <= 0)
            return canopy::make_error("no job secret on standard input within 30 s");
        char buffer[128];
        ssize_t got = ::read(STDIN_FILENO, buffer, sizeof buffer);
        if (got <= 0)
            return canopy::make_error("standard input closed before the job secret arrived");
        line.append(buffer, static_cast<std::size_t>(got));
        if (line.size() > 256)
            return canopy::make_error("standard input does not start with a job secret");
    }
    return canopy::auth::key_from_hex(line.substr(0, line.find('\n')));
}

canopy::Result<canopy::DaemonArgs> parse_args(int argc, char** argv)
{
    canopy::DaemonArgs args;
    std::string parent;
    for (int i = 1; i < argc; ++i) {
        std::string_view option = argv[i];
        auto value = [&]() -> std::string {
            return i + 1 < argc ? argv[++i] : "";
        };
        if (option == "--parent")
            parent = value();
        else if (option == "--position") {
            std::string text = value();
            auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), args.position);
            if (error != std::errc() || end != text.data() + text.size() || args.position < 1)
                return canopy::make_error("--position needs a positive integer, got '{}'", text);
        } else if (option == "--node")
            args.node_name = value();
        else if (option == "--bind")
            args.bind_address = value();
        else if (option == "--join-timeout") {
            std::string text = value();
            char* end = nullptr;
            args.join_timeout = std::strtod(text.c_str(), &end);
            // As [tree] connect_timeout allows: above 0, at most a day.
            if (text.empty() || *end != '\0' || !(args.join_timeout > 0 && args.join_timeout <= 86400))
                return canopy::make_error("--join-timeout needs seconds above 0, at most 86400, got '{}'", text);
        } else if (option == "--same-clock")
            args.same_clock = true;
        else if (option == "-v")
            ++args.verbosity;
        else if (option == "--version") {
            std::fputs("canopyd " CANOPY_VERSION "\n", stdout);
            std::exit(0);
        } else if (option == "-h" || option == "--help") {
            std::fputs(usage, stdout);
            std::exit(0);
        } else
            return canopy::make_error("unknown option '{}'", option);
    }
    auto colon = parent.rfind(':');
    if (parent.empty() || colon == std::string::npos || args.position < 1)
        return canopy::make_error("--parent HOST:PORT and --position are required");
    args.parent_host = parent.substr(0, colon);
    if (args.parent_host.size() > 2 && args.parent_host.front() == '[')
        args.parent_host = args.parent_host.substr(1, args.parent_host.size() - 2);
    std::string port = parent.substr(colon + 1);
    auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), args.parent_port);
    if (error != std::errc() || end != port.data() + port.size() || args.parent_port == 0)
        return canopy::make_error("--parent needs HOST:PORT, got '{}'", parent);
    return args;
}

} // namespace

int main(int argc, char** argv)
{
    // Before anything opens a descriptor: a socket that took number 1 or 2 would get our log lines.
    canopy::occupy_standard_descriptors(true);
    std::int64_t started_ns = canopy::timing::now_ns();
    ::signal(SIGPIPE, SIG_IGN);   // a vanished peer is an error code on write, not a crash
    ::signal(SIGINT, SIG_IGN);    // the launcher decides what an interrupt means for the job
    // Orphans below us (a killed child daemon's guard, a rank's daemonised helpers) come back to us to be reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Strangers' connections and a big node's ranks draw on the same descriptors; the ranks keep the usual limit.
    canopy::raise_descriptor_limit();
    canopy::keep_freed_memory_for_reuse();

    auto args = parse_args(argc, argv);
    if (!args) {
        std::fprintf(stderr, "canopyd: %s\n%s", args.error().message.c_str(), usage);
        return 2;
    }
    args->started_ns = started_ns;
    std::string prefix = fmt::format("canopyd[{}]", args->node_name.empty() ? "?" : args->node_name);
    canopy::init_logging(prefix, args->verbosity);
    auto key = read_secret();
    if (!key) {
        std::fprintf(stderr, "%s: %s\n", prefix.c_str(), key.error().message.c_str());
        return 2;
    }

    // Started first: the daemon tells it each path before creating it.
    std::optional<canopy::NodeGuard> guard;
    if (auto started = canopy::NodeGuard::start(canopy::find_guard_program(canopy::own_executable())); started)
        guard = std::move(*started);
    else
        std::fprintf(stderr, "%s: %s; ranks may outlive a crashed daemon\n", prefix.c_str(),
                     started.error().message.c_str());

    boost::asio::io_context io(1);
    int exit_code;
    {
        canopy::ProcessReaper reaper(io);
        canopy::Daemon daemon(io, reaper, std::move(*args), *key, std::move(guard));
        daemon.start();
        canopy::run_io_loop(io, [&daemon](const std::string& why) { daemon.fail("canopyd " + why); });
        exit_code = daemon.exit_code();
    }
    if (canopy::loaded_pmix_server_abandoned()) {
        // PMIx's progress thread still runs after an abnormal end; static destructors under it can crash.
        spdlog::shutdown();
        std::fflush(nullptr);
        std::_Exit(exit_code);
    }
    return exit_code;
}
