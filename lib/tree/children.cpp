// A parent's children in the tree: starting them through the launch agent, authenticating them, and their links.
#include "tree/children.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read.hpp>
#include <fmt/format.h>

#include "hosts/this_host.hpp"
#include "tree/agent.hpp"
#include "tree/topology.hpp"
#include "util/log.hpp"
#include "wire/auth.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

// Strangers get this long to prove they know the secret, or the heartbeat bound when that is longer: a lossy link
// that heartbeats survive must not fail a handshake (TCP resends make one take seconds).
constexpr double min_handshake_timeout_seconds = 10.0;
// After a child's link closes, its agent process gets this long to exit before SIGKILL.
constexpr auto reap_grace = std::chrono::seconds(5);
// After an agent exits while its daemon's link is open, the link gets this long to close on its own (the daemon
// ended and the agent's exit was seen first) before the node counts as lost.
constexpr auto agent_exit_grace = std::chrono::seconds(2);
constexpr std::size_t kept_stderr_lines = 3;

} // namespace

Result<ChildLaunch> plan_child_launch(const wire::LaunchPlan& plan, long position, const std::string& parent_endpoint,
                                      const std::string& daemon_path)
{
    long index = Topology::position_to_node(position);
    std::string host = plan.hosts.at(static_cast<std::size_t>(index));
    std::vector<std::string> command{daemon_path, "--parent", parent_endpoint, "--position", std::to_string(position),
                                     "--node", host};
    if (plan.simulated) {
        command.push_back("--bind");
        command.push_back(simulated_node_address(index));
        command.push_back("--same-clock");
    }
    if (plan.connect_timeout != wire::default_connect_timeout) {
        // The child waits for us as long as we wait for it: a parent slow to let it in is not a reason to leave.
        command.push_back("--join-timeout");
        command.push_back(fmt::format("{:g}", plan.connect_timeout));
    }
    for (std::uint32_t i = 0; i < plan.verbosity; ++i)
        command.push_back("-v");
    // The launcher's own node starts its daemon directly: ssh or rsh to ourselves would need a server here, which
    // a laptop or a login node often lacks. An exec agent (srun) is the user's command and works here too. Only the
    // launcher asks (its children are positions 1..fanout): a daemon's children are other hosts, and asking costs a
    // name lookup at the daemon's start.
    bool launchers_child = position <= static_cast<long>(plan.fanout);
    bool here = plan.simulated || (launchers_child && (plan.agent == "ssh" || plan.agent == "rsh") &&
                                   names_this_host(host));
    AgentSettings agent{here ? "local" : plan.agent, plan.ssh_command, plan.ssh_args, plan.rsh_command};
    auto argv = agent_command(agent, host, command);
    if (!argv)
        return argv.error();
    return ChildLaunch{position, host, std::move(*argv)};
}

ChildSet::ChildSet(asio::io_context& io, ProcessReaper& reaper, const auth::Key& key, Events events)
    : io_(io), reaper_(reaper), key_(key), events_(std::move(events)), acceptor_(io), accept_guard_(io, tree_log())
{
}

ChildSet::~ChildSet()
{
    lifetime_.end();
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    for (auto& [position, child] : children_)
        if (child->link)
            child->link->close();
}

Status ChildSet::listen(const std::string& address)
{
    boost::system::error_code error;
    auto ip = asio::ip::make_address(address, error);
    if (error)
        return make_error("cannot listen on '{}': not an IP address", address);
    tcp::endpoint endpoint(ip, 0);
    acceptor_.open(endpoint.protocol(), error);
    if (!error)
        acceptor_.bind(endpoint, error);
    if (!error)
        acceptor_.listen(asio::socket_base::max_listen_connections, error);
    if (error)
        return make_error("cannot listen on {}: {}", address, error.message());
    listening_ = true;
    accept_next();
    return {};
}

std::string ChildSet::endpoint() const
{
    boost::system::error_code error;
    auto local = acceptor_.local_endpoint(error);
    return fmt::format("{}:{}", local.address().to_string(), local.port());
}

const std::string& ChildSet::host_of(long position) const
{
    static const std::string unknown = "?";
    auto it = children_.find(position);
    return it == children_.end() ? unknown : it->second->launch.host;
}

void ChildSet::launch(std::vector<ChildLaunch> children, std::size_t window, double connect_timeout,
                      double heartbeat_timeout, bool shared_clock, InProcessStarter in_process)
{
    in_process_ = std::move(in_process);
    window_ = std::max<std::size_t>(window, 1);
    connect_timeout_ = connect_timeout;
    heartbeat_timeout_ = heartbeat_timeout;
    clock_rounds_ = shared_clock ? 0 : clock_rounds_between_hosts;
    for (auto& launch : children) {
        long position = launch.position;
        auto child = std::make_unique<Child>();
        child->launch = std::move(launch);
        children_.emplace(position, std::move(child));
        pending_.push_back(position);
    }
    start_next();
    check_finished();
}

