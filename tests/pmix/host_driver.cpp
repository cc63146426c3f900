// Test driver: runs PmixHost for one node with an in-process stand-in for the tree and starts N local ranks.
//
// usage: host_driver [-n N] [--timeout SECONDS] [--nspace NAME] [--node NAME] [-v] -- PROGRAM [ARGS...]
// Prints "driver: ..." lines (rank exits, aborts, a summary) on stderr. Exit code: the PMIx_Abort status if a
// rank aborted, else the first failing rank's code (128+signal), 124 on timeout, 2 on usage errors, 0 otherwise.
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "pmix/pmix_host.hpp"
#include "util/log.hpp"

extern char** environ;

namespace {

using namespace canopy;
namespace asio = boost::asio;

struct Options {
    long ranks = 4;
    int timeout_s = 60;
    std::string nspace = "canopy.test";
    std::string node = "node0";
    int verbosity = 0;
    std::vector<std::string> command;
};

std::optional<Options> parse(int argc, char** argv)
{
    Options o;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "--") {
            ++i;
            break;
        }
        const char* v = nullptr;
        if (a == "-n" && (v = value()))
            o.ranks = std::strtol(v, nullptr, 10);
        else if (a == "--timeout" && (v = value()))
            o.timeout_s = std::atoi(v);
        else if (a == "--nspace" && (v = value()))
            o.nspace = v;
        else if (a == "--node" && (v = value()))
            o.node = v;
        else if (a == "-v")
            ++o.verbosity;
        else
            return std::nullopt;
    }
    for (; i < argc; ++i)
        o.command.emplace_back(argv[i]);
    if (o.command.empty() || o.ranks < 1)
        return std::nullopt;
    return o;
}

class Driver {
public:
    Driver(asio::io_context& io, Options options) : io_(io), options_(std::move(options)), signals_(io, SIGCHLD),
                                                    deadline_(io) {}

