// The node's socket for its ranks' libcanopy.
#include "rank_socket.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "build_config.hpp"
#include "collective/job_store.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "util/log.hpp"

namespace canopy {

namespace {

// What a store request holds besides its key and value: its op, id and sizes.
constexpr std::uint64_t max_request_fields = 64 * 1024;

// The parent of process `pid`, read from /proc.
std::optional<pid_t> parent_of(pid_t pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line))
        return std::nullopt;
    // After the command name, which may itself hold spaces and parentheses: " STATE PPID ...".
    auto close = line.rfind(')');
    if (close == std::string::npos)
        return std::nullopt;
    std::istringstream fields(line.substr(close + 1));
    std::string state;
    pid_t parent = 0;
    if (!(fields >> state >> parent))
        return std::nullopt;
    return parent;
}

// The libcanopy of this canopyd's own build or install, for the ranks' Python package (CANOPY_LIBRARY): the build
// tree first, so a build never hands its ranks an older installed copy. Empty if neither is there.
std::string own_libcanopy()
{
    namespace fs = std::filesystem;
    const fs::path name = "libcanopy.so.0";
    fs::path self = own_executable();
    for (const auto& candidate :
         {self.parent_path().parent_path() / "lib" / "api" / name, fs::path(CANOPY_LIBDIR) / name})
        if (::access(candidate.c_str(), R_OK) == 0)
            return candidate.string();
    return {};
}

} // namespace

std::unique_ptr<RankSocket> RankSocket::start(boost::asio::io_context& io, const std::string& path,
                                              const std::string& node, Hooks hooks)
{
    std::unique_ptr<RankSocket> socket(new RankSocket(io, std::move(hooks), node));
    auto* self = socket.get();
    AppServer::Handlers handlers;
    handlers.mark = [self](AppServer::Mark mark) { self->hooks_.mark(std::move(mark)); };
    handlers.store = [self](pid_t peer, std::uint8_t op, std::vector<std::uint8_t> payload,
                            std::function<void(std::uint8_t, std::vector<std::uint8_t>)> reply) {
        self->store_request(peer, op, std::move(payload), std::move(reply));
    };
    // A request of more than the limit (and room for a store request's own fields) cannot be within it: it is
    // refused unread, so that the daemon never holds it.
    std::uint64_t limit = self->hooks_.keep ? self->hooks_.store_limit : 0;
    if (limit > 0) {
        if (limit + max_request_fields < handlers.max_request)
            handlers.max_request = static_cast<std::uint32_t>(limit + max_request_fields);
        handlers.oversized = [self](pid_t peer, std::uint32_t length) { self->oversized_request(peer, length); };
    }
    handlers.all_closed = [self] {
        if (self->wake_)
            self->wake_();
    };
    auto server = AppServer::start(io, path, std::move(handlers));
    if (!server) {
        area_logger("tree").warn("{}; libcanopy marks and store are unavailable on {}", server.error().message, node);
        return nullptr;
    }
    socket->server_ = std::move(*server);
    return socket;
}

RankSocket::RankSocket(boost::asio::io_context& io, Hooks hooks, std::string node)
    : io_(io), hooks_(std::move(hooks)), node_(std::move(node))
{
    make_store_cache();
}

void RankSocket::make_store_cache()
{
    // Store requests go through the node's cache (store_cache.*): known keys are read here, the rest goes to the
    // root's JobStore.
    store_cache_ = std::make_unique<StoreCache>(
        [this](wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done) {
            hooks_.to_root(std::move(request), std::move(done));
        });
}

Status RankSocket::next_attempt(long)
{
    // The root's job store starts empty again: so does its cache here. The old ranks' connections close by
    // themselves; what they still send is theirs, and they are gone.
    wake_ = nullptr;
    drain_timer_.reset();
    drain_expired_ = false;
    rank_pids_.clear();
    make_store_cache();
    return {};
}

Status RankSocket::prepare_rank(RankLaunch& launch)
{
    if (server_)
        set_environment_value(launch.env, "CANOPY_AGENT_SOCKET", server_->path());
    // A user's own choice, passed through from the launcher's environment, stands.
    static const std::string library = own_libcanopy();
    if (!library.empty())
        add_environment_default(launch.env, "CANOPY_LIBRARY=" + library);
    return {};
}

