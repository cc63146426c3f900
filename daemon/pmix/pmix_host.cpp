// PMIx server host: PMIx's upcalls copy their arguments and post to the daemon's io_context; answers go back
// through PMIx's callback functions (STYLE habit 6), which PMIx thread-shifts onto its own progress thread.
#include "pmix/pmix_host.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <pmix.h>
#include <pmix_server.h>
#include <spdlog/logger.h>

#include "pmix/pending_requests.hpp"
#include "util/log.hpp"

namespace canopy {

// Set when PMIx_server_finalize was skipped: PMIx's progress thread still runs, so the process must not run
// static destructors under it.
std::atomic<bool> g_server_abandoned{false};


namespace asio = boost::asio;

namespace {

// canopyd's own "pmix" logger when loaded as canopyd-pmix.so (this copy of the logging setup is not configured).
spdlog::logger* g_log = nullptr;

spdlog::logger& pmix_log()
{
    return g_log ? *g_log : area_logger("pmix");
}

std::string pmix_error(pmix_status_t rc)
{
    return fmt::format("{} ({})", PMIx_Error_string(rc), rc);
}

// What a rank has done as far as PMIx is concerned; written on PMIx's thread, read on the io thread.
struct RankPmixState {
    bool connected = false;
    bool finalized = false;
    bool aborted = false;
    bool exited = false;
    bool reported = false;   // tree.abort already called for it
};

int exit_status_code(int wait_status)
{
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return 1;
}

// "OpenPMIx 4.2.2rc2 (PMIx Standard: ...)" -> "4.2.2rc2", what PMIx_server_setup_fork puts in PMIX_VERSION.
std::string library_version()
{
    std::string_view text = PMIx_Get_version();
    auto start = text.find(' ');
    text = start == std::string_view::npos ? text : text.substr(start + 1);
    return std::string(text.substr(0, text.find(' ')));
}

std::string describe_exit(int wait_status)
{
    if (WIFSIGNALED(wait_status))
        return fmt::format("killed by signal {}", WTERMSIG(wait_status));
    return fmt::format("exit code {}", exit_status_code(wait_status));
}

} // namespace

// The host behind the PmixHost interface: PMIx's server state is global, so at most one per process.
class PmixServerHost final : public PmixHost {
public:
    struct State;   // shared with PMIx's callbacks
    explicit PmixServerHost(std::shared_ptr<State> state);
    ~PmixServerHost() override;
    Result<std::vector<std::string>> prepare_rank(long rank, uid_t uid, gid_t gid) override;
    void serve_direct_modex(long rank, std::function<void(Status, Bytes)> done) override;
    void rank_exited(long rank, int wait_status) override;
    std::size_t pending_requests() const override;

private:
    std::shared_ptr<State> state_;
};

struct PmixServerHost::State : std::enable_shared_from_this<PmixServerHost::State> {
    State(asio::io_context& io_context, PmixJob pmix_job, RankLayout rank_layout, PmixTree pmix_tree)
        : io(io_context), job(std::move(pmix_job)), layout(std::move(rank_layout)), tree(std::move(pmix_tree))
    {
    }

    asio::io_context& io;
    PmixJob job;
    RankLayout layout;
    PmixTree tree;
    bool closed = false;   // io thread only: set by ~PmixHost; posted work then does nothing
    bool abort_reported = false;   // io thread only: the daemon is tearing the job down; later losses follow from it

    PendingRequests pending{io, PMIX_ERR_TIMEOUT};   // io thread only
    // Fence contributions held back after a local participant died, until its loss is reported (io thread only).
    std::vector<std::function<void()>> after_loss;

    mutable std::mutex ranks_mutex;   // guards ranks; held only for a few assignments
    std::map<long, RankPmixState> ranks;
    std::set<long> exited_unconnected;   // io thread only

    std::string rank_label(long rank) const
    {
        return fmt::format("rank {} on {}", rank, job.hosts[static_cast<std::size_t>(job.node_index)]);
    }

    // The tree's answer for request `id`, whenever and however often it comes.
    std::function<void(Status, Bytes)> tree_reply(std::uint64_t id, const char* what)
    {
        return [weak = weak_from_this(), id, what](Status status, Bytes bytes) {
            auto self = weak.lock();
            if (!self || self->closed)
                return;
            if (!status.ok())
                pmix_log().warn("pmix: {} failed: {}", what, status.error().message);
            self->pending.complete(id, status.ok() ? PMIX_SUCCESS : PMIX_ERROR, std::move(bytes));
        };
    }

    // The rank can no longer take part in collectives: fail what waits on it, tell its peers and the daemon.
    void report_lost(long rank, int code, const std::string& message)
    {
        pending.fail_waiting_on(rank, PMIX_ERR_PROC_TERM_WO_SYNC);
        if (abort_reported) {
            pmix_log().info("pmix: {} (job already being torn down)", message);
            return;
        }
        pmix_log().info("pmix: {}", message);   // the launcher prints it for the user
        notify_local_peers(rank, code);
        report_abort(rank, code, message);
    }

