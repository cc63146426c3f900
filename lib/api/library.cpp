// libcanopy's process-wide state and the logic behind each C call: pick the launcher's setting at init,
// then send each call to PMIx, to the node's canopyd, or answer it in this process.
#include "api/library.hpp"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

#include "api/launcher_env.hpp"
#include "timing/mark_name.hpp"

extern char** environ;

namespace canopy::api {

namespace {

// A store request that does not wait for keys still gets an answer within this long, or fails.
constexpr auto reply_timeout = std::chrono::seconds(300);
// A waiting request is answered by canopyd when its own timeout ends; this much later we stop waiting.
constexpr auto reply_slack = std::chrono::seconds(30);

const char* env(const char* name)
{
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
}

Result<int> env_int(const char* name, int fallback)
{
    const char* text = env(name);
    if (!text)
        return fallback;
    int value = 0;
    std::string_view view(text);
    auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
    if (error != std::errc() || end != view.data() + view.size() || value < 0)
        return fail(CANOPY_ERR_INVALID, "{}='{}' is not a rank count or index; it is set by canopy, so "
                    "the environment was changed after launch", name, text);
    return value;
}

// A PMIx launcher leaves its server's address in the environment; without it PMIx_Init only fails
// (after about 20 ms), so a process without it is a singleton.
bool pmix_launcher_present()
{
    if (env("PMIX_NAMESPACE"))
        return true;
    for (char** entry = environ; entry && *entry; ++entry)
        if (std::strncmp(*entry, "PMIX_SERVER_URI", 15) == 0)
            return true;
    return false;
}

std::string host_name()
{
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    return host;
}

std::int64_t realtime_ns()
{
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// 0: do not wait; > 0: milliseconds; CANOPY_WAIT_FOREVER: as long as it takes (none).
Result<std::optional<std::chrono::milliseconds>> wait_time(int timeout_ms, const char* what)
{
    if (timeout_ms == CANOPY_WAIT_FOREVER)
        return std::optional<std::chrono::milliseconds>{};
    if (timeout_ms < 0)
        return fail(CANOPY_ERR_INVALID, "{}: timeout {} ms is negative; use 0 (no wait), a number of "
                    "milliseconds or CANOPY_WAIT_FOREVER", what, timeout_ms);
    return std::optional<std::chrono::milliseconds>{std::chrono::milliseconds(timeout_ms)};
}

std::string quoted(std::string_view key) { return "key '" + std::string(key.substr(0, 200)) + "'"; }

Status check_store_key(const char* key, const char* what)
{
    if (!key)
        return fail(CANOPY_ERR_INVALID, "{}: the key is NULL", what);
    return done();
}

std::chrono::steady_clock::time_point after(std::chrono::milliseconds wait)
{
    return std::chrono::steady_clock::now() + wait;
}

std::uint32_t wire_timeout(int timeout_ms)
{
    return timeout_ms == CANOPY_WAIT_FOREVER ? UINT32_MAX : static_cast<std::uint32_t>(timeout_ms);
}

void finalize_at_exit() { (void)Library::instance().finalize(); }

} // namespace

Library& Library::instance()
{
    static Library* library = new Library;
    return *library;
}

Status Library::init()
{
    std::lock_guard lock(mutex_);
    switch (state_.load()) {
    case State::ready: return done();
    case State::failed: return init_failure_;
    case State::finalized:
        return fail(CANOPY_ERR_NOT_INITIALIZED, "canopy_init after canopy_finalize: libcanopy (and PMIx) "
                    "cannot be started twice in one process");
    case State::fresh: break;
    }
    auto started = init_locked();
    if (!started) {
        init_failure_ = started.error();
        state_ = State::failed;
        return started;
    }
    state_ = State::ready;
    std::atexit(finalize_at_exit);
    return done();
}

Status Library::init_locked()
{
    if (env("CANOPY_RANK") && env("CANOPY_SIZE")) {
        // Under canopy everything is in the environment: no PMIx connection until a call needs one.
        auto rank = env_int("CANOPY_RANK", -1);
        auto size = env_int("CANOPY_SIZE", -1);
        auto local_rank = env_int("CANOPY_LOCAL_RANK", 0);
        auto local_size = env_int("CANOPY_LOCAL_SIZE", 1);
        auto node_rank = env_int("CANOPY_NODE_RANK", 0);
        auto num_nodes = env_int("CANOPY_NUM_NODES", 1);
        for (auto* value : {&rank, &size, &local_rank, &local_size, &node_rank, &num_nodes})
            if (!*value)
                return value->error();
        if (*rank >= *size)
            return fail(CANOPY_ERR_INVALID, "CANOPY_RANK={} is not below CANOPY_SIZE={}; the environment was "
                        "changed after launch", *rank, *size);
        info_ = RankInfo{*rank, *size, *local_rank, *local_size, *node_rank, *num_nodes,
                         env("CANOPY_NODE") ? env("CANOPY_NODE") : host_name()};
        who_ = "rank " + std::to_string(info_.rank) + " on " + info_.node_name;
        pmix_ = std::make_unique<PmixSession>(who_);
        if (const char* socket = env("CANOPY_AGENT_SOCKET"))
            agent_ = std::make_unique<AgentClient>(socket, who_);
        mode_ = CANOPY_MODE_CANOPY;
        return done();
    }
    auto foreign = find_foreign_launcher(env);
    if (!foreign)
        return foreign.error();
    if (*foreign)
        return adopt(**foreign);
    if (pmix_launcher_present()) {
        pmix_ = std::make_unique<PmixSession>("this process");
        auto job = pmix_->job_info();
        if (!job)
            return job.error();
        info_ = std::move(*job);
        who_ = "rank " + std::to_string(info_.rank) + " on " + info_.node_name;
        pmix_->set_who(who_);
        mode_ = CANOPY_MODE_PMIX;
        return done();
    }
    if (auto alone = check_no_world(env); !alone)
        return alone;
    info_ = RankInfo{0, 1, 0, 1, 0, 1, host_name()};
    who_ = "singleton on " + info_.node_name;
    mode_ = CANOPY_MODE_SINGLETON;
    return done();
}

Status Library::adopt(const ForeignLaunch& launch)
{
    info_ = launch.info;
    info_.node_name = host_name();
    who_ = "rank " + std::to_string(info_.rank) + " on " + info_.node_name;
    if (launch.own_pmix && pmix_launcher_present()) {
        pmix_ = std::make_unique<PmixSession>(who_);
        if (info_.node_rank < 0 || info_.num_nodes < 0) {
            // Open MPI across nodes names no node index; its PMIx server does (at the cost of connecting now).
            auto job = pmix_->job_info();
            if (!job)
                return job.error();
            info_.node_rank = job->node_rank;
            info_.num_nodes = job->num_nodes;
        }
    }
    mode_ = launch.mode;
    return done();
}

Status Library::finalize()
{
    std::lock_guard lock(mutex_);
    if (state_ != State::ready) {
        state_ = State::finalized;
        return done();
    }
    state_ = State::finalized;
    if (agent_)
        agent_->close();
    if (pmix_)
        return pmix_->close();
    return done();
}

Status Library::ready()
{
    if (state_.load() == State::ready)
        return done();
    if (state_.load() == State::finalized)
        return fail(CANOPY_ERR_NOT_INITIALIZED, "libcanopy was finalized (canopy_finalize); no call works after it");
    return init();
}

Status Library::mark(const char* name, std::optional<std::int64_t> duration_ns)
{
    if (!name || !timing::valid_mark_name(name))
        return fail(CANOPY_ERR_INVALID, "mark name '{}' is not valid: use 1 to {} of A-Z a-z 0-9 _ . : -",
                    name ? std::string_view(name).substr(0, 80) : "(null)", CANOPY_MARK_NAME_MAX);
    if (duration_ns && *duration_ns < 0)
        return fail(CANOPY_ERR_INVALID, "mark '{}': duration {} ns is negative", name, *duration_ns);
    if (auto ok = ready(); !ok)
        return ok;
    if (!agent_)
        return done();  // outside canopy (or a canopy without the socket) a mark has nowhere to go
    wire::MarkRequest request{static_cast<std::uint32_t>(info_.rank), realtime_ns(), duration_ns.value_or(-1), name};
    return agent_->send_only(wire::MarkRequest::op, wire::encode_fields(request));
}

Result<bool> Library::exchange_is_local(const char* what)
{
    if (auto ok = ready(); !ok)
        return ok.error();
    if (pmix_)
        return false;
    if (info_.size == 1)
        return true;
    return fail(CANOPY_ERR_NOT_AVAILABLE, "{}: {} started this job of {} ranks without a PMIx server, so libcanopy "
                "cannot reach the other ranks; use your framework's collectives (torch.distributed, MPI), start it "
                "with a PMIx launcher (mpirun, srun --mpi=pmix) or run under canopy", what, launcher_name(),
                info_.size);
}

std::string Library::launcher_name() const
{
    return mode_ == CANOPY_MODE_PMIX ? "a PMIx launcher" : mode_name(mode_.load());
}

Status Library::check_pmix_key(const char* key, const char* what)
{
    if (!key || !*key)
        return fail(CANOPY_ERR_INVALID, "{}: the key is empty or NULL", what);
    std::string_view view(key);
    if (view.size() > 500)
        return fail(CANOPY_ERR_INVALID, "{}: key '{}...' is {} bytes; PMIx keys are at most 500", what,
                    view.substr(0, 40), view.size());
    if (view.starts_with("pmix") || view.starts_with("canopy."))
        return fail(CANOPY_ERR_INVALID, "{}: key '{}' starts with a reserved prefix (pmix, canopy.); choose "
                    "another name", what, view);
    return done();
}

Status Library::put(const char* key, const void* value, std::size_t len)
{
    if (auto ok = check_pmix_key(key, "canopy_put"); !ok)
        return ok;
    if (!value && len > 0)
        return fail(CANOPY_ERR_INVALID, "canopy_put: key '{}': value is NULL with length {}", key, len);
    auto local = exchange_is_local("canopy_put");
    if (!local)
        return local.error();
    if (*local) {
        std::lock_guard lock(singleton_kv_mutex_);
        singleton_kv_[key] = std::string(static_cast<const char*>(value), len);
        return done();
    }
    return pmix_->put(key, value ? value : "", len);
}

Status Library::commit()
{
    auto local = exchange_is_local("canopy_commit");
    if (!local)
        return local.error();
    return *local ? done() : pmix_->commit();
}

Status Library::fence()
{
    auto local = exchange_is_local("canopy_fence");
    if (!local)
        return local.error();
    return *local ? done() : pmix_->fence(true);
}

Status Library::barrier()
{
    auto local = exchange_is_local("canopy_barrier");
    if (!local)
        return local.error();
    return *local ? done() : pmix_->fence(false);
}

Result<std::string> Library::get(int rank, const char* key)
{
    if (auto ok = ready(); !ok)
        return ok.error();
    if (auto ok = check_pmix_key(key, "canopy_get"); !ok)
        return ok.error();
    if (rank < 0 || rank >= info_.size)
        return fail(CANOPY_ERR_INVALID, "canopy_get: rank {} is outside the job (0 to {})", rank, info_.size - 1);
    auto local = exchange_is_local("canopy_get");
    if (!local)
        return local.error();
    if (*local) {
        std::lock_guard lock(singleton_kv_mutex_);
        auto found = singleton_kv_.find(key);
        if (found == singleton_kv_.end())
            return fail(CANOPY_ERR_NOT_FOUND, "{}: no key '{}' was put", who_, key);
        return found->second;
    }
    return pmix_->get(rank, key);
}

Result<std::vector<std::string>> Library::allgather(const void* data, std::size_t len)
{
    if (!data && len > 0)
        return fail(CANOPY_ERR_INVALID, "canopy_allgather: data is NULL with length {}", len);
    auto local = exchange_is_local("canopy_allgather");
    if (!local)
        return local.error();
    std::string mine(data ? static_cast<const char*>(data) : "", len);
    if (*local)
        return std::vector<std::string>{mine};
    // Every rank calls allgather the same number of times, so the round number names the same exchange
    // everywhere; a fresh key per round keeps a fast rank's next round apart from a slow rank's reads.
    std::string key = "canopy.allgather." + std::to_string(allgather_round_++);
    if (auto ok = pmix_->put(key, mine.data(), mine.size()); !ok)
        return ok.error();
    if (auto ok = pmix_->commit(); !ok)
        return ok.error();
    if (auto ok = pmix_->fence(true); !ok)
        return ok.error();
    std::vector<std::string> all;
    all.reserve(static_cast<std::size_t>(info_.size));
    for (int rank = 0; rank < info_.size; ++rank) {
        if (rank == info_.rank) {
            all.push_back(mine);
            continue;
        }
        auto value = pmix_->get(rank, key);
        if (!value)
            return value.error();
        all.push_back(std::move(*value));
    }
    return all;
}

Result<AgentClient*> Library::store_agent(const char* what)
{
    if (auto ok = ready(); !ok)
        return ok.error();
    if (mode_ == CANOPY_MODE_CANOPY && !agent_)
        return fail(CANOPY_ERR_NOT_AVAILABLE, "{}: the canopy store is not available: CANOPY_AGENT_SOCKET is "
                    "not set for {} (a canopyd without the store, or the variable was removed)", what, who_);
    if (mode_ != CANOPY_MODE_CANOPY && info_.size > 1)
        return fail(CANOPY_ERR_NOT_AVAILABLE, "{}: the canopy store is not available outside canopy (this "
                    "process was started by {}); use a TCPStore or run under canopy", what, launcher_name());
    return agent_.get();  // null in a job of one rank: the local store answers
}

template <typename Request>
Result<typename Request::Reply> Library::store_call(const Request& request, const std::string& what, int timeout_ms)
{
    using Reply = typename Request::Reply;
    AgentClient::Deadline deadline = std::chrono::steady_clock::now() + reply_timeout;
    if (timeout_ms == CANOPY_WAIT_FOREVER)
        deadline.reset();
    else if (timeout_ms > 0)
        deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms) + reply_slack;
    auto reply = agent_->call(Request::op, wire::encode_fields(request), deadline);
    if (!reply)
        return reply.error();
    switch (static_cast<wire::RankSocketAnswer>(reply->code)) {
    case wire::RankSocketAnswer::ok: {
        auto answer = wire::decode_fields<Reply>(reply->body, Reply::name);
        if (!answer)
            return fail(CANOPY_ERR_DAEMON, "{}: canopyd's answer for {} is malformed: {}; the daemon and libcanopy "
                        "may be from different canopy versions", who_, what, answer.error().message);
        return answer;
    }
    case wire::RankSocketAnswer::not_found:
        return fail(CANOPY_ERR_NOT_FOUND, "{}: {} is not in the job's store", who_, what);
    case wire::RankSocketAnswer::timeout:
        return fail(CANOPY_ERR_TIMEOUT, "{}: {} was not set within {} ms", who_, what, timeout_ms);
    case wire::RankSocketAnswer::error: {
        auto refusal = wire::decode_fields<wire::StoreFailure>(reply->body, wire::StoreFailure::name);
        return fail(CANOPY_ERR_DAEMON, "{}: canopyd refused the store request for {}: {}", who_, what,
                    refusal ? refusal->message : "(no reason given)");
    }
    }
    return fail(CANOPY_ERR_DAEMON, "{}: canopyd answered {} with unknown status {}; the daemon and libcanopy may "
                "be from different canopy versions", who_, what, reply->code);
}


Status Library::store_set(const char* key, const void* value, std::size_t len)
{
    if (auto ok = check_store_key(key, "canopy_store_set"); !ok)
        return ok;
    if (!value && len > 0)
        return fail(CANOPY_ERR_INVALID, "canopy_store_set: {}: value is NULL with length {}", quoted(key), len);
    auto agent = store_agent("canopy_store_set");
    if (!agent)
        return agent.error();
    std::string_view bytes(value ? static_cast<const char*>(value) : "", len);
    if (!*agent) {
        local_store_.set(key, std::string(bytes));
        return done();
    }
    auto reply = store_call(wire::StoreSet{key, std::string(bytes)}, quoted(key), 0);
    if (!reply)
        return reply.error();
    return done();
}

Result<std::string> Library::store_get(const char* key, int timeout_ms)
{
    if (auto ok = check_store_key(key, "canopy_store_get"); !ok)
        return ok.error();
    auto wait = wait_time(timeout_ms, "canopy_store_get");
    if (!wait)
        return wait.error();
    auto agent = store_agent("canopy_store_get");
    if (!agent)
        return agent.error();
    if (!*agent) {
        LocalStore::Deadline deadline;
        if (*wait)
            deadline = after(**wait);
        auto value = local_store_.get(key, deadline);
        if (!value && timeout_ms == 0)
            return fail(CANOPY_ERR_NOT_FOUND, "{}: {} is not in the store", who_, quoted(key));
        if (!value)
            return fail(CANOPY_ERR_TIMEOUT, "{}: {} was not set within {} ms", who_, quoted(key), timeout_ms);
        return value;
    }
    auto reply = store_call(wire::StoreGet{wire_timeout(timeout_ms), key}, quoted(key), timeout_ms);
    if (!reply)
        return reply.error();
    return std::move(reply->value);
}

Result<std::int64_t> Library::store_add(const char* key, std::int64_t delta)
{
    if (auto ok = check_store_key(key, "canopy_store_add"); !ok)
        return ok.error();
    auto agent = store_agent("canopy_store_add");
    if (!agent)
        return agent.error();
    if (!*agent)
        return local_store_.add(key, delta);
    auto reply = store_call(wire::StoreAdd{delta, key}, quoted(key), 0);
    if (!reply)
        return reply.error();
    return reply->value;
}

Result<std::string> Library::store_compare_set(const char* key, const void* expected, std::size_t expected_len,
                                                const void* desired, std::size_t desired_len)
{
    if (auto ok = check_store_key(key, "canopy_store_compare_set"); !ok)
        return ok.error();
    if ((!expected && expected_len > 0) || (!desired && desired_len > 0))
        return fail(CANOPY_ERR_INVALID, "canopy_store_compare_set: {}: a value is NULL with a length", quoted(key));
    auto agent = store_agent("canopy_store_compare_set");
    if (!agent)
        return agent.error();
    std::string_view want(expected ? static_cast<const char*>(expected) : "", expected_len);
    std::string_view put(desired ? static_cast<const char*>(desired) : "", desired_len);
    if (!*agent)
        return local_store_.compare_set(key, std::string(want), std::string(put));
    auto reply = store_call(wire::StoreCompareSet{key, std::string(want), std::string(put)}, quoted(key), 0);
    if (!reply)
        return reply.error();
    return std::move(reply->value);
}

Result<std::vector<std::string>> Library::key_list(const char* const* keys, std::size_t n, const char* what)
{
    if (!keys && n > 0)
        return fail(CANOPY_ERR_INVALID, "{}: the key list is NULL with {} keys", what, n);
    std::vector<std::string> list;
    list.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (!keys[i])
            return fail(CANOPY_ERR_INVALID, "{}: key {} of the list is NULL", what, i);
        list.emplace_back(keys[i]);
    }
    return list;
}

