// The upcall shims: copy, post, return.
#include "pmix/upcalls.hpp"

#include <algorithm>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/logger.h>

#include "pmix/module_log.hpp"
#include "pmix/published_values.hpp"
#include "pmix/request_router.hpp"
#include "util/text.hpp"

namespace canopy {
namespace {

std::mutex g_router_mutex;
std::shared_ptr<RequestRouter> g_router;

std::shared_ptr<RequestRouter> attached_router()
{
    std::lock_guard lock(g_router_mutex);
    return g_router;
}

// Returning SUCCESS obliges the router to call PMIx back; if the host closes first, PMIx_server_finalize cleans up.
template <typename Work>
pmix_status_t post(RequestRouter& router, Work work)
{
    router.link().post(std::move(work));
    return PMIX_SUCCESS;
}

// A proc's tree rank: the job's ranks, then those of the namespaces it spawned.
std::optional<long> tree_rank_of(const RequestRouter& router, const pmix_proc_t* proc)
{
    return router.namespaces().tree_rank(proc->nspace, static_cast<long>(proc->rank));
}

// A client's tree rank; PMIx only lets registered clients in, so one is always found.
long client_rank(const RequestRouter& router, const pmix_proc_t* proc)
{
    return tree_rank_of(router, proc).value_or(static_cast<long>(proc->rank));
}

// The participants of a collective as tree ranks: false if a namespace is unknown here.
template <typename Call>
bool add_participants(const RequestRouter& router, const pmix_proc_t procs[], std::size_t nprocs, Call& call)
{
    for (std::size_t i = 0; i < nprocs; ++i) {
        bool job = PMIX_CHECK_NSPACE(procs[i].nspace, router.nspace().c_str());
        if (procs[i].rank == PMIX_RANK_WILDCARD && job) {
            call.whole_job = true;
        } else if (procs[i].rank == PMIX_RANK_WILDCARD) {
            auto all = router.namespaces().tree_ranks(procs[i].nspace);
            if (!all)
                return false;
            call.participants.insert(call.participants.end(), all->begin(), all->end());
        } else if (auto rank = tree_rank_of(router, &procs[i])) {
            call.participants.push_back(*rank);
        } else {
            return false;
        }
    }
    return true;
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

// PMIX_LOCAL_COLLECTIVE_STATUS: an error when a local participant of a fence or connect died.
int local_status_from(const pmix_info_t info[], std::size_t ninfo)
{
    for (std::size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_LOCAL_COLLECTIVE_STATUS) && info[i].value.type == PMIX_STATUS)
            return info[i].value.data.status;
    return PMIX_SUCCESS;
}

// PMIX_WAIT asks a lookup to wait until that many keys are published: 0 or true means all of them.
std::size_t wait_count(const pmix_info_t info[], std::size_t ninfo, std::size_t keys)
{
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (!PMIX_CHECK_KEY(&info[i], PMIX_WAIT))
            continue;
        if (info[i].value.type == PMIX_BOOL)
            return info[i].value.data.flag ? keys : 0;
        std::size_t count = 0;
        pmix_status_t rc;
        PMIX_VALUE_GET_NUMBER(rc, &info[i].value, count, std::size_t);
        if (rc != PMIX_SUCCESS)
            return keys;
        return count == 0 ? keys : std::min(count, keys);
    }
    return 0;
}

std::vector<std::string> strings_from(char** keys)
{
    std::vector<std::string> out;
    for (std::size_t i = 0; keys && keys[i]; ++i)
        out.emplace_back(keys[i]);
    return out;
}

// The tracker learns of connects, finalizes and aborts here, on PMIx's thread, so an exit the daemon reaps right
// after is judged with them.

// A rank connected or finalized: `record` is the tracker's note of it, `handle` the router's answer.
template <void (RankTracker::*record)(long), void (RequestRouter::*handle)(long, const OpAnswer&)>
pmix_status_t on_rank_step(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    long rank = client_rank(*router, proc);
    (router->ranks().*record)(rank);
    return post(*router, [rank, answer = OpAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) {
        (r.*handle)(rank, answer);
    });
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], std::size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    long rank = client_rank(*router, proc);
    router->ranks().aborted(rank);
    return post(*router, [rank, status, message = std::string(msg ? msg : ""),
                          answer = OpAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) {
        r.abort(rank, status, message, answer);
    });
}