void ChildSet::start_next()
{
    if (in_flight_ >= window_ || pending_.empty())
        return;
    long position = pending_.front();
    pending_.pop_front();
    start_child(*children_.at(position));
    // One start per turn of the event loop, so children that are already up get their handshake and plan
    // between starts instead of after the whole window.
    if (!start_scheduled_) {
        start_scheduled_ = true;
        asio::post(io_, lifetime_.guard([this] {
            start_scheduled_ = false;
            start_next();
        }));
    }
}

void ChildSet::start_child(Child& child)
{
    child.started = true;
    ++in_flight_;
    if (in_process_) {
        if (auto started = in_process_(child.launch, endpoint(), key_); !started)
            give_up(child, started.error().message);
        else
            await_connection(child);
        return;
    }
    auto stdin_pipe = make_pipe();
    auto stderr_pipe = make_pipe();
    if (!stdin_pipe || !stderr_pipe) {
        give_up(child, (stdin_pipe ? stderr_pipe.error() : stdin_pipe.error()).message);
        return;
    }
    SpawnRequest request;
    request.argv = child.launch.argv;
    const char* path = std::getenv("PATH");
    auto program = find_program(request.argv[0], path ? path : "");
    if (!program) {
        give_up(child, program.error().message);
        return;
    }
    request.argv[0] = *program;
    request.stdin_fd = stdin_pipe->read_end.get();
    request.stdout_fd = stderr_pipe->write_end.get();
    request.stderr_fd = stderr_pipe->write_end.get();
    request.parent_death_signal = SIGTERM;
    request.wait_for_exec = false;   // the program was found above; start the window's children in parallel
    auto pid = spawn_process(request);
    if (!pid) {
        give_up(child, pid.error().message);
        return;
    }
    child.pid = *pid;
    child.process_alive = true;
    long position = child.launch.position;
    tree_log().debug("started {} for {} (pid {})", child.launch.argv[0], child.launch.host, child.pid);

    // The secret travels on the agent's stdin, never in argv, where any user could read it.
    std::string secret = auth::to_hex(key_) + "\n";
    [[maybe_unused]] auto written = ::write(stdin_pipe->write_end.get(), secret.data(), secret.size());

    child.stderr_stream = std::make_unique<asio::posix::stream_descriptor>(io_, stderr_pipe->read_end.release());
    read_stderr(child);

    reaper_.watch(child.pid, lifetime_.guard([this, position](int status) {
        Child& child = *children_.at(position);
        child.process_alive = false;
        if (!child.connected && !child.gone) {
            drain_stderr(child);   // the agent's last words usually say why it failed
            std::string what = fmt::format("{} {}", child.launch.argv[0], describe_wait_status(status));
            std::string output = recent_output(child);
            give_up(child, output.empty() ? what : fmt::format("{}: {}", what, output));
        } else if (child.connected && !child.gone) {
            agent_ended(child, status);
        }
        check_finished();
    }));
    await_connection(child);
}

void ChildSet::agent_ended(Child& child, int status)
{
    // The daemon's session is gone (sshd killed, the srun step cancelled): its stdin and stderr with it, and a
    // daemon started again there could not be told apart from this one. Its link still being open is no reason
    // to wait for it: the node is lost, as mpirun and Hydra count it.
    long position = child.launch.position;
    child.timer = std::make_unique<asio::steady_timer>(io_);
    child.timer->expires_after(agent_exit_grace);
    child.timer->async_wait(lifetime_.guard([this, position, status](const boost::system::error_code& error) {
        if (error)
            return;
        Child& child = *children_.at(position);
        if (child.gone || !child.link)
            return;
        drain_stderr(child);
        std::string what = fmt::format("its launch agent {} {}", child.launch.argv[0], describe_wait_status(status));
        std::string output = recent_output(child);
        child.link->close(output.empty() ? what : fmt::format("{}: {}", what, output));
    }));
}

void ChildSet::await_connection(Child& child)
{
    long position = child.launch.position;
    child.timer = std::make_unique<asio::steady_timer>(io_);
    child.timer->expires_after(std::chrono::milliseconds(static_cast<long>(connect_timeout_ * 1000)));
    child.timer->async_wait(lifetime_.guard([this, position](const boost::system::error_code& error) {
        if (error)
            return;
        Child& child = *children_.at(position);
        if (child.connected || child.gone)
            return;
        std::string output = recent_output(child);
        give_up(child, fmt::format("canopyd did not connect back within {:g} s{}{}{}", connect_timeout_,
                                   still_running(child), output.empty() ? "" : "; agent output: ", output));
    }));
}

