// One node's simple PMI server, the socket layer: each rank's socketpair, its reads and writes, and the exit grace
// of a rank that broke off. What the bytes mean is PmiProtocolServer's.
#include "pmi/pmi_server.hpp"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "proc/abandoned_segments.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "timing/clock.hpp"
#include "util/log.hpp"

namespace canopy {

namespace asio = boost::asio;

namespace {

spdlog::logger& pmi_log() { return area_logger("pmi"); }

} // namespace

struct PmiServer::Connection {
    Connection(asio::io_context& io, long rank) : rank(rank), socket(io) {}

    long rank;
    asio::local::stream_protocol::socket socket;
    UniqueFd child_end;
    std::array<char, 4096> buffer{};
    std::deque<std::string> outbox;
    bool writing = false;
    std::unique_ptr<asio::steady_timer> grace;   // after it broke off: time to exit
};

PmiServer::PmiServer(asio::io_context& io, PmiJob job, JobExchange& exchange, PmiNode node)
    : io_(io), node_(job.node), job_(std::move(job)), exchange_(exchange), node_hooks_(std::move(node))
{
    protocol_.emplace(job_, static_cast<PmiProtocolOps&>(*this));
}

PmiServer::~PmiServer()
{
    lifetime_.end();
    stop();
}

Status PmiServer::prepare_rank(RankLaunch& launch)
{
    long rank = launch.rank;
    if (rank >= protocol_->world_size())
        return {};   // spawned through PMIx into a namespace of its own: not a simple-PMI client
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return make_error("cannot make the PMI connection for rank {} on {}: {}", rank, node_, std::strerror(errno));
    auto connection = std::make_shared<Connection>(io_, rank);
    connection->child_end.reset(fds[1]);
    boost::system::error_code error;
    connection->socket.assign(asio::local::stream_protocol(), fds[0], error);
    if (error) {
        ::close(fds[0]);
        return make_error("cannot watch the PMI connection for rank {} on {}: {}", rank, node_, error.message());
    }
    auto& env = launch.env;
    set_environment_value(env, "PMI_FD", std::to_string(fds[1]));
    set_environment_value(env, "PMI_RANK", std::to_string(rank));
    set_environment_value(env, "PMI_SIZE", std::to_string(protocol_->world_size()));
    set_environment_value(env, "PMI_APPNUM", std::to_string(launch.appnum));
    set_environment_value(env, "PMI_LOCAL_RANK", std::to_string(rank - protocol_->first_rank()));
    set_environment_value(env, "PMI_LOCAL_SIZE", std::to_string(protocol_->local_size()));
    connections_[rank] = connection;
    protocol_->add_rank(rank, launch.appnum);
    launch.inherit_fds.push_back(fds[1]);
    read_next(connection);
    return {};
}

void PmiServer::ranks_started()
{
    for (auto& [rank, connection] : connections_)
        connection->child_end.reset();
}

void PmiServer::read_next(const std::shared_ptr<Connection>& connection)
{
    auto weak = std::weak_ptr<Connection>(connection);
    connection->socket.async_read_some(
        asio::buffer(connection->buffer),
        [this, weak, watch = lifetime_.watch()](boost::system::error_code error, std::size_t n) {
            auto c = weak.lock();
            if (!watch.alive() || !c || !c->socket.is_open())
                return;
            if (error) {
                close(*c);
                protocol_->connection_closed(c->rank, error == asio::error::eof ? "" : error.message());
                return;
            }
            protocol_->receive(c->rank, std::string_view(c->buffer.data(), n));
            if (watch.alive() && c->socket.is_open() && protocol_->open(c->rank))
                read_next(c);
        });
}

void PmiServer::send(long rank, std::string answer)
{
    auto it = connections_.find(rank);
    if (it == connections_.end() || !it->second->socket.is_open())
        return;
    it->second->outbox.push_back(std::move(answer));
    flush(it->second);
}

void PmiServer::flush(const std::shared_ptr<Connection>& c)
{
    if (c->writing || c->outbox.empty() || !c->socket.is_open())
        return;
    c->writing = true;
    asio::async_write(c->socket, asio::buffer(c->outbox.front()),
                      [this, c, watch = lifetime_.watch()](boost::system::error_code error, std::size_t) {
                          c->writing = false;
                          if (!watch.alive())
                              return;
                          c->outbox.pop_front();
                          if (error)
                              c->outbox.clear();   // the read side sees the close and reports it
                          else
                              flush(c);
                      });
}

void PmiServer::hang_up(long rank, std::string last_words)
{
    auto it = connections_.find(rank);
    if (it == connections_.end() || !it->second->socket.is_open())
        return;
    // Best effort, without waiting: the connection closes right after.
    (void)::send(it->second->socket.native_handle(), last_words.data(), last_words.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    close(*it->second);
}

void PmiServer::close(Connection& c)
{
    boost::system::error_code ignored;
    c.socket.close(ignored);
}

void PmiServer::await_exit(long rank)
{
    auto it = connections_.find(rank);
    if (it == connections_.end())
        return;
    auto& grace = it->second->grace;
    grace = std::make_unique<asio::steady_timer>(io_, exit_grace);
    grace->async_wait(lifetime_.guard([this, rank](const boost::system::error_code& error) {
        if (!error)
            protocol_->exit_overdue(rank);
    }));
}

void PmiServer::rank_exited(long rank, int wait_status)
{
    if (auto it = connections_.find(rank); it != connections_.end() && it->second->grace)
        it->second->grace->cancel();
    protocol_->rank_exited(rank, wait_status);
}

namespace {

// PMI's service names in the job's name service: apart from PMIx's, whose values are encoded otherwise.
std::string service_key(const std::string& name) { return "pmi/" + name; }

} // namespace

void PmiServer::fence(Bytes local, std::function<void(Status, Bytes)> done)
{
    exchange_.fence({}, std::move(local), lifetime_.guard(std::move(done)), wire::FenceDomain::pmi, false);
}

void PmiServer::publish(std::string name, std::string port, std::function<void(Status)> done)
{
    exchange_.publish({{service_key(name), Bytes(port.begin(), port.end())}}, lifetime_.guard(std::move(done)));
}

void PmiServer::unpublish(std::string name, std::function<void(Status)> done)
{
    exchange_.unpublish({service_key(name)}, lifetime_.guard(std::move(done)));
}

void PmiServer::lookup(std::string name, std::function<void(Status, std::optional<std::string>)> done)
{
    auto found = [done = std::move(done)](Status status, wire::KeyValues entries) {
        if (!status.ok() || entries.empty())
            done(std::move(status), std::nullopt);
        else
            done(std::move(status), std::string(entries.front().second.begin(), entries.front().second.end()));
    };
    exchange_.lookup({service_key(name)}, lifetime_.guard(std::move(found)), 0);
}

void PmiServer::fail(long rank, int exit_code, std::string message)
{
    node_hooks_.fail(rank, exit_code, std::move(message));
}

void PmiServer::mark(long rank, std::string_view what)
{
    if (node_hooks_.mark)
        node_hooks_.mark(rank, std::string(what), timing::now_ns());
}

bool PmiServer::keep(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)
{
    return !node_hooks_.keep || node_hooks_.keep(rank, key, bytes, how);
}

void PmiServer::drop(long rank, const std::string& key)
{
    if (node_hooks_.drop)
        node_hooks_.drop(rank, key);
}

void PmiServer::stop()
{
    if (stopped_)
        return;
    stopped_ = true;
    protocol_->stop();
    for (auto& [rank, connection] : connections_) {
        close(*connection);
        connection->child_end.reset();
        if (connection->grace)
            connection->grace->cancel();
    }
    sweep_abandoned_segments();
}

Status PmiServer::next_attempt(long)
{
    stop();
    connections_.clear();
    protocol_.emplace(job_, static_cast<PmiProtocolOps&>(*this));
    started_ = std::chrono::system_clock::now();
    stopped_ = false;
    return {};
}

void PmiServer::sweep_abandoned_segments() const
{
    // Only a rank that ended between PMI init and finalize can have left a segment. Listing the directories costs
    // O(files in them), and thousands of simulated nodes share them: each one listing made the job's end O(N^2).
    if (!protocol_->rank_left_in_mpi())
        return;
    for (const auto& directory : mpich_segment_directories)
        for (const auto& path : canopy::remove_abandoned_segments(directory, mpich_segment_prefix, started_))
            pmi_log().debug("{}: removed {}, which a rank made in MPI_Init and died before MPICH unlinked it", node_,
                            path);
}

} // namespace canopy