pmix_status_t on_fence_nb(const pmix_proc_t procs[], std::size_t nprocs, const pmix_info_t info[],
                          std::size_t ninfo, char* data, std::size_t ndata, pmix_modex_cbfunc_t cbfunc,
                          void* cbdata)
{
    // PMIx 4.2.2 drops a collective's other local callers when the upcall returns an error: refuse through the
    // callback (we are on PMIx's thread), which answers them all.
    auto refuse = [&] {
        cbfunc(PMIX_ERR_NOT_SUPPORTED, nullptr, 0, cbdata, nullptr, nullptr);
        return PMIX_SUCCESS;
    };
    auto router = attached_router();
    if (!router)
        return refuse();
    FenceCall call;
    if (!add_participants(*router, procs, nprocs, call))
        return refuse();   // a namespace this job did not spawn
    for (std::size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA))
            call.collect = PMIX_INFO_TRUE(&info[i]);
    call.local_status = local_status_from(info, ninfo);
    call.timeout_s = timeout_from(info, ninfo);
    call.local.assign(reinterpret_cast<const std::uint8_t*>(data), reinterpret_cast<const std::uint8_t*>(data) + ndata);
    return post(*router, [call = std::move(call), answer = ModexAnswer(router->nspace(), cbfunc, cbdata)](
                             RequestRouter& r) mutable { r.fence(std::move(call), std::move(answer)); });
}

pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], std::size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router || !router->calls().direct_modex)
        return PMIX_ERR_NOT_SUPPORTED;
    auto rank = proc->rank == PMIX_RANK_WILDCARD ? std::nullopt : tree_rank_of(*router, proc);
    if (!rank)
        return PMIX_ERR_NOT_FOUND;
    return post(*router, [rank = *rank, timeout_s = timeout_from(info, ninfo),
                          answer = ModexAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) mutable {
        r.direct_modex(rank, timeout_s, std::move(answer));
    });
}

pmix_status_t on_publish(const pmix_proc_t* proc, const pmix_info_t info[], std::size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    // Keys in PMIx's own "pmix." namespace are directives (range, persistence, uid), not data.
    std::vector<std::pair<std::string, Bytes>> data;
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (std::strncmp(info[i].key, "pmix.", 5) == 0)
            continue;
        auto packed = pack_published(*proc, info[i].value);
        if (!packed) {
            pmix_log().warn("pmix: publish of '{}' by rank {}: {}", info[i].key, proc->rank, packed.error().message);
            return PMIX_ERR_PACK_FAILURE;
        }
        data.emplace_back(info[i].key, std::move(*packed));
    }
    return post(*router, [rank = client_rank(*router, proc), data = std::move(data),
                          answer = OpAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) mutable {
        r.publish(rank, std::move(data), std::move(answer));
    });
}

pmix_status_t on_lookup(const pmix_proc_t*, char** keys, const pmix_info_t info[], std::size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    auto wanted = strings_from(keys);
    std::size_t wait_for = wait_count(info, ninfo, wanted.size());
    return post(*router, [keys = std::move(wanted), wait_for, timeout_s = timeout_from(info, ninfo),
                          answer = LookupAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) mutable {
        r.lookup(std::move(keys), wait_for, timeout_s, std::move(answer));
    });
}

pmix_status_t on_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t[], std::size_t,
                           pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    return post(*router, [rank = client_rank(*router, proc), keys = strings_from(keys),
                          answer = OpAnswer(router->nspace(), cbfunc, cbdata)](RequestRouter& r) mutable {
        r.unpublish(rank, std::move(keys), std::move(answer));
    });
}

