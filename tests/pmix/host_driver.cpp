// Test driver: runs PmixHost with a stand-in for the job's exchange and starts the local ranks, for one or two nodes.
//
// usage: host_driver [-n RANKS_PER_NODE] [--nodes 1|2] [--timeout SECONDS] [--nspace NAME] [-v]
//                    -- PROGRAM [ARGS...]
// Nodes are named node0, node1. With --nodes 2 the driver forks a second driver process for node1; the two talk
// over a socketpair: fences exchange blobs, direct modex requests go to the node hosting the rank, node0 keeps the
// publish/lookup store, and an abort on either side tears down both. Prints "driver: ..." lines on stderr.
// Exit code: the abort status if a rank aborted, else the first failing rank's code (128+signal), 124 on timeout,
// 2 on usage errors, 0 otherwise.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "pmix/pmix_host.hpp"
#include "util/log.hpp"

extern char** environ;

namespace {

using namespace canopy;
namespace asio = boost::asio;
using KeyValues = std::vector<std::pair<std::string, Bytes>>;

struct Options {
    long ranks = 4;   // per node
    long nodes = 1;
    int timeout_s = 60;
    std::string nspace = "canopy.test";
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
        else if (a == "--nodes" && (v = value()))
            o.nodes = std::strtol(v, nullptr, 10);
        else if (a == "--timeout" && (v = value()))
            o.timeout_s = std::atoi(v);
        else if (a == "--nspace" && (v = value()))
            o.nspace = v;
        else if (a == "-v")
            ++o.verbosity;
        else
            return std::nullopt;
    }
    for (; i < argc; ++i)
        o.command.emplace_back(argv[i]);
    if (o.command.empty() || o.ranks < 1 || o.nodes < 1 || o.nodes > 2)
        return std::nullopt;
    return o;
}

// ---- a tiny message codec for the two-node link (no I/O here) ----
enum class Msg : std::uint8_t { fence = 1, dmodex_req, dmodex_resp, publish_req, publish_resp, lookup_req,
                                lookup_resp, unpublish_req, unpublish_resp, abort };

struct Writer {
    Bytes out;
    void u8(std::uint8_t v) { out.push_back(v); }
    void u64(std::uint64_t v)
    {
        for (int i = 0; i < 8; ++i)
            out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    }
    void bytes(const Bytes& b)
    {
        u64(b.size());
        out.insert(out.end(), b.begin(), b.end());
    }
    void str(const std::string& s) { bytes(Bytes(s.begin(), s.end())); }
    void kvs(const KeyValues& kv)
    {
        u64(kv.size());
        for (auto& [k, v] : kv) {
            str(k);
            bytes(v);
        }
    }
};

struct Reader {
    const Bytes& in;
    std::size_t pos = 0;
    std::uint8_t u8() { return pos < in.size() ? in[pos++] : 0; }
    std::uint64_t u64()
    {
        std::uint64_t v = 0;
        for (int i = 0; i < 8 && pos < in.size(); ++i)
            v |= static_cast<std::uint64_t>(in[pos++]) << (8 * i);
        return v;
    }
    Bytes bytes()
    {
        std::size_t n = std::min<std::size_t>(u64(), in.size() - pos);
        Bytes b(in.begin() + static_cast<long>(pos), in.begin() + static_cast<long>(pos + n));
        pos += n;
        return b;
    }
    std::string str()
    {
        Bytes b = bytes();
        return std::string(b.begin(), b.end());
    }
    KeyValues kvs()
    {
        KeyValues kv(u64());
        for (auto& [k, v] : kv) {
            k = str();
            v = bytes();
        }
        return kv;
    }
};

class Driver : public JobExchange {
public:
    Driver(asio::io_context& io, Options options, long node, int link_fd, pid_t peer_pid)
        : io_(io), options_(std::move(options)), node_(node), signals_(io, SIGCHLD), deadline_(io),
          peer_pid_(peer_pid)
    {
        if (link_fd >= 0)
            link_.emplace(io, asio::local::stream_protocol(), link_fd);
    }