    // The first abort reaches the daemon; ranks dying from the teardown it causes are not new news.
    void report_abort(long rank, int status, const std::string& message)
    {
        if (abort_reported)
            return;
        abort_reported = true;
        if (tree.abort)
            tree.abort(rank, status, message);
        release_held_contributions();
    }

    // The loss report has gone up the same link first, so the launcher names the rank that died rather than a
    // rank on another node that failed because the fence did.
    void release_held_contributions()
    {
        auto held = std::move(after_loss);
        after_loss.clear();
        for (auto& send : held)
            send();
    }

    void notify_local_peers(long rank, int code)
    {
        struct Notice {
            pmix_proc_t affected;
            pmix_info_t* info = nullptr;
            std::size_t ninfo = 2;
        };
        auto* notice = new Notice;
        PMIX_LOAD_PROCID(&notice->affected, job.nspace.c_str(), static_cast<pmix_rank_t>(rank));
        PMIX_INFO_CREATE(notice->info, notice->ninfo);
        PMIx_Info_load(&notice->info[0], PMIX_EVENT_AFFECTED_PROC, &notice->affected, PMIX_PROC);
        PMIx_Info_load(&notice->info[1], PMIX_EXIT_CODE, &code, PMIX_INT);
        pmix_status_t rc = PMIx_Notify_event(
            PMIX_ERR_PROC_TERM_WO_SYNC, &notice->affected, PMIX_RANGE_LOCAL, notice->info, notice->ninfo,
            [](pmix_status_t, void* cbdata) {
                auto* n = static_cast<Notice*>(cbdata);
                PMIX_INFO_FREE(n->info, n->ninfo);
                delete n;
            },
            notice);
        if (rc != PMIX_SUCCESS) {
            if (rc != PMIX_OPERATION_SUCCEEDED)
                pmix_log().warn("pmix: cannot notify the ranks on {} that rank {} is gone: {}",
                                job.hosts[static_cast<std::size_t>(job.node_index)], rank, pmix_error(rc));
            PMIX_INFO_FREE(notice->info, notice->ninfo);
            delete notice;
        }
    }
};

namespace {

// PMIx keeps one server per process and its upcalls carry no host pointer, so the live host is global.
std::mutex g_host_mutex;
std::shared_ptr<PmixServerHost::State> g_host;

std::shared_ptr<PmixServerHost::State> current_host()
{
    std::lock_guard lock(g_host_mutex);
    return g_host;
}

// Runs `fn` on PMIx's progress thread. PMIx 4.2.2 builds the reply inside its op and lookup callbacks without
// thread-shifting, so answering from our thread races with PMIx tearing down a client that just died (seen as a
// crash in PMIx_server_finalize). PMIx_server_setup_local_support with no info does nothing but thread-shift and
// call back, which makes it a hop onto PMIx's thread.
void run_on_pmix_thread(const std::string& nspace, std::function<void()> fn)
{
    auto* holder = new std::function<void()>(std::move(fn));
    pmix_status_t rc = PMIx_server_setup_local_support(
        nspace.c_str(), nullptr, 0,
        [](pmix_status_t, void* cbdata) {
            std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(cbdata));
            (*f)();
        },
        holder);
    if (rc != PMIX_SUCCESS) {
        // Not expected; answering from here is still better than leaving the client waiting.
        pmix_log().warn("pmix: cannot hop onto PMIx's thread ({}); answering from the daemon's thread",
                        pmix_error(rc));
        std::unique_ptr<std::function<void()>> f(holder);
        (*f)();
    }
}

void answer_op(const PmixServerHost::State& host, pmix_op_cbfunc_t cbfunc, void* cbdata, pmix_status_t status)
{
    if (cbfunc)
        run_on_pmix_thread(host.job.nspace, [cbfunc, cbdata, status] { cbfunc(status, cbdata); });
}

// Runs `work` on the io thread unless the host is being torn down (then PMIx_server_finalize cleans up).
template <typename Work>
void post_to_host(const std::shared_ptr<PmixServerHost::State>& host, Work work)
{
    asio::post(host->io, [host, work = std::move(work)]() mutable {
        if (!host->closed)
            work(*host);
    });
}

bool our_nspace(const PmixServerHost::State& host, const char* nspace)
{
    return PMIX_CHECK_NSPACE(nspace, host.job.nspace.c_str());
}

int timeout_from(const pmix_info_t info[], std::size_t ninfo)
{
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_TIMEOUT)) {
            int seconds = 0;
            pmix_status_t rc;
            PMIX_VALUE_GET_NUMBER(rc, &info[i].value, seconds, int);
            if (rc == PMIX_SUCCESS && seconds > 0)
                return seconds;
        }
    }
    return 0;
}

// Bytes handed to PMIx's modex callback stay alive until PMIx calls the release function. The answer hops onto
// PMIx's thread like every other answer, so no PMIx callback ever runs on ours.
void answer_modex(const std::string& nspace, pmix_modex_cbfunc_t cbfunc, void* cbdata, pmix_status_t status,
                  Bytes bytes)
{
    if (!cbfunc)
        return;
    auto* held = status == PMIX_SUCCESS && !bytes.empty() ? new Bytes(std::move(bytes)) : nullptr;
    run_on_pmix_thread(nspace, [cbfunc, cbdata, status, held] {
        if (!held) {
            cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
            return;
        }
        cbfunc(status, reinterpret_cast<const char*>(held->data()), held->size(), cbdata,
               [](void* p) { delete static_cast<Bytes*>(p); }, held);
    });
}

