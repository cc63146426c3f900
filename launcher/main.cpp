// canopy entry point: parse the command line, plan the job, run it through the tree, report where time went.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "build_config.hpp"
#include "config/config.hpp"
#include "dry_run.hpp"
#include "launch_plan.hpp"
#include "options.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "report_command.hpp"
#include "report_files.hpp"
#include "root.hpp"
#include "trace_file.hpp"
#include "stage_record.hpp"
#include "timing/clock.hpp"
#include "timing/html_report.hpp"
#include "util/log.hpp"

namespace {

// An interrupt after the job ended well, until the process is gone, still gives 128+N (README: exit codes).
// Root::run leaves SIGINT, SIGTERM and SIGHUP blocked after its last look at them; one arriving while the Root is
// destroyed or the process exits would stay pending and be lost. After the Root, a handler notes it, and the exit
// turns it into the status; once the exit is under way, the handler exits at once.
volatile sig_atomic_t late_interrupt = 0;
volatile sig_atomic_t exiting = 0;

extern "C" void note_late_interrupt(int signo)
{
    if (exiting)
        _exit(128 + signo);
    late_interrupt = signo;
}

extern "C" void exit_as_interrupted()
{
    exiting = 1;
    if (late_interrupt) {
        std::fflush(nullptr);
        _exit(128 + late_interrupt);
    }
}

void count_late_interrupts()
{
    std::atexit(exit_as_interrupted);
    struct sigaction action {};
    action.sa_handler = note_late_interrupt;
    sigemptyset(&action.sa_mask);
    sigset_t interrupts;
    sigemptyset(&interrupts);
    for (int signo : {SIGINT, SIGTERM, SIGHUP}) {
        ::sigaction(signo, &action, nullptr);
        sigaddset(&interrupts, signo);
    }
    ::pthread_sigmask(SIG_UNBLOCK, &interrupts, nullptr);
}

int usage_error(const std::string& message)
{
    fmt::print(stderr, "canopy: {}\n", message);
    return canopy::exit_usage;
}

} // namespace

int main(int argc, char** argv)
{
    // Before anything opens a descriptor: started without a standard stream, the job's output would go to whatever
    // took its number.
    canopy::occupy_standard_descriptors(false);
    std::int64_t started_ns = canopy::timing::now_ns();
    ::signal(SIGPIPE, SIG_IGN);   // a daemon that vanished is an error code on write, not a crash
    // Orphans below us (a killed child daemon's guard, a rank's daemonised helpers) come back to us to be reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Strangers' connections and a big node's ranks draw on the same descriptors; the ranks keep the usual limit.
    canopy::raise_descriptor_limit();
    canopy::keep_freed_memory_for_reuse();

    if (argc > 1 && std::string_view(argv[1]) == "report")
        return canopy::run_report_command(std::vector<std::string>(argv + 2, argv + argc));
    if (argc > 1 && std::string_view(argv[1]) == "stage")
        return canopy::run_stage_command(std::vector<std::string>(argv + 2, argv + argc), "/proc/self/exe");

    auto options = canopy::parse_options(std::vector<std::string>(argv + 1, argv + argc));
    if (!options)
        return usage_error(options.error().message);
    if (options->help) {
        fmt::print("{}", canopy::help_text());
        return 0;
    }
    if (options->version) {
        fmt::print("canopy {}\n", CANOPY_VERSION);
        return 0;
    }
    canopy::init_logging("canopy", options->verbosity);

    auto config = canopy::load_config({CANOPY_SYSCONFDIR, CANOPY_SOURCE_CONFIG_DIR}, options->config_file,
                                      options->profile);
    if (!config)
        return usage_error(config.error().message);
    auto daemon = canopy::find_local_daemon("/proc/self/exe");
    if (!daemon)
        return usage_error(daemon.error().message);
    auto plan = canopy::make_root_plan(*options, *config, canopy::own_environment(), *daemon);
    if (!plan)
        return usage_error(plan.error().message);
    std::int64_t hosts_resolved_ns = canopy::timing::now_ns();
    if (options->dry_run) {
        std::fputs(canopy::describe_dry_run(*plan).c_str(), stdout);
        return 0;
    }

    bool print_report = plan->timing;
    auto timing_file = plan->timing_file;
    auto trace_file = plan->trace_file;
    boost::asio::io_context io(1);
    canopy::ProcessReaper reaper(io);
    auto root = std::make_unique<canopy::Root>(io, reaper, std::move(*plan), started_ns, hosts_resolved_ns);
    int exit_code = root->run();

    // A report the user asked for and did not get fails a job that otherwise succeeded.
    auto write_report = [&exit_code](const char* option, const std::string& file, const std::string& content) {
        if (auto written = canopy::write_report_file(file, content); !written) {
            fmt::print(stderr, "canopy: {}: {}\n", option, written.error().message);
            if (exit_code == 0)
                exit_code = 1;
        }
    };
    if (trace_file)
        write_report("--trace", *trace_file,
                     canopy::chrome_trace(root->job_timing(), root->trace_events(), root->hosts()).dump() + "\n");
    if (print_report || timing_file) {
        auto timing = root->job_timing();
        if (print_report)
            fmt::print(stderr, "{}", canopy::timing::format_report(timing));
        if (timing_file)
            write_report("--timing", *timing_file,
                         canopy::is_html_file(*timing_file)
                             ? canopy::timing::format_html_report(timing, {})
                             : canopy::timing::to_json(timing).dump(2, ' ', false,
                                                                    nlohmann::json::error_handler_t::replace) +
                                   "\n");
    }
    // Its signal set puts the default actions back as it goes; with the interrupts still blocked, one that comes
    // meanwhile waits for the handler below.
    root.reset();
    if (exit_code == 0)   // a job that failed keeps its code
        count_late_interrupts();
    return exit_code;
}
