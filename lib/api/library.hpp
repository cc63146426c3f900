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
#include "api/failure.hpp"
#include "api/launcher_env.hpp"
#include "api/local_store.hpp"
#include "api/pmix_session.hpp"

namespace canopy::api {

class Library {
public:
    // The one instance; never destroyed, so threads still calling at exit find it alive.
    static Library& instance();

    Checked init();
    Checked finalize();
    int mode() const { return mode_.load(); }
    // Valid once init() succeeded.
    const RankInfo& info() const { return info_; }

    // duration_ns: none for a plain mark.
    Checked mark(const char* name, std::optional<std::int64_t> duration_ns);

    Checked put(const char* key, const void* value, std::size_t len);
    Checked commit();
    Checked fence();
    Outcome<std::string> get(int rank, const char* key);
    Checked barrier();
    Outcome<std::vector<std::string>> allgather(const void* data, std::size_t len);

    Checked store_set(const char* key, const void* value, std::size_t len);
    Outcome<std::string> store_get(const char* key, int timeout_ms);
    Outcome<std::int64_t> store_add(const char* key, std::int64_t delta);
    Outcome<std::string> store_compare_set(const char* key, const void* expected, std::size_t expected_len,
                                           const void* desired, std::size_t desired_len);
    Outcome<bool> store_check(const char* const* keys, std::size_t n);
    Outcome<bool> store_delete(const char* key);
    Outcome<std::int64_t> store_num_keys();
    Checked store_wait(const char* const* keys, std::size_t n, int timeout_ms);

private:
    Library() = default;
    Checked ready();  // init() on first use; NOT_INITIALIZED after finalize
    Checked init_locked();
    // Takes the rank information another launcher left in the environment.
    Checked adopt(const ForeignLaunch& launch);
    // How put, fence and get reach the other ranks: false through PMIx, true when this process is the whole
    // job and answers itself; NOT_AVAILABLE when there are other ranks but no PMIx server to reach them.
    Outcome<bool> exchange_is_local(const char* what);
    std::string launcher_name() const;  // "torchrun", "hydra", ...
    Checked check_pmix_key(const char* key, const char* what);
    // The daemon connection, or why the store is not available here.
    Outcome<AgentClient*> store_agent(const char* what);
    Outcome<agent::Reply> store_call(agent::Op op, const std::string& payload, const std::string& what,
                                     int timeout_ms);
    Outcome<std::vector<std::string>> key_list(const char* const* keys, std::size_t n, const char* what);

    enum class State { fresh, ready, failed, finalized };
    std::mutex mutex_;
    std::atomic<State> state_{State::fresh};
    Failure init_failure_;
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