// ---- PMIx upcalls: run on PMIx's progress thread; copy, post, return ----

pmix_status_t on_client_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host)
        return PMIX_ERR_NOT_SUPPORTED;
    long rank = static_cast<long>(proc->rank);
    {
        std::lock_guard lock(host->ranks_mutex);
        host->ranks[rank].connected = true;
    }
    // 4.2.2 passes no callback here; if a later version does, answer it from our loop.
    post_to_host(host, [rank, cbfunc, cbdata](PmixServerHost::State& h) {
        pmix_log().debug("pmix: {} connected", h.rank_label(rank));
        // A registered rank that already exited without connecting would hang every whole-job fence.
        if (!h.exited_unconnected.empty()) {
            long gone = *h.exited_unconnected.begin();
            h.exited_unconnected.clear();
            h.report_lost(gone, 1,
                          fmt::format("{} exited without connecting to PMIx while other ranks use it",
                                      h.rank_label(gone)));
        }
        answer_op(h, cbfunc, cbdata, PMIX_SUCCESS);
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_client_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host)
        return PMIX_ERR_NOT_SUPPORTED;
    long rank = static_cast<long>(proc->rank);
    {
        std::lock_guard lock(host->ranks_mutex);
        host->ranks[rank].finalized = true;
    }
    // Returning SUCCESS obliges us to call cbfunc, or the client hangs in PMIx_Finalize.
    post_to_host(host, [rank, cbfunc, cbdata](PmixServerHost::State& h) {
        pmix_log().debug("pmix: {} finalized", h.rank_label(rank));
        answer_op(h, cbfunc, cbdata, PMIX_SUCCESS);
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], std::size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host)
        return PMIX_ERR_NOT_SUPPORTED;
    long rank = static_cast<long>(proc->rank);
    std::string message = msg ? msg : "";
    {
        std::lock_guard lock(host->ranks_mutex);
        host->ranks[rank].aborted = true;
        host->ranks[rank].reported = true;
    }
    post_to_host(host, [host, rank, status, message = std::move(message), cbfunc, cbdata](PmixServerHost::State& h) {
        pmix_log().info("pmix: {} called PMIx_Abort with status {}: {}", h.rank_label(rank), status, message);
        // Release the client first and only then start the teardown: killing ranks while PMIx still holds the
        // abort request crashes PMIx 4.2.2's progress thread (seen with MALLOC_PERTURB_).
        run_on_pmix_thread(h.job.nspace, [host, rank, status, message, cbfunc, cbdata] {
            if (cbfunc)
                cbfunc(PMIX_SUCCESS, cbdata);
            post_to_host(host, [rank, status, message](PmixServerHost::State& state) {
                std::string line = fmt::format("{} called PMIx_Abort with status {}", state.rank_label(rank), status);
                if (!message.empty())
                    line += ": " + message;
                state.report_abort(rank, status, line);
            });
        });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_fence_nb(const pmix_proc_t procs[], std::size_t nprocs, const pmix_info_t info[],
                          std::size_t ninfo, char* data, std::size_t ndata, pmix_modex_cbfunc_t cbfunc,
                          void* cbdata)
{
    auto host = current_host();
    if (!host || !host->tree.fence)
        return PMIX_ERR_NOT_SUPPORTED;
    std::vector<long> participants;
    bool whole_job = false;
    for (std::size_t i = 0; i < nprocs; ++i) {
        if (!our_nspace(*host, procs[i].nspace))
            return PMIX_ERR_NOT_SUPPORTED;   // canopy runs one job per PMIx server
        if (procs[i].rank == PMIX_RANK_WILDCARD)
            whole_job = true;
        else
            participants.push_back(static_cast<long>(procs[i].rank));
    }
    if (whole_job || participants.size() == host->layout.job_size())
        participants.clear();
    bool collect = false;
    pmix_status_t local_status = PMIX_SUCCESS;
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA))
            collect = PMIX_INFO_TRUE(&info[i]);
        else if (PMIX_CHECK_KEY(&info[i], PMIX_LOCAL_COLLECTIVE_STATUS) && info[i].value.type == PMIX_STATUS)
            local_status = info[i].value.data.status;
    }
    int timeout_s = timeout_from(info, ninfo);
    Bytes local(reinterpret_cast<const std::uint8_t*>(data), reinterpret_cast<const std::uint8_t*>(data) + ndata);

    post_to_host(host, [participants = std::move(participants), collect, local_status, timeout_s,
                        local = std::move(local), cbfunc, cbdata](PmixServerHost::State& h) mutable {
        auto answer = [&h, cbfunc, cbdata](pmix_status_t status, Bytes bytes) {
            answer_modex(h.job.nspace, cbfunc, cbdata, status, std::move(bytes));
        };
        std::uint64_t id = h.pending.add({participants.empty(), participants}, std::move(answer),
                                         std::chrono::seconds(timeout_s), "fence");
        pmix_log().debug("pmix: fence {} over {} ranks, collect={}, {} bytes from {}", id,
                         participants.empty() ? h.layout.job_size() : participants.size(), collect, local.size(),
                         h.job.hosts[static_cast<std::size_t>(h.job.node_index)]);
        auto reply = h.tree_reply(id, "fence");
        if (local_status != PMIX_SUCCESS) {
            // A local participant died. Our ranks get the error and the other nodes our contribution (so none
            // waits on this node), but only once the dead rank's loss is on its way to the launcher, or after a
            // second should its exit never be seen: otherwise a rank failing because of the fence could be
            // reported before the rank that died, and the user would be pointed at the wrong rank.
            pmix_log().info("pmix: fence {} failed locally: {}", id, pmix_error(local_status));
            auto deferred = std::make_shared<std::function<void()>>(
                [&h, id, local_status, participants = std::move(participants), collect,
                 local = std::move(local)]() mutable {
                    h.pending.complete(id, local_status, {});
                    h.tree.fence(std::move(participants), collect, std::move(local), [](Status, Bytes) {});
                });
            auto once = [deferred] {
                if (auto run = std::exchange(*deferred, nullptr))
                    run();
            };
            if (h.abort_reported) {
                once();
                return;
            }
            h.after_loss.push_back(once);
            auto timer = std::make_shared<asio::steady_timer>(h.io, std::chrono::seconds(1));
            timer->async_wait([weak = h.weak_from_this(), timer, once](const boost::system::error_code& ec) {
                auto self = weak.lock();
                if (!ec && self && !self->closed)
                    once();
            });
            return;
        }
        h.tree.fence(std::move(participants), collect, std::move(local), std::move(reply));
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], std::size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host || !host->tree.direct_modex)
        return PMIX_ERR_NOT_SUPPORTED;
    if (!our_nspace(*host, proc->nspace) || proc->rank == PMIX_RANK_WILDCARD)
        return PMIX_ERR_NOT_FOUND;
    long rank = static_cast<long>(proc->rank);
    int timeout_s = timeout_from(info, ninfo);
    post_to_host(host, [rank, timeout_s, cbfunc, cbdata](PmixServerHost::State& h) {
        if (h.layout.node_of(rank) < 0) {
            answer_modex(h.job.nspace, cbfunc, cbdata, PMIX_ERR_NOT_FOUND, {});
            return;
        }
        auto answer = [&h, cbfunc, cbdata](pmix_status_t status, Bytes bytes) {
            answer_modex(h.job.nspace, cbfunc, cbdata, status, std::move(bytes));
        };
        std::uint64_t id =
            h.pending.add({false, {rank}}, std::move(answer), std::chrono::seconds(timeout_s), "direct modex");
        pmix_log().debug("pmix: direct modex {} for rank {} (on node {})", id, rank, h.layout.node_of(rank));
        h.tree.direct_modex(rank, h.tree_reply(id, "direct modex"));
    });
    return PMIX_SUCCESS;
}

