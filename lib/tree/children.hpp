// A parent's children in the tree: starting them through the launch agent, authenticating them, and their links.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "proc/process.hpp"
#include "tree/link.hpp"
#include "util/accept_guard.hpp"
#include "util/lifetime.hpp"
#include "wire/auth.hpp"
#include "wire/messages.hpp"

namespace canopy {

struct ChildLaunch {
    long position = 0;
    std::string host;
    std::vector<std::string> argv;   // the agent command that starts canopyd for this child
};

// The agent command that starts canopyd for `position` as the plan says, connecting back to parent_endpoint.
Result<ChildLaunch> plan_child_launch(const wire::LaunchPlan& plan, long position, const std::string& parent_endpoint,
                                      const std::string& daemon_path);

// Starts a child daemon without the agent: a tree of daemons inside one process, as the tests run it. It gets the
// child's launch, the endpoint to connect back to and the job key; the child must then connect as any other.
using InProcessStarter =
    std::function<Status(const ChildLaunch& launch, const std::string& parent_endpoint, const auth::Key& key)>;

class ChildSet {
public:
    struct Events {
        std::function<void(long position)> connected;
        std::function<void(long position, wire::Frame frame)> frame;
        // The link ended; reason is empty for an orderly close.
        std::function<void(long position, const std::string& reason)> closed;
        // The child never connected: the agent failed, or the connect timeout passed.
        std::function<void(long position, const std::string& message)> start_failed;
        // A line the child daemon (or its agent) wrote to stderr after it connected.
        std::function<void(long position, const std::string& line)> log_line;
        // Every child's link has closed and every agent process has been reaped.
        std::function<void()> all_finished;
    };

    ChildSet(asio::io_context& io, ProcessReaper& reaper, const auth::Key& key, Events events);
    ~ChildSet();

    // Listen on address (port chosen by the kernel) for children connecting back.
    Status listen(const std::string& address);
    std::string endpoint() const;   // "address:port" for the children's command line

    // Starts children with at most `window` in flight (started but not yet connected). Each connected child's
    // link keeps a heartbeat: one silent for heartbeat_timeout closes with a reason saying so, and its process
    // is killed at once. shared_clock: the children run on this host (simulated nodes), so their clocks need no
    // offset measurement. `in_process`, if set, starts them instead of the agent.
    void launch(std::vector<ChildLaunch> children, std::size_t window, double connect_timeout,
                double heartbeat_timeout, bool shared_clock, InProcessStarter in_process = {});

    void send(long position, std::vector<std::uint8_t> frame, bool urgent = false);   // urgent: Link::send
    void broadcast(std::vector<std::uint8_t> frame, bool urgent = false);   // one buffer queued on every link
    // As broadcast, and held for each child not connected yet: it gets them, in order, right after its plan.
    // For what a child must not miss by connecting late (a daemon's ranks, and so the root's pushes, start before
    // its children are up).
    void broadcast_to_late_children_too(std::vector<std::uint8_t> frame, bool urgent = false);
    // The most bytes any connected child still has to be sent: bulk broadcasts wait while it is high.
    std::size_t max_queued_bytes() const;
    // Whether a child has sent bytes this side has not read yet (our thread fell behind, not the child).
    bool any_unread_bytes() const;
    // Ends every child process we started (the agent, or the daemon itself for local launches).
    void kill_all(int signo);
    // Ends the children that have not connected (they cannot hear a shutdown message) and starts no more.
    void kill_unconnected(int signo);
    void stop_listening();

    std::size_t size() const { return children_.size(); }
    std::size_t connected_count() const { return connected_; }
    // The children whose links are up, by position.
    std::vector<long> connected_positions() const;
    bool connected(long position) const;
    bool finished() const;
    const std::string& host_of(long position) const;

private:
    struct Child {
        ChildLaunch launch;
        pid_t pid = -1;
        bool process_alive = false;
        bool started = false;
        bool connected = false;
        bool gone = false;            // link closed, or never connected and given up on
        std::shared_ptr<Link> link;
        std::vector<Link::SharedFrame> held;   // broadcast before it connected
        std::unique_ptr<asio::posix::stream_descriptor> stderr_stream;
        std::string stderr_partial;
        std::deque<std::string> recent_stderr;
        std::unique_ptr<asio::steady_timer> timer;   // connect deadline, later the reap deadline
        std::array<char, 4096> stderr_buffer;
    };

    void start_next();
    void start_child(Child& child);
    void await_connection(Child& child);
    void agent_ended(Child& child, int status);
    void read_stderr(Child& child);
    void take_stderr(Child& child, std::string_view data);
    void drain_stderr(Child& child);
    void accept_next();
    asio::awaitable<void> authenticate(std::shared_ptr<tcp::socket> peer, AcceptGuard::Pending pending);
    void adopt(tcp::socket socket, long position);
    void give_up(Child& child, const std::string& message);
    void mark_gone(Child& child);
    void check_finished();
    std::string recent_output(const Child& child) const;
    std::string still_running(const Child& child) const;   // "; canopyd (pid 12) still runs: state D, ..."

    asio::io_context& io_;
    ProcessReaper& reaper_;
    auth::Key key_;
    Events events_;
    tcp::acceptor acceptor_;
    AcceptGuard accept_guard_;   // strangers' connections: capped while they authenticate, refusals rate-limited
    std::map<long, std::unique_ptr<Child>> children_;
    std::deque<long> pending_;
    std::size_t window_ = 32;
    std::size_t in_flight_ = 0;
    std::size_t connected_ = 0;
    double connect_timeout_ = 30;
    double heartbeat_timeout_ = 30;
    int clock_rounds_ = clock_rounds_between_hosts;
    InProcessStarter in_process_;
    bool finished_reported_ = false;
    bool listening_ = false;
    bool start_scheduled_ = false;
    Lifetime lifetime_;
};

} // namespace canopy
