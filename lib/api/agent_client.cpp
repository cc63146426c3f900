// The rank's connection to its canopyd: lazy connect, pipelined requests, one reader at a time.
#include "api/agent_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace canopy::api {

AgentClient::AgentClient(std::string socket_path, std::string who)
    : path_(std::move(socket_path)), who_(std::move(who))
{
}

AgentClient::~AgentClient() { close(); }

void AgentClient::close()
{
    std::lock_guard lock(state_mutex_);
    if (fd_ >= 0 && pid_ == getpid())
        ::close(fd_);
    fd_ = -1;
}

Result<int> AgentClient::connected_fd_locked()
{
    if (fd_ >= 0 && pid_ != getpid()) {
        // A forked child shares the parent's socket; replies would go to whoever reads first.
        ::close(fd_);
        fd_ = -1;
        waiting_.clear();
        arrived_.clear();
        reading_ = false;
        inbox_.clear();
        broken_.reset();
    }
    if (fd_ >= 0 && broken_ && waiting_.empty()) {
        ::close(fd_);
        fd_ = -1;
        broken_.reset();
        inbox_.clear();
    }
    if (fd_ >= 0)
        return broken_ ? Result<int>(*broken_) : Result<int>(fd_);

    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path_.size() >= sizeof(address.sun_path))
        return fail(CANOPY_ERR_DAEMON, "CANOPY_AGENT_SOCKET={} is longer than a unix socket path may be ({} bytes)",
                    path_, sizeof(address.sun_path) - 1);
    std::memcpy(address.sun_path, path_.data(), path_.size());
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(CANOPY_ERR_DAEMON, "{}: cannot create a unix socket: {}", who_, std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        int error = errno;
        ::close(fd);
        return fail(CANOPY_ERR_DAEMON, "{}: cannot connect to canopyd at {} (CANOPY_AGENT_SOCKET): {}; "
                    "the node's daemon has gone, or the job is ending", who_, path_, std::strerror(error));
    }
    fd_ = fd;
    pid_ = getpid();
    ++generation_;
    return fd_;
}

Status AgentClient::send_all(int fd, std::span<const std::uint8_t> frame)
{
    std::lock_guard lock(write_mutex_);
    while (!frame.empty()) {
        ssize_t sent = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR)
                continue;
            return fail(CANOPY_ERR_DAEMON, "{}: lost the connection to canopyd at {}: {}; the node's daemon "
                        "has gone, or the job is ending", who_, path_, std::strerror(errno));
        }
        frame = frame.subspan(static_cast<std::size_t>(sent));
    }
    return done();
}

void AgentClient::break_connection_locked(std::uint64_t generation, Error failure)
{
    if (generation == generation_ && !broken_)
        broken_ = std::move(failure);
    replies_cv_.notify_all();
}

Status AgentClient::send_only(wire::RankSocketOp op, std::span<const std::uint8_t> body)
{
    int fd;
    std::uint64_t generation;
    {
        std::lock_guard lock(state_mutex_);
        auto connected = connected_fd_locked();
        if (!connected)
            return connected.error();
        fd = *connected;
        generation = generation_;
    }
    auto sent = send_all(fd, wire::encode_rank_frame(static_cast<std::uint8_t>(op), 0, body));
    if (!sent) {
        std::lock_guard lock(state_mutex_);
        break_connection_locked(generation, sent.error());
    }
    return sent;
}

void AgentClient::read_replies(std::unique_lock<std::mutex>& lock, int fd, std::uint64_t generation, Deadline deadline)
{
    reading_ = true;
    lock.unlock();
    int timeout_ms = -1;
    if (deadline) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
        timeout_ms = static_cast<int>(std::max<std::int64_t>(0, std::min<std::int64_t>(left.count(), 1 << 30)));
    }
    pollfd entry{fd, POLLIN, 0};
    char chunk[65536];
    ssize_t got = 0;
    std::optional<Error> failure;
    int ready = ::poll(&entry, 1, timeout_ms);
    if (ready > 0) {
        got = ::recv(fd, chunk, sizeof(chunk), 0);
        if (got == 0)
            failure = fail(CANOPY_ERR_DAEMON, "{}: canopyd at {} closed the connection; the node's daemon "
                           "has gone, or the job is ending", who_, path_);
        else if (got < 0 && errno != EINTR && errno != EAGAIN)
            failure = fail(CANOPY_ERR_DAEMON, "{}: reading from canopyd at {}: {}", who_, path_,
                           std::strerror(errno));
    } else if (ready < 0 && errno != EINTR) {
        failure = fail(CANOPY_ERR_DAEMON, "{}: waiting for canopyd at {}: {}", who_, path_, std::strerror(errno));
    }
    lock.lock();
    reading_ = false;
    if (generation != generation_) {
        replies_cv_.notify_all();
        return;
    }
    if (got > 0) {
        inbox_.insert(inbox_.end(), chunk, chunk + got);
        std::size_t used = 0;
        while (true) {
            wire::RankFrame reply;
            auto parsed = wire::next_rank_frame(std::span(inbox_).subspan(used), reply);
            if (!parsed) {
                failure = fail(CANOPY_ERR_DAEMON, "{}: canopyd at {} sent a malformed reply: {}", who_, path_,
                               parsed.error().message);
                break;
            }
            if (!*parsed)
                break;
            used += **parsed;
            // A reply nobody waits for any more (its caller timed out) is dropped.
            if (waiting_.count(reply.id))
                arrived_[reply.id] = std::move(reply);
        }
        inbox_.erase(inbox_.begin(), inbox_.begin() + static_cast<std::ptrdiff_t>(used));
    }
    if (failure)
        break_connection_locked(generation, std::move(*failure));
    replies_cv_.notify_all();
}

Result<wire::RankFrame> AgentClient::call(wire::RankSocketOp op, std::span<const std::uint8_t> body,
                                          Deadline deadline)
{
    std::unique_lock lock(state_mutex_);
    auto connected = connected_fd_locked();
    if (!connected)
        return connected.error();
    int fd = *connected;
    std::uint64_t generation = generation_;
    std::uint64_t id = next_id_++;
    waiting_.insert(id);
    lock.unlock();

    auto sent = send_all(fd, wire::encode_rank_frame(static_cast<std::uint8_t>(op), id, body));

    lock.lock();
    if (!sent)
        break_connection_locked(generation, sent.error());
    while (true) {
        if (auto found = arrived_.find(id); found != arrived_.end()) {
            wire::RankFrame reply = std::move(found->second);
            arrived_.erase(found);
            waiting_.erase(id);
            return reply;
        }
        if (broken_ && generation == generation_) {
            waiting_.erase(id);
            return *broken_;
        }
        if (deadline && std::chrono::steady_clock::now() >= *deadline) {
            waiting_.erase(id);
            return fail(CANOPY_ERR_TIMEOUT, "{}: canopyd at {} did not answer in time; the tree may be "
                        "overloaded or a daemon above this node is stuck", who_, path_);
        }
        if (!reading_)
            read_replies(lock, fd, generation, deadline);
        else if (deadline)
            replies_cv_.wait_until(lock, *deadline);
        else
            replies_cv_.wait(lock);
    }
}

} // namespace canopy::api