void ChildSet::read_stderr(Child& child)
{
    long position = child.launch.position;
    child.stderr_stream->async_read_some(asio::buffer(child.stderr_buffer),
        lifetime_.guard([this, position](const boost::system::error_code& error, std::size_t size) {
            Child& child = *children_.at(position);
            take_stderr(child, std::string_view(child.stderr_buffer.data(), size));
            if (error) {
                take_stderr(child, "\n");   // an unfinished last line still counts
                child.stderr_stream.reset();
                return;
            }
            read_stderr(child);
        }));
}

void ChildSet::drain_stderr(Child& child)
{
    if (!child.stderr_stream)
        return;
    boost::system::error_code ignored;
    child.stderr_stream->non_blocking(true, ignored);   // a grandchild may still hold the pipe open
    char buffer[4096];
    for (;;) {
        ssize_t got = ::read(child.stderr_stream->native_handle(), buffer, sizeof buffer);
        if (got <= 0)
            break;
        take_stderr(child, std::string_view(buffer, static_cast<std::size_t>(got)));
    }
    take_stderr(child, "\n");
}

void ChildSet::take_stderr(Child& child, std::string_view data)
{
    long position = child.launch.position;
    child.stderr_partial.append(data);
    std::size_t start = 0;
    for (std::size_t newline; (newline = child.stderr_partial.find('\n', start)) != std::string::npos;
         start = newline + 1) {
        std::string line = child.stderr_partial.substr(start, newline - start);
        if (line.empty())
            continue;
        child.recent_stderr.push_back(line);
        if (child.recent_stderr.size() > kept_stderr_lines)
            child.recent_stderr.pop_front();
        // Before the child connects, what the agent says (ssh warnings, why it failed) belongs in the failure
        // message, if there is one; afterwards the lines are the daemon's own log.
        if (child.connected)
            events_.log_line(position, line);
    }
    child.stderr_partial.erase(0, start);
}

std::string ChildSet::still_running(const Child& child) const
{
    if (!child.process_alive)
        return {};
    std::string doing = describe_what_process_does(child.pid);
    if (doing.empty())
        return {};
    return fmt::format("; {} (pid {}) still runs: {}", std::filesystem::path(child.launch.argv[0]).filename().string(),
                       child.pid, doing);
}

std::string ChildSet::recent_output(const Child& child) const
{
    std::string out;
    for (const auto& line : child.recent_stderr)
        out += (out.empty() ? "" : " | ") + line;
    return out;
}

void ChildSet::accept_next()
{
    acceptor_.async_accept(lifetime_.guard([this](const boost::system::error_code& error, tcp::socket socket) {
        if (!error) {
            auto peer = std::make_shared<tcp::socket>(std::move(socket));
            auto pending = accept_guard_.admit([weak = std::weak_ptr<tcp::socket>(peer)] {
                boost::system::error_code ignored;
                if (auto dropped = weak.lock())
                    dropped->close(ignored);
            });
            asio::co_spawn(io_, authenticate(peer, std::move(pending)), [](std::exception_ptr exception) {
                if (exception)
                    tree_log().error("internal error while authenticating a child");
            });
        }
        accept_guard_.after_accept(error, [this] { accept_next(); });
    }));
}

// `pending` counts the connection against the cap until the handshake ends, however it ends.
asio::awaitable<void> ChildSet::authenticate(std::shared_ptr<tcp::socket> peer, AcceptGuard::Pending pending)
{
    auto watch = lifetime_.watch();
    boost::system::error_code ignored;
    auto remote = peer->remote_endpoint(ignored);   // before the handshake, which may close the socket
    auto position = co_await accept_child(*peer, key_, std::max(min_handshake_timeout_seconds, heartbeat_timeout_),
                                       clock_rounds_);
    if (!watch.alive())
        co_return;
    if (!position) {
        // Once the job is ending, children dying mid-handshake are expected, not suspicious.
        auto message = fmt::format("dropped a connection from {}: {}", remote.address().to_string(),
                                   pending.dropped_for_room() ? "too many others were still authenticating"
                                                              : position.error().message);
        if (listening_)
            accept_guard_.refused(message);
        else
            tree_log().debug("{}", message);
        peer->close(ignored);
        co_return;
    }
    adopt(std::move(*peer), static_cast<long>(*position));
}