    int run()
    {
        char tmpl[] = "/tmp/canopy-pmix-driver-XXXXXX";
        if (!mkdtemp(tmpl)) {
            say("cannot make a temp dir under /tmp: {}", std::strerror(errno));
            return 2;
        }
        tmpdir_ = tmpl;

        PmixJob job;
        job.nspace = options_.nspace;
        std::vector<std::string> hosts;
        for (long n = 0; n < options_.nodes; ++n) {
            hosts.push_back(fmt::format("node{}", n));
            job.ranks_per_node.push_back(static_cast<std::uint64_t>(options_.ranks));
        }
        job.hosts = HostNames(hosts);
        job.node_index = node_;
        job.tmpdir = tmpdir_;

        auto host = start_pmix_host(io_, job, *this, make_calls());
        if (!host) {
            say("{}", host.error().message);
            cleanup_tmpdir();
            return 2;
        }
        host_ = std::move(*host);
        if (link_)
            read_frame();

        signals_.async_wait([this](auto ec, int) { on_sigchld(ec); });
        deadline_.expires_after(std::chrono::seconds(options_.timeout_s));
        deadline_.async_wait([this](auto ec) {
            if (ec)
                return;
            say("timeout after {} s; killing {} ranks", options_.timeout_s, running_.size());
            timed_out_ = true;
            kill_all(SIGKILL);
            if (peer_pid_ > 0)
                ::kill(peer_pid_, SIGTERM);
        });

        if (!spawn_all())
            kill_all(SIGKILL);
        io_.run();
        cleanup_tmpdir();
        return exit_code();
    }

private:
    template <typename... Args>
    void say(fmt::format_string<Args...> format, Args&&... args)
    {
        std::string line = fmt::format("driver: {}{}\n", options_.nodes > 1 ? fmt::format("node{}: ", node_) : "",
                                       fmt::format(format, std::forward<Args>(args)...));
        std::fputs(line.c_str(), stderr);
    }

    long node_of(long rank) const { return rank / options_.ranks; }
    long first_rank() const { return node_ * options_.ranks; }

    // ---- the job's exchange and the daemon, stood in for ----
    // The k-th fence over a set in a domain on one node matches the k-th over the same on the other.
    void fence(std::vector<long> participants, Bytes local, std::function<void(Status, Bytes)> done,
               wire::FenceDomain domain, bool local_failed) override
    {
        ++fences_;
        std::string set = participants.empty() ? "all" : fmt::format("{}", fmt::join(participants, ","));
        bool other_node = participants.empty() ? options_.nodes > 1 : false;
        for (long r : participants)
            other_node = other_node || node_of(r) != node_;
        if (options_.verbosity > 0)
            say("fence over {} in domain {}, {} bytes, {}", set, static_cast<int>(domain), local.size(),
                other_node ? "both nodes" : "this node only");
        if (local_failed) {   // the driver's fake fails it here only: the abort tears both nodes down
            asio::post(io_, [done = std::move(done)] { done(make_error("a participant failed"), {}); });
            return;
        }
        if (!other_node) {
            asio::post(io_, [done = std::move(done), local = std::move(local)]() mutable {
                done(Status{}, std::move(local));
            });
            return;
        }
        std::string numbered = fmt::format("{}:{}", static_cast<int>(domain), set);
        std::string key = fmt::format("{}#{}", numbered, fence_seq_[numbered]++);
        auto& f = fences_pending_[key];
        f.done = std::move(done);
        f.local = local;
        Writer w;
        w.u8(static_cast<std::uint8_t>(Msg::fence));
        w.str(key);
        w.bytes(local);
        send(std::move(w.out));
        try_complete_fence(key);
    }

    void publish(KeyValues data, std::function<void(Status)> done) override
    {
        if (node_ == 0) {
            Status st = store_publish(std::move(data));
            asio::post(io_, [done, st] { done(st); });
            return;
        }
        std::uint64_t id = next_request_++;
        status_waiting_[id] = std::move(done);
        Writer w;
        w.u8(static_cast<std::uint8_t>(Msg::publish_req));
        w.u64(id);
        w.kvs(data);
        send(std::move(w.out));
    }

    // The driver's clients never wait on a lookup: it answers with what is published now.
    void lookup(std::vector<std::string> keys, std::function<void(Status, KeyValues)> done, std::size_t) override
    {
        if (node_ == 0) {
            KeyValues found = store_lookup(keys);
            asio::post(io_, [done, found = std::move(found)]() mutable { done(Status{}, std::move(found)); });
            return;
        }
        std::uint64_t id = next_request_++;
        lookup_waiting_[id] = std::move(done);
        send_keys(Msg::lookup_req, id, keys);
    }