void RankSocket::rank_exited(long rank, int)
{
    std::erase_if(rank_pids_, [rank](const auto& entry) { return entry.second == rank; });
}

std::optional<long> RankSocket::rank_of(pid_t pid) const
{
    // Up the parents: a rank's Python may run its store from a child (torch's multiprocessing workers).
    for (pid_t at = pid; at > 1;) {
        if (auto found = rank_pids_.find(at); found != rank_pids_.end())
            return found->second;
        if (at == ::getpid())
            break;   // an orphan, which the daemon (a subreaper) took on
        auto parent = parent_of(at);
        if (!parent || *parent == at)
            break;
        at = *parent;
    }
    if (auto found = rank_pids_.find(::getpgid(pid)); found != rank_pids_.end())
        return found->second;
    return std::nullopt;
}

void RankSocket::store_request(pid_t peer, std::uint8_t op, Bytes payload, StoreCache::Reply reply)
{
    auto operation = wire::decode_store_operation(op, payload);
    auto write = hooks_.keep && operation ? store_write(*operation) : std::nullopt;
    if (write) {
        auto rank = rank_of(peer);
        auto refuse = [&](std::string why) {
            reply(static_cast<std::uint8_t>(wire::RankSocketAnswer::error),
                  wire::encode_fields(wire::StoreFailure{std::move(why)}));
        };
        if (!rank) {
            refuse(fmt::format("process {} on {} is not one of the job's ranks, nor was it started by one, so its "
                               "writes to the store cannot be counted against the job's limit per rank",
                               peer, node_));
            return;
        }
        std::string key = "store:" + write->key;
        if (write->deletes) {
            hooks_.drop(*rank, key);
        } else if (!hooks_.keep(*rank, key, write->bytes, "a write to the canopy store")) {
            refuse(fmt::format("the write takes rank {} on {} past the job's limit on what a rank may store", *rank,
                               node_));
            return;
        }
    }
    store_cache_->request(op, std::move(payload), operation ? std::optional(std::move(*operation)) : std::nullopt,
                          std::move(reply));
}

void RankSocket::oversized_request(pid_t peer, std::uint32_t length)
{
    // Longer than the limit, it cannot be kept: counting it only ends the job, with the line that says why.
    auto rank = rank_of(peer);
    if (rank && length > hooks_.store_limit &&
        !hooks_.keep(*rank, "store:(one request)", length, "a request to the canopy store"))
        return;
    area_logger("app").warn("closed a connection of process {} on {}: a {}-byte request is malformed", peer, node_,
                            length);
}

void RankSocket::serve_requests(RoutedServices& services)
{
    services.serve<wire::StoreInvalidation>([this](long from, wire::StoreInvalidation request, auto reply) {
        if (from != 0)
            return reply(make_error("only the launcher invalidates {}'s store cache, not tree position {}", node_, from));
        store_cache_->invalidate(request.key);
        reply(wire::Acknowledged{});
    });
}

bool RankSocket::drained(std::function<void()> wake)
{
    if (!server_ || server_->open_connections() == 0 || drain_expired_)
        return true;
    // A rank's last marks may still be unread in its connection: read them until the connections close.
    wake_ = wake;
    if (!drain_timer_) {
        drain_timer_ = std::make_unique<boost::asio::steady_timer>(io_, drain_limit);
        drain_timer_->async_wait([this](const boost::system::error_code& error) {
            if (error)
                return;
            drain_expired_ = true;
            if (wake_)
                wake_();
        });
    }
    return false;
}

void RankSocket::record(timing::PhaseSet& phases, const std::string& node)
{
    if (drain_timer_)
        drain_timer_->cancel();
    wake_ = nullptr;
    const auto& store = store_cache_->counts();
    if (store.cached + store.merged + store.forwarded == 0)
        return;
    phases.add("daemon.store_local_messages", static_cast<double>(store.cached + store.merged), node);
    area_logger("tree").debug("{}: store requests: {} answered from the cache, {} shared a read on its way, {} sent "
                              "to the root", node, store.cached, store.merged, store.forwarded);
}

void RankSocket::stop()
{
    wake_ = nullptr;
    if (drain_timer_)
        drain_timer_->cancel();
    server_.reset();
}

} // namespace canopy