    int run()
    {
        char tmpl[] = "/tmp/canopy-pmix-driver-XXXXXX";
        if (!mkdtemp(tmpl)) {
            std::fprintf(stderr, "driver: cannot make a temp dir under /tmp: %s\n", std::strerror(errno));
            return 2;
        }
        tmpdir_ = tmpl;

        PmixJob job;
        job.nspace = options_.nspace;
        job.hosts = {options_.node};
        job.ranks_per_node = {static_cast<std::uint64_t>(options_.ranks)};
        job.node_index = 0;
        job.tmpdir = tmpdir_;

        auto host = PmixHost::start(io_, job, make_tree());
        if (!host) {
            std::fprintf(stderr, "driver: %s\n", host.error().message.c_str());
            cleanup_tmpdir();
            return 2;
        }
        host_ = std::move(*host);

        signals_.async_wait([this](auto ec, int) { on_sigchld(ec); });
        deadline_.expires_after(std::chrono::seconds(options_.timeout_s));
        deadline_.async_wait([this](auto ec) {
            if (ec)
                return;
            std::fprintf(stderr, "driver: timeout after %d s; killing %zu ranks\n", options_.timeout_s,
                         running_.size());
            timed_out_ = true;
            kill_all(SIGKILL);
        });

        if (!spawn_all())
            kill_all(SIGKILL);
        io_.run();
        cleanup_tmpdir();
        return exit_code();
    }

private:
    PmixTree make_tree()
    {
        PmixTree tree;
        // One node: every participating node's blob is ours. Answer "later", as a real tree would.
        tree.fence = [this](std::vector<long> participants, bool collect, Bytes local,
                            std::function<void(Status, Bytes)> done) {
            ++fences_;
            if (options_.verbosity > 0)
                std::fprintf(stderr, "driver: fence over %s, collect=%d, %zu bytes\n",
                             participants.empty() ? "all" : fmt::format("{}", fmt::join(participants, ",")).c_str(),
                             collect ? 1 : 0, local.size());
            asio::post(io_, [done = std::move(done), local = std::move(local)]() mutable {
                done(Status{}, std::move(local));
            });
        };
        tree.direct_modex = [this](long rank, std::function<void(Status, Bytes)> done) {
            ++direct_modex_;
            host_->serve_direct_modex(rank, std::move(done));
        };
        tree.publish = [this](std::vector<std::pair<std::string, Bytes>> data, std::function<void(Status)> done) {
            for (auto& [key, value] : data) {
                if (store_.count(key)) {
                    asio::post(io_, [done, key] { done(make_error("publish: key '{}' already published", key)); });
                    return;
                }
            }
            for (auto& [key, value] : data)
                store_[key] = std::move(value);
            asio::post(io_, [done] { done(Status{}); });
        };
        tree.lookup = [this](std::vector<std::string> keys,
                             std::function<void(Status, std::vector<std::pair<std::string, Bytes>>)> done) {
            std::vector<std::pair<std::string, Bytes>> found;
            for (auto& key : keys)
                if (auto it = store_.find(key); it != store_.end())
                    found.emplace_back(key, it->second);
            asio::post(io_, [done, found = std::move(found)]() mutable { done(Status{}, std::move(found)); });
        };
        tree.unpublish = [this](std::vector<std::string> keys, std::function<void(Status)> done) {
            for (auto& key : keys)
                store_.erase(key);
            asio::post(io_, [done] { done(Status{}); });
        };
        tree.abort = [this](long rank, int status, std::string message) {
            std::fprintf(stderr, "driver: ABORT from rank %ld, status %d: %s\n", rank, status, message.c_str());
            if (!abort_status_)
                abort_status_ = status == 0 ? 1 : status;
            // Tear the job down like the daemon will: TERM now, KILL after a grace period.
            kill_all(SIGTERM);
            auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(2));
            timer->async_wait([this, timer](auto ec) {
                if (!ec)
                    kill_all(SIGKILL);
            });
        };
        return tree;
    }

    bool spawn_all()
    {
        std::vector<std::vector<std::string>> envs;
        for (long rank = 0; rank < options_.ranks; ++rank) {
            auto extra = host_->prepare_rank(rank, getuid(), getgid());
            if (!extra) {
                std::fprintf(stderr, "driver: %s\n", extra.error().message.c_str());
                return false;
            }
            std::vector<std::string> env;
            for (char** e = environ; *e; ++e)
                env.emplace_back(*e);
            for (auto& kv : *extra)
                env.push_back(kv);
            if (options_.verbosity > 1 && rank == 0)
                for (auto& kv : *extra)
                    std::fprintf(stderr, "driver: rank 0 env %s\n", kv.c_str());
            envs.push_back(std::move(env));
        }
        std::vector<char*> argv;
        for (auto& a : options_.command)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        for (long rank = 0; rank < options_.ranks; ++rank) {
            std::vector<char*> envp;
            for (auto& kv : envs[static_cast<std::size_t>(rank)])
                envp.push_back(kv.data());
            envp.push_back(nullptr);
            pid_t pid = 0;
            int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
            if (rc != 0) {
                std::fprintf(stderr, "driver: cannot start %s for rank %ld: %s\n", argv[0], rank, std::strerror(rc));
                first_failure_ = first_failure_ ? first_failure_ : 127;
                return false;
            }
            running_[pid] = rank;
        }
        return true;
    }

    void on_sigchld(const boost::system::error_code& ec)
    {
        if (ec)
            return;
        int status = 0;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            auto it = running_.find(pid);
            if (it == running_.end())
                continue;
            long rank = it->second;
            running_.erase(it);
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            std::fprintf(stderr, "driver: rank %ld exited with code %d\n", rank, code);
            if (code != 0 && !first_failure_)
                first_failure_ = code;
            host_->rank_exited(rank, status);
        }
        if (running_.empty()) {
            finish();
            return;
        }
        signals_.async_wait([this](auto e, int) { on_sigchld(e); });
    }

    void finish()
    {
        deadline_.cancel();
        std::size_t pending = host_->pending_requests();
        host_.reset();   // deregister + PMIx_server_finalize on this (io) thread
        std::fprintf(stderr, "driver: all ranks done; fences=%d direct_modex=%d published=%zu pending_at_end=%zu\n",
                     fences_, direct_modex_, store_.size(), pending);
        signals_.cancel();
        io_.stop();
    }

    void kill_all(int sig)
    {
        for (auto& [pid, rank] : running_)
            ::kill(pid, sig);
    }

    int exit_code() const
    {
        if (timed_out_)
            return 124;
        if (abort_status_)
            return *abort_status_;
        return first_failure_;
    }

    void cleanup_tmpdir()
    {
        if (!tmpdir_.empty()) {
            std::string cmd = "rm -rf '" + tmpdir_ + "'";
            if (std::system(cmd.c_str()) != 0)
                std::fprintf(stderr, "driver: could not remove %s\n", tmpdir_.c_str());
        }
    }

    asio::io_context& io_;
    Options options_;
    asio::signal_set signals_;
    asio::steady_timer deadline_;
    std::unique_ptr<PmixHost> host_;
    std::string tmpdir_;
    std::map<pid_t, long> running_;
    std::map<std::string, Bytes> store_;
    std::optional<int> abort_status_;
    int first_failure_ = 0;
    bool timed_out_ = false;
    int fences_ = 0, direct_modex_ = 0;
};

} // namespace

int main(int argc, char** argv)
{
    auto options = parse(argc, argv);
    if (!options) {
        std::fprintf(stderr, "usage: host_driver [-n N] [--timeout S] [--nspace NAME] [--node NAME] [-v] -- PROGRAM "
                             "[ARGS...]\n");
        return 2;
    }
    canopy::init_logging(fmt::format("driver[{}]", options->node), options->verbosity);
    // Make PMIx hand single-node fences to the host too, so fence_nb is exercised (REFERENCE.md).
    ::setenv("PMIX_MCA_pmix_server_fence_localonly_opt", "0", 0);
    boost::asio::io_context io;
    Driver driver(io, std::move(*options));
    return driver.run();
}