    void unpublish(std::vector<std::string> keys, std::function<void(Status)> done) override
    {
        if (node_ == 0) {
            for (auto& key : keys)
                store_.erase(key);
            asio::post(io_, [done] { done(Status{}); });
            return;
        }
        std::uint64_t id = next_request_++;
        status_waiting_[id] = std::move(done);
        send_keys(Msg::unpublish_req, id, keys);
    }

    void send_keys(Msg msg, std::uint64_t id, const std::vector<std::string>& keys)
    {
        Writer w;
        w.u8(static_cast<std::uint8_t>(msg));
        w.u64(id);
        w.u64(keys.size());
        for (auto& k : keys)
            w.str(k);
        send(std::move(w.out));
    }

    PmixDaemonCalls make_calls()
    {
        PmixDaemonCalls calls;
        calls.direct_modex = [this](long rank, std::function<void(Status, Bytes)> done) {
            ++direct_modex_;
            if (node_of(rank) == node_) {
                host_->serve_direct_modex(rank, std::move(done));
                return;
            }
            std::uint64_t id = next_request_++;
            modex_waiting_[id] = std::move(done);
            Writer w;
            w.u8(static_cast<std::uint8_t>(Msg::dmodex_req));
            w.u64(id);
            w.u64(static_cast<std::uint64_t>(rank));
            send(std::move(w.out));
        };
        calls.abort = [this](long rank, int status, std::string message) { on_abort(rank, status, message, true); };
        return calls;
    }

    struct FencePending {
        std::optional<Bytes> local, remote;
        std::function<void(Status, Bytes)> done;
    };

    void try_complete_fence(const std::string& key)
    {
        auto it = fences_pending_.find(key);
        if (it == fences_pending_.end() || !it->second.local || !it->second.remote || !it->second.done)
            return;
        Bytes all = std::move(*it->second.local);
        all.insert(all.end(), it->second.remote->begin(), it->second.remote->end());
        auto done = std::move(it->second.done);
        fences_pending_.erase(it);
        done(Status{}, std::move(all));
    }

    Status store_publish(KeyValues data)
    {
        for (auto& [key, value] : data)
            if (store_.count(key))
                return make_error("publish: key '{}' already published", key);
        for (auto& [key, value] : data)
            store_[key] = std::move(value);
        return Status{};
    }

    KeyValues store_lookup(const std::vector<std::string>& keys) const
    {
        KeyValues found;
        for (auto& key : keys)
            if (auto it = store_.find(key); it != store_.end())
                found.emplace_back(key, it->second);
        return found;
    }

