// The node's socket for its ranks' libcanopy.
#include "rank_socket.hpp"

#include <unistd.h>

#include <filesystem>

#include "build_config.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "util/log.hpp"

namespace canopy {

namespace {

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
    std::unique_ptr<RankSocket> socket(new RankSocket(io, std::move(hooks)));
    auto* self = socket.get();
    AppServer::Handlers handlers;
    handlers.mark = [self](AppServer::Mark mark) { self->hooks_.mark(std::move(mark)); };
    handlers.store = [self](std::uint8_t op, std::vector<std::uint8_t> payload,
                            std::function<void(std::uint8_t, std::vector<std::uint8_t>)> reply) {
        self->store_cache_->request(op, std::move(payload), std::move(reply));
    };
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

RankSocket::RankSocket(boost::asio::io_context& io, Hooks hooks) : io_(io), hooks_(std::move(hooks))
{
    // Store requests go through the node's cache (store_cache.*): known keys are read here, the rest goes to the
    // root's JobStore.
    store_cache_ = std::make_unique<StoreCache>([this](Bytes request, Done done) {
        hooks_.to_root(std::move(request), std::move(done));
    });
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

bool RankSocket::serve_request(long from, wire::RoutedOp op, Bytes payload, Done reply)
{
    if (op != wire::RoutedOp::store || from != 0)
        return false;
    reply(store_cache_->from_root(payload), {});
    return true;
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
