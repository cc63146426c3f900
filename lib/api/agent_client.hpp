// The rank's one connection to its canopyd (CANOPY_AGENT_SOCKET): opened on first use, requests pipelined
// from any thread, each answered by id.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "api/api_error.hpp"
#include "wire/rank_socket.hpp"

namespace canopy::api {

class AgentClient {
public:
    using Deadline = std::optional<std::chrono::steady_clock::time_point>;

    // `who` ("rank 3 on sim0001") goes into error messages.
    AgentClient(std::string socket_path, std::string who);
    ~AgentClient();
    AgentClient(const AgentClient&) = delete;
    AgentClient& operator=(const AgentClient&) = delete;

    // Sends a request that has no reply (a mark).
    Status send_only(wire::RankSocketOp op, std::span<const std::uint8_t> body);
    // Sends one request and waits for its reply until `deadline` (none: as long as the connection lives).
    Result<wire::RankFrame> call(wire::RankSocketOp op, std::span<const std::uint8_t> body, Deadline deadline);
    void close();

private:
    // Under state_mutex_: a connected descriptor for this process (reconnects after fork or a failure).
    Result<int> connected_fd_locked();
    Status send_all(int fd, std::span<const std::uint8_t> frame);
    void break_connection_locked(std::uint64_t generation, Error failure);
    // Reads what is available (up to `deadline`) and files complete replies; called by one thread at a time.
    void read_replies(std::unique_lock<std::mutex>& lock, int fd, std::uint64_t generation, Deadline deadline);

    const std::string path_;
    const std::string who_;

    std::mutex write_mutex_;  // one frame at a time on the socket
    std::mutex state_mutex_;  // everything below
    std::condition_variable replies_cv_;
    int fd_ = -1;
    pid_t pid_ = 0;              // the process that opened fd_; a forked child opens its own
    std::uint64_t generation_ = 0;  // bumped on every (re)connect
    std::optional<Error> broken_;  // why the current connection failed
    std::uint64_t next_id_ = 1;
    std::set<std::uint64_t> waiting_;
    std::map<std::uint64_t, wire::RankFrame> arrived_;
    bool reading_ = false;
    std::vector<std::uint8_t> inbox_;
};

} // namespace canopy::api