void ChildSet::adopt(tcp::socket socket, long position)
{
    auto it = children_.find(position);
    boost::system::error_code ignored;
    if (it != children_.end() && it->second->gone && !it->second->connected) {
        // A child given up on (the job is being torn down, or it was too slow) that was already authenticating:
        // expected, and nothing the user needs to hear about.
        tree_log().debug("closed the late connection of the child at tree position {}", position);
        socket.close(ignored);
        return;
    }
    if (it == children_.end() || it->second->connected || !it->second->started) {
        tree_log().warn("dropped a connection claiming tree position {}: not a child waiting to connect", position);
        socket.close(ignored);
        return;
    }
    Child& child = *it->second;
    child.connected = true;
    ++connected_;
    --in_flight_;
    if (child.timer)
        child.timer->cancel();
    child.link = std::make_shared<Link>(std::move(socket), child.launch.host);
    child.link->start(
        lifetime_.guard([this, position](wire::Frame frame) { events_.frame(position, std::move(frame)); }),
        lifetime_.guard([this, position](const std::string& reason) {
            Child& child = *children_.at(position);
            // A silent child's process, if still here, says whether it is stopped, stuck in the kernel or busy.
            std::string why = child.link->peer_silent() ? reason + still_running(child) : reason;
            mark_gone(child);
            events_.closed(position, why);
            check_finished();
        }));
    child.link->keep_alive(heartbeat_timeout_);
    events_.connected(position);
    for (auto& frame : std::exchange(child.held, {}))
        child.link->send(std::move(frame));
    start_next();
}

void ChildSet::give_up(Child& child, const std::string& message)
{
    if (child.gone)
        return;
    if (child.started && !child.connected)
        --in_flight_;
    mark_gone(child);
    events_.start_failed(child.launch.position, message);
    start_next();
    check_finished();
}

void ChildSet::mark_gone(Child& child)
{
    child.gone = true;
    child.held.clear();
    if (!child.process_alive)
        return;
    if (!child.timer)
        child.timer = std::make_unique<asio::steady_timer>(io_);
    // A child that connected gets a moment to exit by itself; one that never did, or went silent, would not.
    bool may_exit = child.connected && !child.link->peer_silent();
    child.timer->expires_after(may_exit ? std::chrono::duration_cast<std::chrono::milliseconds>(reap_grace)
                                        : std::chrono::milliseconds(0));
    child.timer->async_wait(lifetime_.guard([&child](const boost::system::error_code& error) {
        if (error || !child.process_alive)
            return;
        ::kill(-child.pid, SIGKILL);
    }));
}

void ChildSet::send(long position, std::vector<std::uint8_t> frame, bool urgent)
{
    auto it = children_.find(position);
    if (it != children_.end() && it->second->link)
        it->second->link->send(std::move(frame), urgent);
}

void ChildSet::broadcast(std::vector<std::uint8_t> frame, bool urgent)
{
    auto shared = std::make_shared<const std::vector<std::uint8_t>>(std::move(frame));
    for (auto& [position, child] : children_)
        if (child->link)
            child->link->send(shared, urgent);
}

void ChildSet::broadcast_to_late_children_too(std::vector<std::uint8_t> frame, bool urgent)
{
    auto shared = std::make_shared<const std::vector<std::uint8_t>>(std::move(frame));
    for (auto& [position, child] : children_) {
        if (child->link)
            child->link->send(shared, urgent);
        else if (!child->gone)
            child->held.push_back(shared);
    }
}

std::vector<long> ChildSet::connected_positions() const
{
    std::vector<long> positions;
    for (const auto& [position, child] : children_)
        if (child->link)
            positions.push_back(position);
    return positions;
}

bool ChildSet::connected(long position) const
{
    auto it = children_.find(position);
    return it != children_.end() && it->second->link;
}

std::size_t ChildSet::max_queued_bytes() const
{
    std::size_t most = 0;
    for (const auto& [position, child] : children_)
        if (child->link)
            most = std::max(most, child->link->queued_bytes());
    return most;
}

bool ChildSet::any_unread_bytes() const
{
    return std::any_of(children_.begin(), children_.end(),
                       [](const auto& entry) { return entry.second->link && entry.second->link->has_unread_bytes(); });
}

void ChildSet::kill_all(int signo)
{
    for (long position : pending_)
        children_.at(position)->gone = true;
    pending_.clear();
    for (auto& [position, child] : children_)
        if (child->process_alive)
            ::kill(-child->pid, signo);
    check_finished();
}

void ChildSet::kill_unconnected(int signo)
{
    for (long position : pending_)
        children_.at(position)->gone = true;
    pending_.clear();
    for (auto& [position, child] : children_)
        if (child->process_alive && !child->connected)
            ::kill(-child->pid, signo);
    check_finished();
}

void ChildSet::stop_listening()
{
    listening_ = false;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_guard_.flush();
}

bool ChildSet::finished() const
{
    for (const auto& [position, child] : children_)
        if (!child->gone || child->process_alive)
            return false;
    return true;
}

void ChildSet::check_finished()
{
    if (finished_reported_ || !finished())
        return;
    finished_reported_ = true;
    asio::post(io_, lifetime_.guard([this] {
        if (events_.all_finished)
            events_.all_finished();
    }));
}

} // namespace canopy