// Publish values travel as opaque bytes: the publisher's pmix_proc_t then the pmix_value_t, packed by PMIx.
Result<Bytes> pack_published(const pmix_proc_t& publisher, pmix_value_t& value)
{
    pmix_data_buffer_t buffer;
    PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
    pmix_proc_t proc = publisher;
    pmix_status_t rc = PMIx_Data_pack(nullptr, &buffer, &proc, 1, PMIX_PROC);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_pack(nullptr, &buffer, &value, 1, PMIX_VALUE);
    if (rc != PMIX_SUCCESS) {
        PMIX_DATA_BUFFER_DESTRUCT(&buffer);
        return make_error("cannot pack a published value ({})", pmix_error(rc));
    }
    pmix_byte_object_t bo;
    rc = PMIx_Data_unload(&buffer, &bo);
    PMIX_DATA_BUFFER_DESTRUCT(&buffer);
    if (rc != PMIX_SUCCESS)
        return make_error("cannot unload a published value ({})", pmix_error(rc));
    Bytes out(reinterpret_cast<std::uint8_t*>(bo.bytes), reinterpret_cast<std::uint8_t*>(bo.bytes) + bo.size);
    PMIX_BYTE_OBJECT_DESTRUCT(&bo);
    return out;
}

pmix_status_t unpack_published(const Bytes& bytes, pmix_pdata_t& out)
{
    pmix_data_buffer_t buffer;
    PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
    pmix_byte_object_t bo;
    bo.bytes = static_cast<char*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    bo.size = bytes.size();
    if (!bo.bytes)
        return PMIX_ERR_NOMEM;
    std::memcpy(bo.bytes, bytes.data(), bytes.size());
    pmix_status_t rc = PMIx_Data_load(&buffer, &bo);   // takes ownership of bo.bytes
    int32_t count = 1;
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_unpack(nullptr, &buffer, &out.proc, &count, PMIX_PROC);
    count = 1;   // PMIX_VALUE unpacks into an array of pmix_value_t, here the one in `out`
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_unpack(nullptr, &buffer, &out.value, &count, PMIX_VALUE);
    PMIX_DATA_BUFFER_DESTRUCT(&buffer);
    return rc;
}