    void on_abort(long rank, int status, const std::string& message, bool tell_peer)
    {
        say("ABORT from rank {}, status {}: {}", rank, status, message);
        if (!abort_status_)
            abort_status_ = status == 0 ? 1 : status;
        if (tell_peer && link_) {
            Writer w;
            w.u8(static_cast<std::uint8_t>(Msg::abort));
            w.u64(static_cast<std::uint64_t>(rank));
            w.u64(static_cast<std::uint64_t>(static_cast<std::int64_t>(status)));
            w.str(message);
            send(std::move(w.out));
        }
        // Tear the job down like the daemon will: TERM now, KILL after a grace period.
        kill_all(SIGTERM);
        auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(2));
        timer->async_wait([this, timer](auto ec) {
            if (!ec)
                kill_all(SIGKILL);
        });
    }

    // ---- the link: length-prefixed frames over the socketpair ----
    void send(Bytes frame)
    {
        Bytes out;
        Writer w;
        w.u64(frame.size());
        out = std::move(w.out);
        out.insert(out.end(), frame.begin(), frame.end());
        bool idle = outbox_.empty();
        outbox_.push_back(std::move(out));
        if (idle)
            write_next();
    }

    void write_next()
    {
        if (outbox_.empty() || !link_)
            return;
        asio::async_write(*link_, asio::buffer(outbox_.front()), [this](auto ec, std::size_t) {
            if (ec)
                return;
            outbox_.pop_front();
            write_next();
        });
    }

    void read_frame()
    {
        asio::async_read(*link_, asio::buffer(header_), [this](auto ec, std::size_t) {
            if (ec)
                return;   // the peer is gone; its exit is reported through waitpid or our own teardown
            std::uint64_t n = 0;
            for (int i = 0; i < 8; ++i)
                n |= static_cast<std::uint64_t>(header_[static_cast<std::size_t>(i)]) << (8 * i);
            body_.assign(n, 0);
            asio::async_read(*link_, asio::buffer(body_), [this](auto ec2, std::size_t) {
                if (ec2)
                    return;
                on_frame(body_);
                read_frame();
            });
        });
    }

    void on_frame(const Bytes& frame)
    {
        Reader r{frame};
        switch (static_cast<Msg>(r.u8())) {
        case Msg::fence: {
            std::string key = r.str();
            fences_pending_[key].remote = r.bytes();
            try_complete_fence(key);
            break;
        }
        case Msg::dmodex_req: {
            std::uint64_t id = r.u64();
            long rank = static_cast<long>(r.u64());
            host_->serve_direct_modex(rank, [this, id](Status st, Bytes blob) {
                Writer w;
                w.u8(static_cast<std::uint8_t>(Msg::dmodex_resp));
                w.u64(id);
                w.str(st.ok() ? "" : st.error().message);
                w.bytes(blob);
                send(std::move(w.out));
            });
            break;
        }
        case Msg::dmodex_resp: {
            std::uint64_t id = r.u64();
            std::string error = r.str();
            Bytes blob = r.bytes();
            if (auto it = modex_waiting_.find(id); it != modex_waiting_.end()) {
                auto done = std::move(it->second);
                modex_waiting_.erase(it);
                done(error.empty() ? Status{} : Status{Error{error}}, std::move(blob));
            }
            break;
        }
        case Msg::publish_req:
        case Msg::unpublish_req: {
            bool publish = static_cast<Msg>(frame[0]) == Msg::publish_req;
            std::uint64_t id = r.u64();
            Status st;
            if (publish) {
                st = store_publish(r.kvs());
            } else {
                for (std::uint64_t n = r.u64(); n > 0; --n)
                    store_.erase(r.str());
            }
            Writer w;
            w.u8(static_cast<std::uint8_t>(publish ? Msg::publish_resp : Msg::unpublish_resp));
            w.u64(id);
            w.str(st.ok() ? "" : st.error().message);
            send(std::move(w.out));
            break;
        }
        case Msg::publish_resp:
        case Msg::unpublish_resp: {
            std::uint64_t id = r.u64();
            std::string error = r.str();
            if (auto it = status_waiting_.find(id); it != status_waiting_.end()) {
                auto done = std::move(it->second);
                status_waiting_.erase(it);
                done(error.empty() ? Status{} : Status{Error{error}});
            }
            break;
        }
        case Msg::lookup_req: {
            std::uint64_t id = r.u64();
            std::vector<std::string> keys(r.u64());
            for (auto& k : keys)
                k = r.str();
            Writer w;
            w.u8(static_cast<std::uint8_t>(Msg::lookup_resp));
            w.u64(id);
            w.kvs(store_lookup(keys));
            send(std::move(w.out));
            break;
        }
        case Msg::lookup_resp: {
            std::uint64_t id = r.u64();
            KeyValues found = r.kvs();
            if (auto it = lookup_waiting_.find(id); it != lookup_waiting_.end()) {
                auto done = std::move(it->second);
                lookup_waiting_.erase(it);
                done(Status{}, std::move(found));
            }
            break;
        }
        case Msg::abort: {
            long rank = static_cast<long>(r.u64());
            int status = static_cast<int>(static_cast<std::int64_t>(r.u64()));
            on_abort(rank, status, r.str(), false);
            break;
        }
        }
    }

    // ---- ranks ----
    bool spawn_all()
    {
        std::vector<std::vector<std::string>> envs;
        for (long rank = first_rank(); rank < first_rank() + options_.ranks; ++rank) {
            auto extra = host_->prepare_rank(rank, getuid(), getgid());
            if (!extra) {
                say("{}", extra.error().message);
                return false;
            }
            std::vector<std::string> env;
            for (char** e = environ; *e; ++e)
                env.emplace_back(*e);
            for (auto& kv : *extra)
                env.push_back(kv);
            // Two "nodes" on one host: Open MPI's shared-memory segments (/dev/shm/vader_segment.HOST.JOB.LOCALRANK)
            // would collide between node0 and node1, so each node's ranks keep theirs in the node's temp dir.
            if (options_.nodes > 1)
                env.push_back("OMPI_MCA_btl_vader_backing_directory=" + tmpdir_);
            if (options_.verbosity > 1 && rank == first_rank())
                for (auto& kv : *extra)
                    say("rank {} env {}", rank, kv);
            envs.push_back(std::move(env));
        }
        std::vector<char*> argv;
        for (auto& a : options_.command)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        for (long i = 0; i < options_.ranks; ++i) {
            std::vector<char*> envp;
            for (auto& kv : envs[static_cast<std::size_t>(i)])
                envp.push_back(kv.data());
            envp.push_back(nullptr);
            pid_t pid = 0;
            int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
            if (rc != 0) {
                say("cannot start {} for rank {}: {}", argv[0], first_rank() + i, std::strerror(rc));
                first_failure_ = first_failure_ ? first_failure_ : 127;
                return false;
            }
            running_[pid] = first_rank() + i;
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
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (pid == peer_pid_) {
                peer_code_ = code;
                peer_pid_ = -1;
                continue;
            }
            auto it = running_.find(pid);
            if (it == running_.end())
                continue;
            long rank = it->second;
            running_.erase(it);
            say("rank {} exited with code {}", rank, code);
            if (code != 0 && !first_failure_)
                first_failure_ = code;
            host_->rank_exited(rank, status);
        }
        if (running_.empty() && host_)
            finish_ranks();
        if (running_.empty() && peer_pid_ <= 0) {
            signals_.cancel();
            deadline_.cancel();
            if (link_)
                link_->close();
            io_.stop();
            return;
        }
        signals_.async_wait([this](auto e, int) { on_sigchld(e); });
    }

    void finish_ranks()
    {
        std::size_t pending = host_->pending_requests();
        host_.reset();   // deregister + PMIx_server_finalize on this (io) thread
        say("all ranks done; fences={} direct_modex={} published={} pending_at_end={}", fences_, direct_modex_,
            store_.size(), pending);
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
        if (first_failure_)
            return first_failure_;
        return peer_code_;
    }

    void cleanup_tmpdir()
    {
        if (!tmpdir_.empty()) {
            std::string cmd = "rm -rf '" + tmpdir_ + "'";
            if (std::system(cmd.c_str()) != 0)
                say("could not remove {}", tmpdir_);
        }
    }

    asio::io_context& io_;
    Options options_;
    long node_;
    asio::signal_set signals_;
    asio::steady_timer deadline_;
    pid_t peer_pid_;   // node0 only: the node1 driver process
    int peer_code_ = 0;
    std::optional<asio::local::stream_protocol::socket> link_;
    std::deque<Bytes> outbox_;
    std::array<std::uint8_t, 8> header_{};
    Bytes body_;

    std::unique_ptr<PmixHost> host_;
    std::string tmpdir_;
    std::map<pid_t, long> running_;
    std::map<std::string, Bytes> store_;
    std::map<std::string, std::uint64_t> fence_seq_;
    std::map<std::string, FencePending> fences_pending_;
    std::uint64_t next_request_ = 1;
    std::map<std::uint64_t, std::function<void(Status, Bytes)>> modex_waiting_;
    std::map<std::uint64_t, std::function<void(Status)>> status_waiting_;
    std::map<std::uint64_t, std::function<void(Status, KeyValues)>> lookup_waiting_;
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
        std::fprintf(stderr, "usage: host_driver [-n RANKS_PER_NODE] [--nodes 1|2] [--timeout S] [--nspace NAME] "
                             "[-v] -- PROGRAM [ARGS...]\n");
        return 2;
    }
    // Make PMIx hand single-node fences to the host too, so fence_nb is exercised (REFERENCE.md).
    ::setenv("PMIX_MCA_pmix_server_fence_localonly_opt", "0", 0);

    long node = 0;
    int link_fd = -1;
    pid_t peer = -1;
    if (options->nodes == 2) {
        // Fork node1's driver before any thread exists; each process then runs its own PMIx server.
        int fds[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
            std::perror("driver: socketpair");
            return 2;
        }
        peer = fork();
        if (peer < 0) {
            std::perror("driver: fork");
            return 2;
        }
        if (peer == 0) {
            node = 1;
            close(fds[0]);
            link_fd = fds[1];
        } else {
            close(fds[1]);
            link_fd = fds[0];
        }
    }
    canopy::init_logging(fmt::format("driver[node{}]", node), options->verbosity);
    boost::asio::io_context io;
    Driver driver(io, std::move(*options), node, link_fd, peer);
    int code = driver.run();
    if (canopy::pmix_server_abandoned()) {
        std::fflush(nullptr);
        std::_Exit(code);
    }
    return code;
}