// PMIx_Connect and PMIx_Disconnect: PMIx calls up once every local participant has called.
template <bool connecting>
pmix_status_t on_connect(const pmix_proc_t procs[], std::size_t nprocs, const pmix_info_t info[], std::size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    // As for fences: refuse through the callback, never by the return value (on_fence_nb says why).
    auto refuse = [&] {
        cbfunc(PMIX_ERR_NOT_SUPPORTED, cbdata);
        return PMIX_SUCCESS;
    };
    auto router = attached_router();
    if (!router)
        return refuse();
    ConnectCall call;
    if (!add_participants(*router, procs, nprocs, call))
        return refuse();   // another job's procs: canopy connects only the job and what it spawned
    call.timeout_s = timeout_from(info, ninfo);
    call.local_status = local_status_from(info, ninfo);
    const char* what = connecting ? "connect" : "disconnect";
    return post(*router, [call = std::move(call), answer = OpAnswer(router->nspace(), cbfunc, cbdata),
                          what](RequestRouter& r) mutable { r.connect(std::move(call), std::move(answer), what); });
}

// PMIx_Job_control. PMIx's server takes the cleanup requests (PMIX_REGISTER_CLEANUP and _DIR) itself and runs them
// when the rank or the job ends, but only if the host has this upcall; what it passes up are the other directives
// (pause, kill, signal, checkpoint, provision...), which canopy does not serve.
pmix_status_t on_job_control(const pmix_proc_t*, const pmix_proc_t[], std::size_t, const pmix_info_t[], std::size_t,
                             pmix_info_cbfunc_t, void*)
{
    return PMIX_ERR_NOT_SUPPORTED;
}

std::string string_value(const pmix_info_t& info)
{
    return info.value.type == PMIX_STRING && info.value.data.string ? info.value.data.string : "";
}

// PMIx_Spawn (MPI_Comm_spawn): one application; the root places it and every node learns the new namespace.
pmix_status_t on_spawn(const pmix_proc_t* proc, const pmix_info_t job_info[], std::size_t ninfo,
                       const pmix_app_t apps[], std::size_t napps, pmix_spawn_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    if (!router || !router->calls().spawn)
        return PMIX_ERR_NOT_SUPPORTED;
    if (napps != 1 || !apps[0].cmd || apps[0].maxprocs <= 0) {
        pmix_log().warn("pmix: PMIx_Spawn of {} applications: canopy spawns one application (with at least one "
                        "process) at a time",
                        napps);
        return PMIX_ERR_NOT_SUPPORTED;
    }
    const pmix_app_t& app = apps[0];
    wire::SpawnRequest request;
    request.parent_rank = static_cast<std::uint64_t>(client_rank(*router, proc));
    request.argv = strings_from(app.argv);
    if (request.argv.empty())
        request.argv.push_back(app.cmd);
    else
        request.argv[0] = app.cmd;
    request.env = strings_from(app.env);
    request.wdir = app.cwd ? app.cwd : "";
    request.count = static_cast<std::uint64_t>(app.maxprocs);
    for (std::size_t i = 0; i < app.ninfo; ++i) {
        if (PMIX_CHECK_KEY(&app.info[i], PMIX_HOST))
            request.hosts = split_commas(string_value(app.info[i]));
        else if (PMIX_CHECK_KEY(&app.info[i], PMIX_WDIR))
            request.wdir = string_value(app.info[i]);
    }
    for (std::size_t i = 0; i < ninfo; ++i) {
        if (PMIX_CHECK_KEY(&job_info[i], PMIX_MAPBY)) {
            request.map_by = string_value(job_info[i]);
        } else if (PMIX_CHECK_KEY(&job_info[i], PMIX_PPR)) {
            // "N:node": N processes on each node used
            auto ppr = string_value(job_info[i]);
            auto colon = ppr.find(':');
            if (colon == std::string::npos || ppr.substr(colon + 1) != "node" ||
                (request.per_node = std::strtoull(ppr.c_str(), nullptr, 10)) == 0) {
                pmix_log().warn("pmix: PMIx_Spawn with PMIX_PPR '{}': canopy takes only 'N:node'", ppr);
                return PMIX_ERR_NOT_SUPPORTED;
            }
        }
    }
    return post(*router, [request = std::move(request), answer = SpawnAnswer(router->nspace(), cbfunc, cbdata)](
                             RequestRouter& r) mutable { r.spawn(std::move(request), std::move(answer)); });
}

