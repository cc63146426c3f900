// libcanopy's process-wide state: which launcher started us, where this rank sits, and the PMIx, daemon
// and in-process back ends each call goes to.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/agent_client.hpp"
#include "api/api_error.hpp"
#include "api/launcher_env.hpp"
#include "api/local_store.hpp"
#include "api/pmix_session.hpp"

namespace canopy::api {

class Library {
public:
    // The one instance; never destroyed, so threads still calling at exit find it alive.
    static Library& instance();

    Status init();
    Status finalize();
    int mode() const { return mode_.load(); }
    // Valid once init() succeeded.
    const RankInfo& info() const { return info_; }

    // duration_ns: none for a plain mark.
    Status mark(const char* name, std::optional<std::int64_t> duration_ns);

    Status put(const char* key, const void* value, std::size_t len);
    Status commit();
    Status fence();
    Result<std::string> get(int rank, const char* key);
    Status barrier();
    Result<std::vector<std::string>> allgather(const void* data, std::size_t len);

    Status store_set(const char* key, const void* value, std::size_t len);
    Result<std::string> store_get(const char* key, int timeout_ms);
    Result<std::int64_t> store_add(const char* key, std::int64_t delta);
    Result<std::string> store_compare_set(const char* key, const void* expected, std::size_t expected_len,
                                           const void* desired, std::size_t desired_len);
    Result<bool> store_check(const char* const* keys, std::size_t n);
    Result<bool> store_delete(const char* key);
    Result<std::int64_t> store_num_keys();
    Status store_wait(const char* const* keys, std::size_t n, int timeout_ms);

private:
    Library() = default;
    Status ready();  // init() on first use; NOT_INITIALIZED after finalize
    Status init_locked();
    // Takes the rank information another launcher left in the environment.
    Status adopt(const ForeignLaunch& launch);
    // How put, fence and get reach the other ranks: false through PMIx, true when this process is the whole
    // job and answers itself; NOT_AVAILABLE when there are other ranks but no PMIx server to reach them.
    Result<bool> exchange_is_local(const char* what);
    std::string launcher_name() const;  // "torchrun", "hydra", ...
    Status check_pmix_key(const char* key, const char* what);
    // The daemon connection, or why the store is not available here.
    Result<AgentClient*> store_agent(const char* what);
    // Sends one store request to the node's canopyd and reads its reply; `what` names the key(s) in errors.
    template <typename Request>
    Result<typename Request::Reply> store_call(const Request& request, const std::string& what, int timeout_ms);
    Result<std::vector<std::string>> key_list(const char* const* keys, std::size_t n, const char* what);

    enum class State { fresh, ready, failed, finalized };
    std::mutex mutex_;
    std::atomic<State> state_{State::fresh};
    Error init_failure_;
    std::atomic<int> mode_{CANOPY_MODE_NONE};
    RankInfo info_;
    std::string who_;
    std::unique_ptr<PmixSession> pmix_;
    std::unique_ptr<AgentClient> agent_;  // canopy mode with CANOPY_AGENT_SOCKET only
    LocalStore local_store_;              // a job of one rank
    std::mutex singleton_kv_mutex_;
    std::map<std::string, std::string> singleton_kv_;  // canopy_put/get in a job of one rank
    std::atomic<std::uint64_t> allgather_round_{0};
};

} // namespace canopy::api