Result<bool> Library::store_check(const char* const* keys, std::size_t n)
{
    auto list = key_list(keys, n, "canopy_store_check");
    if (!list)
        return list.error();
    auto agent = store_agent("canopy_store_check");
    if (!agent)
        return agent.error();
    if (!*agent)
        return local_store_.check(*list);
    auto reply = store_call(wire::StoreCheck{*list}, "a key list", 0);
    if (!reply)
        return reply.error();
    return reply->value;
}

Result<bool> Library::store_delete(const char* key)
{
    if (auto ok = check_store_key(key, "canopy_store_delete"); !ok)
        return ok.error();
    auto agent = store_agent("canopy_store_delete");
    if (!agent)
        return agent.error();
    if (!*agent)
        return local_store_.erase(key);
    auto reply = store_call(wire::StoreDelete{key}, quoted(key), 0);
    if (!reply)
        return reply.error();
    return reply->value;
}

Result<std::int64_t> Library::store_num_keys()
{
    auto agent = store_agent("canopy_store_num_keys");
    if (!agent)
        return agent.error();
    if (!*agent)
        return local_store_.size();
    auto reply = store_call(wire::StoreNumKeys{}, "the key count", 0);
    if (!reply)
        return reply.error();
    return reply->value;
}

Status Library::store_wait(const char* const* keys, std::size_t n, int timeout_ms)
{
    auto list = key_list(keys, n, "canopy_store_wait");
    if (!list)
        return list.error();
    auto wait = wait_time(timeout_ms, "canopy_store_wait");
    if (!wait)
        return wait.error();
    auto agent = store_agent("canopy_store_wait");
    if (!agent)
        return agent.error();
    std::string what = list->size() == 1 ? quoted(list->front())
                                         : std::to_string(list->size()) + " keys (first " +
                                               quoted(list->empty() ? "" : list->front()) + ")";
    if (!*agent) {
        LocalStore::Deadline deadline;
        if (*wait)
            deadline = after(**wait);
        if (!local_store_.wait(*list, deadline))
            return fail(CANOPY_ERR_TIMEOUT, "{}: {} not set within {} ms", who_, what, timeout_ms);
        return done();
    }
    auto reply = store_call(wire::StoreWait{wire_timeout(timeout_ms), *list}, what, timeout_ms);
    if (!reply)
        return reply.error();
    return done();
}

} // namespace canopy::api