pmix_status_t on_query(pmix_proc_t*, pmix_query_t* queries, std::size_t nqueries, pmix_info_cbfunc_t cbfunc,
                       void* cbdata)
{
    auto router = attached_router();
    if (!router)
        return PMIX_ERR_NOT_SUPPORTED;
    std::vector<std::vector<std::string>> keys;
    for (std::size_t i = 0; i < nqueries; ++i)
        keys.push_back(strings_from(queries[i].keys));
    return post(*router, [keys = std::move(keys), answer = InfoAnswer(router->nspace(), cbfunc, cbdata)](
                             RequestRouter& r) mutable { r.query(std::move(keys), std::move(answer)); });
}

// PMIx_Log. Without this upcall PMIx 4.2.2 drops PMIX_LOG_STDERR and PMIX_LOG_STDOUT and answers success; canopy
// prints them as the rank's output. Other channels (syslog, email, a data store) are not served. PMIx ignores the
// return value here, so every path calls back, and later: PMIx's caller still uses its request after this returns.
void on_log(const pmix_proc_t* client, const pmix_info_t data[], std::size_t ndata, const pmix_info_t[], std::size_t,
            pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    auto router = attached_router();
    pmix_status_t status = PMIX_SUCCESS;
    for (std::size_t i = 0; i < ndata; ++i) {
        bool to_stdout = PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDOUT);
        bool to_stderr = PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDERR);
        if (!to_stdout && !to_stderr) {
            if (std::strncmp(data[i].key, "pmix.log.", 9) == 0)
                status = PMIX_ERR_NOT_SUPPORTED;
            continue;
        }
        if (!router || !router->calls().rank_output || data[i].value.type != PMIX_STRING ||
            !data[i].value.data.string || !tree_rank_of(*router, client)) {
            status = PMIX_ERR_NOT_SUPPORTED;
            continue;
        }
        std::string text = data[i].value.data.string;
        if (text.empty() || text.back() != '\n')
            text += '\n';
        router->link().post([rank = client_rank(*router, client), to_stderr, text = std::move(text)](RequestRouter& r) {
            r.calls().rank_output(rank, to_stderr, text);
        });
    }
    OpAnswer(client->nspace, cbfunc, cbdata)(status);
}

pmix_server_module_t make_table()
{
    pmix_server_module_t table;
    std::memset(&table, 0, sizeof(table));
    table.client_connected = on_rank_step<&RankTracker::connected, &RequestRouter::client_connected>;
    table.client_finalized = on_rank_step<&RankTracker::finalized, &RequestRouter::client_finalized>;
    table.abort = on_abort;
    table.fence_nb = on_fence_nb;
    table.direct_modex = on_direct_modex;
    table.publish = on_publish;
    table.lookup = on_lookup;
    table.unpublish = on_unpublish;
    table.connect = on_connect<true>;
    table.disconnect = on_connect<false>;
    table.job_control = on_job_control;
    table.query = on_query;
    table.spawn = on_spawn;
    table.log = on_log;
    return table;
}

pmix_server_module_t g_table = make_table();

} // namespace

pmix_server_module_t* upcall_table() { return &g_table; }

Status attach_upcalls(std::shared_ptr<RequestRouter> router)
{
    std::lock_guard lock(g_router_mutex);
    if (g_router)
        return make_error("a PMIx server already runs in this process ({})", g_router->nspace());
    g_router = std::move(router);
    return {};
}

void detach_upcalls()
{
    std::lock_guard lock(g_router_mutex);
    g_router.reset();
}

} // namespace canopy