pmix_status_t on_publish(const pmix_proc_t* proc, const pmix_info_t info[], std::size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host || !host->tree.publish)
        return PMIX_ERR_NOT_SUPPORTED;
    // Copy the user's key/values; keys in PMIx's own "pmix." namespace are directives (range, persistence, uid).
    struct Copied {
        pmix_proc_t publisher;
        std::vector<std::pair<std::string, pmix_value_t>> values;
        ~Copied()
        {
            for (auto& kv : values)
                PMIx_Value_destruct(&kv.second);
        }
    };
    auto copied = std::make_shared<Copied>();
    copied->publisher = *proc;
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (std::strncmp(info[i].key, "pmix.", 5) == 0)
            continue;
        pmix_value_t value;
        PMIX_VALUE_CONSTRUCT(&value);
        if (PMIx_Value_xfer(&value, &info[i].value) != PMIX_SUCCESS)
            return PMIX_ERR_BAD_PARAM;
        copied->values.emplace_back(info[i].key, value);
    }
    post_to_host(host, [copied, cbfunc, cbdata](PmixServerHost::State& h) {
        std::vector<std::pair<std::string, Bytes>> data;
        for (auto& [key, value] : copied->values) {
            auto packed = pack_published(copied->publisher, value);
            if (!packed) {
                pmix_log().warn("pmix: publish of '{}' by rank {}: {}", key, copied->publisher.rank,
                                packed.error().message);
                answer_op(h, cbfunc, cbdata, PMIX_ERR_PACK_FAILURE);
                return;
            }
            data.emplace_back(key, std::move(*packed));
        }
        std::uint64_t id = h.pending.add(
            {}, [&h, cbfunc, cbdata](pmix_status_t status, Bytes) { answer_op(h, cbfunc, cbdata, status); },
            std::chrono::seconds(0), "publish");
        // A refused publish (a key taken already) is answered as a plain error.
        h.tree.publish(std::move(data), [reply = h.tree_reply(id, "publish")](Status status) { reply(status, {}); });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_lookup(const pmix_proc_t*, char** keys, const pmix_info_t info[], std::size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host || !host->tree.lookup)
        return PMIX_ERR_NOT_SUPPORTED;
    std::vector<std::string> wanted;
    for (std::size_t i = 0; keys && keys[i]; ++i)
        wanted.emplace_back(keys[i]);
    int timeout_s = timeout_from(info, ninfo);
    post_to_host(host, [wanted = std::move(wanted), timeout_s, cbfunc, cbdata](PmixServerHost::State& h) mutable {
        // The found values ride through the pending table as one packed vector so timeouts can answer too.
        auto found_store = std::make_shared<std::vector<std::pair<std::string, Bytes>>>();
        std::uint64_t id = h.pending.add(
            {},
            [&h, cbfunc, cbdata, found_store](pmix_status_t status, Bytes) {
                if (!cbfunc)
                    return;
                auto& found = *found_store;
                pmix_pdata_t* pdata = nullptr;
                std::size_t allocated = status == PMIX_SUCCESS ? found.size() : 0, n = 0;
                PMIX_PDATA_CREATE(pdata, allocated);
                for (std::size_t i = 0; i < allocated; ++i) {
                    PMIX_LOAD_KEY(pdata[n].key, found[i].first.c_str());
                    if (unpack_published(found[i].second, pdata[n]) == PMIX_SUCCESS)
                        ++n;
                    else
                        pmix_log().warn("pmix: lookup of '{}': the stored value does not unpack", found[i].first);
                }
                pmix_status_t rc = status != PMIX_SUCCESS ? status : n > 0 ? PMIX_SUCCESS : PMIX_ERR_NOT_FOUND;
                run_on_pmix_thread(h.job.nspace, [cbfunc, cbdata, rc, pdata, n, allocated]() mutable {
                    cbfunc(rc, n > 0 ? pdata : nullptr, n, cbdata);
                    if (pdata)
                        PMIX_PDATA_FREE(pdata, allocated);   // PMIx packed its reply inside cbfunc
                });
            },
            std::chrono::seconds(timeout_s), "lookup");
        h.tree.lookup(std::move(wanted), [reply = h.tree_reply(id, "lookup"), found_store](
                                             Status status, std::vector<std::pair<std::string, Bytes>> found) {
            *found_store = std::move(found);
            reply(status, {});
        });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_unpublish(const pmix_proc_t*, char** keys, const pmix_info_t[], std::size_t,
                           pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto host = current_host();
    if (!host || !host->tree.unpublish)
        return PMIX_ERR_NOT_SUPPORTED;
    std::vector<std::string> doomed;
    for (std::size_t i = 0; keys && keys[i]; ++i)
        doomed.emplace_back(keys[i]);
    post_to_host(host, [doomed = std::move(doomed), cbfunc, cbdata](PmixServerHost::State& h) mutable {
        std::uint64_t id = h.pending.add(
            {}, [&h, cbfunc, cbdata](pmix_status_t status, Bytes) { answer_op(h, cbfunc, cbdata, status); },
            std::chrono::seconds(0), "unpublish");
        h.tree.unpublish(std::move(doomed),
                         [reply = h.tree_reply(id, "unpublish")](Status status) { reply(status, {}); });
    });
    return PMIX_SUCCESS;
}

// The daemon stays the only launcher: PMIx_Spawn, connect/disconnect and tools are not offered.
pmix_server_module_t make_module()
{
    pmix_server_module_t module;
    std::memset(&module, 0, sizeof(module));
    module.client_connected = on_client_connected;
    module.client_finalized = on_client_finalized;
    module.abort = on_abort;
    module.fence_nb = on_fence_nb;
    module.direct_modex = on_direct_modex;
    module.publish = on_publish;
    module.lookup = on_lookup;
    module.unpublish = on_unpublish;
    return module;
}

pmix_server_module_t g_module = make_module();

// Starts a PMIx operation that completes through an op callback, `start(cbfunc, cbdata)`, and waits at most
// `limit` for it: a PMIx that never answers must not hang the daemon. The callback shares the wait's state, so
// one that comes after the wait gave up still writes into live memory.
pmix_status_t wait_for_op(std::chrono::milliseconds limit,
                          const std::function<pmix_status_t(pmix_op_cbfunc_t, void*)>& start)
{
    struct Wait {
        std::mutex mutex;
        std::condition_variable cv;
        bool done = false;
        pmix_status_t status = PMIX_SUCCESS;
    };
    auto wait = std::make_shared<Wait>();
    auto* callback_ref = new std::shared_ptr<Wait>(wait);
    pmix_status_t rc = start(
        [](pmix_status_t status, void* cbdata) {
            std::unique_ptr<std::shared_ptr<Wait>> ref(static_cast<std::shared_ptr<Wait>*>(cbdata));
            std::lock_guard lock((*ref)->mutex);
            (*ref)->status = status;
            (*ref)->done = true;
            (*ref)->cv.notify_all();
        },
        callback_ref);
    if (rc != PMIX_SUCCESS) {   // no callback will come
        delete callback_ref;
        return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : rc;
    }
    std::unique_lock lock(wait->mutex);
    if (!wait->cv.wait_for(lock, limit, [&] { return wait->done; }))
        return PMIX_ERR_TIMEOUT;
    return wait->status;
}

} // namespace

Result<std::unique_ptr<PmixHost>> start_pmix_host(asio::io_context& io, PmixJob job, PmixTree tree)
{
    auto layout = RankLayout::make(job);
    if (!layout)
        return layout.error();
    if (!tree.fence || !tree.abort)
        return make_error("PMIx host for job {}: the tree must provide at least fence and abort", job.nspace);
    {
        std::lock_guard lock(g_host_mutex);
        if (g_host)
            return make_error("PMIx host for job {}: a PMIx server already runs in this process ({})", job.nspace,
                              g_host->job.nspace);
    }
    auto state = std::make_shared<PmixServerHost::State>(io, std::move(job), std::move(*layout), std::move(tree));
    const PmixJob& j = state->job;
    const std::string& node = j.hosts[static_cast<std::size_t>(j.node_index)];

    // libpmix writes replies to client sockets that may have just closed; that must be an error, not a SIGPIPE
    // that kills the daemon (canopyd already ignores it; this covers any other embedding).
    struct sigaction pipe_action {};
    if (::sigaction(SIGPIPE, nullptr, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL)
        ::signal(SIGPIPE, SIG_IGN);

    ::setenv("PMIX_MCA_gds", pmix_component("PMIX_MCA_gds", "hash").c_str(), 1);
    ::setenv("PMIX_MCA_psec", pmix_component("PMIX_MCA_psec", "native").c_str(), 1);
    // PMIx discovers this node's topology for locality strings; it never needs PCI, GPU or network devices.
    // Leaving I/O discovery and its plugins out cut PMIx's start-up from about 20 to 6 ms of CPU per daemon.
    ::setenv("HWLOC_COMPONENTS", "-pci,-opencl,-gl,-linuxio", 0);
    ::setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_xml_libxml,hwloc_opencl,hwloc_gl,hwloc_pci", 0);

    std::string nspace = pmix_server_nspace(j);
    std::string system_dir = pmix_system_tmpdir();
    pmix_rank_t server_rank = static_cast<pmix_rank_t>(j.node_index);
    bool no = false;
    pmix_info_t* init_info = nullptr;
    const std::size_t ninit = 7;
    PMIX_INFO_CREATE(init_info, ninit);
    PMIx_Info_load(&init_info[0], PMIX_SERVER_TMPDIR, j.tmpdir.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[1], PMIX_HOSTNAME, node.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[2], PMIX_SERVER_NSPACE, nspace.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[3], PMIX_SERVER_RANK, &server_rank, PMIX_PROC_RANK);
    // No system-wide rendezvous files and no tool connections: only this job's ranks talk to us.
    PMIx_Info_load(&init_info[4], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
    PMIx_Info_load(&init_info[5], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
    PMIx_Info_load(&init_info[6], PMIX_SYSTEM_TMPDIR, system_dir.c_str(), PMIX_STRING);

    // Publish the host before init: PMIx may call back as soon as it starts.
    {
        std::lock_guard lock(g_host_mutex);
        g_host = state;
    }
    pmix_status_t rc = PMIx_server_init(&g_module, init_info, ninit);
    PMIX_INFO_FREE(init_info, ninit);
    if (rc != PMIX_SUCCESS) {
        std::lock_guard lock(g_host_mutex);
        g_host.reset();
        return make_error("PMIx host on {}: PMIx_server_init failed with tmpdir {}: {}; check that the directory "
                          "exists and is writable",
                          node, j.tmpdir, pmix_error(rc));
    }

    if (auto loaded = library_version(); loaded != pmix_build_version())
        pmix_log().warn("pmix: canopyd was built against PMIx {} but runs with {}; ranks started on demand are "
                        "told {}",
                        pmix_build_version(), loaded, pmix_build_version());

    // The regex generators need an initialized PMIx, so the job info is built only now.
    auto job_info = make_job_info(j, state->layout);
    if (!job_info) {
        PMIx_server_finalize();
        std::lock_guard lock(g_host_mutex);
        g_host.reset();
        return job_info.error();
    }
    rc = wait_for_op(std::chrono::seconds(30), [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
        return PMIx_server_register_nspace(j.nspace.c_str(),
                                           static_cast<int>(state->layout.local_size(j.node_index)),
                                           static_cast<pmix_info_t*>(job_info->data()), job_info->size(), cbfunc,
                                           cbdata);
    });
    if (rc != PMIX_SUCCESS) {
        PMIx_server_finalize();
        std::lock_guard lock(g_host_mutex);
        g_host.reset();
        return make_error("PMIx host on {}: registering job {} failed: {}", node, j.nspace, pmix_error(rc));
    }
    pmix_log().info("pmix: server up on {} for {} ({} ranks here of {}, tmpdir {})", node, j.nspace,
                    state->layout.local_size(j.node_index), state->layout.job_size(), j.tmpdir);
    return std::unique_ptr<PmixHost>(new PmixServerHost(std::move(state)));
}

PmixServerHost::PmixServerHost(std::shared_ptr<State> state) : state_(std::move(state)) {}

Result<std::vector<std::string>> PmixServerHost::prepare_rank(long rank, uid_t uid, gid_t gid)
{
    State& s = *state_;
    const std::string& node = s.job.hosts[static_cast<std::size_t>(s.job.node_index)];
    if (!s.layout.is_local(rank, s.job.node_index))
        return make_error("PMIx host on {}: rank {} does not run on this node", node, rank);
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, s.job.nspace.c_str(), static_cast<pmix_rank_t>(rank));

    pmix_status_t rc = wait_for_op(std::chrono::seconds(30), [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
        return PMIx_server_register_client(&proc, uid, gid, nullptr, cbfunc, cbdata);
    });
    if (rc != PMIX_SUCCESS)
        return make_error("PMIx host on {}: registering rank {} failed: {}", node, rank, pmix_error(rc));

    char** env = static_cast<char**>(std::calloc(1, sizeof(char*)));
    if (!env)
        return make_error("PMIx host on {}: out of memory preparing rank {}", node, rank);
    rc = PMIx_server_setup_fork(&proc, &env);
    std::vector<std::string> out;
    for (std::size_t i = 0; env && env[i]; ++i)
        out.emplace_back(env[i]);
    PMIX_ARGV_FREE(env);
    if (rc != PMIX_SUCCESS)
        return make_error("PMIx host on {}: PMIx_server_setup_fork for rank {} failed: {}", node, rank,
                          pmix_error(rc));
    for (auto& setting : canopy_pmix_settings())
        out.push_back(std::move(setting));
    return out;
}

void PmixServerHost::serve_direct_modex(long rank, std::function<void(Status, Bytes)> done)
{
    auto& s = *state_;
    const std::string& node = s.job.hosts[static_cast<std::size_t>(s.job.node_index)];
    if (!s.layout.is_local(rank, s.job.node_index)) {
        asio::post(s.io, [done = std::move(done), rank, node] {
            done(make_error("PMIx direct modex: rank {} is not on {}", rank, node), {});
        });
        return;
    }
    std::uint64_t id = s.pending.add(
        {false, {rank}},
        [done, rank, node](pmix_status_t status, Bytes bytes) {
            if (status == PMIX_SUCCESS)
                done(Status{}, std::move(bytes));
            else
                done(make_error("PMIx direct modex for rank {} on {} failed: {}", rank, node, pmix_error(status)),
                     {});
        },
        std::chrono::seconds(0), "serving a direct modex");
    // PMIx answers once the rank has committed its data; the context carries the host and our id back.
    struct Context {
        std::weak_ptr<State> host;
        std::uint64_t id;
    };
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, s.job.nspace.c_str(), static_cast<pmix_rank_t>(rank));
    auto* ctx = new Context{state_, id};
    pmix_status_t rc = PMIx_server_dmodex_request(
        &proc,
        [](pmix_status_t status, char* data, std::size_t size, void* cbdata) {
            std::unique_ptr<Context> c(static_cast<Context*>(cbdata));
            auto host = c->host.lock();
            if (!host)
                return;
            Bytes bytes(reinterpret_cast<std::uint8_t*>(data), reinterpret_cast<std::uint8_t*>(data) + size);
            std::uint64_t pending_id = c->id;
            post_to_host(host, [pending_id, status, bytes = std::move(bytes)](State& h) mutable {
                h.pending.complete(pending_id, status, std::move(bytes));
            });
        },
        ctx);
    if (rc != PMIX_SUCCESS) {
        delete ctx;
        asio::post(s.io, [weak = std::weak_ptr<State>(state_), id, rc] {
            if (auto h = weak.lock(); h && !h->closed)
                h->pending.complete(id, rc, {});
        });
    }
}

void PmixServerHost::rank_exited(long rank, int wait_status)
{
    State& s = *state_;
    RankPmixState st;
    {
        std::lock_guard lock(s.ranks_mutex);
        auto& r = s.ranks[rank];
        r.exited = true;
        st = r;
        if (r.connected && !r.finalized && !r.reported)
            r.reported = true;
    }
    int code = exit_status_code(wait_status);
    if (st.connected && !st.finalized && !st.reported) {
        s.report_lost(rank, code == 0 ? 1 : code,
                      fmt::format("{} exited without calling PMIx_Finalize ({})", s.rank_label(rank),
                                  describe_exit(wait_status)));
        return;
    }
    if (!st.connected && !st.reported) {
        bool anyone_connected = false;
        {
            std::lock_guard lock(s.ranks_mutex);
            for (auto& [r, state] : s.ranks)
                anyone_connected = anyone_connected || state.connected;
            if (anyone_connected)
                s.ranks[rank].reported = true;
        }
        if (anyone_connected)
            s.report_lost(rank, code == 0 ? 1 : code,
                          fmt::format("{} exited without connecting to PMIx while other ranks use it ({})",
                                      s.rank_label(rank), describe_exit(wait_status)));
        else
            s.exited_unconnected.insert(rank);   // maybe not a PMIx program at all; judged when a rank connects
    }
}

std::size_t PmixServerHost::pending_requests() const
{
    return state_->pending.size();
}

PmixServerHost::~PmixServerHost()
{
    State& s = *state_;
    {
        std::lock_guard lock(g_host_mutex);
        g_host.reset();   // new upcalls now answer "not supported"
    }
    // Release anyone still waiting before PMIx goes away; late tree replies find nothing pending.
    s.pending.fail_all(PMIX_ERR_UNREACH);
    s.closed = true;

    bool unclean = s.abort_reported;
    {
        std::lock_guard lock(s.ranks_mutex);
        for (auto& [rank, st] : s.ranks)
            unclean = unclean || (st.connected && !st.finalized);
    }
    if (unclean) {
        // PMIx 4.2.2 crashes in PMIx_server_finalize (about one run in three here) after clients were killed
        // inside a fence. The daemon exits after an aborted job anyway, so leave PMIx's state to process exit.
        pmix_log().info("pmix: job {} ended abnormally; skipping PMIx_server_finalize", s.job.nspace);
        g_server_abandoned = true;
        return;
    }

    // Deregister and finalize on a helper thread with a bound: whatever PMIx does, the daemon must get to exit.
    auto finished = std::make_shared<std::promise<void>>();
    auto result = finished->get_future();
    std::string nspace = s.job.nspace;
    std::thread([nspace, finished] {
        auto deregistered = wait_for_op(std::chrono::seconds(1), [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
            PMIx_server_deregister_nspace(nspace.c_str(), cbfunc, cbdata);
            return PMIX_SUCCESS;
        });
        if (deregistered == PMIX_ERR_TIMEOUT) {
            // PMIx 4.2.2 reads a new connection's handshake with a blocking recv on its progress thread, so
            // anyone who connects to its port and stays silent stalls it; PMIx_server_finalize would then wait
            // for that thread forever. Leave PMIx to process exit instead.
            pmix_log().warn("pmix: PMIx's progress thread did not answer within 1 s (a connection to its port "
                            "that never sent its handshake?); skipping PMIx_server_finalize");
            g_server_abandoned = true;
            finished->set_value();
            return;
        }
        pmix_status_t rc = PMIx_server_finalize();
        if (rc != PMIX_SUCCESS)
            pmix_log().warn("pmix: PMIx_server_finalize: {}", pmix_error(rc));
        finished->set_value();
    }).detach();
    if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready)
        pmix_log().error("pmix: PMIx_server_finalize for {} did not return within 20 s; leaving it behind", nspace);
}

bool pmix_server_abandoned() { return g_server_abandoned; }

void use_pmix_logger(spdlog::logger* log) { g_log = log; }

} // namespace canopy
