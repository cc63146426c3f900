// Starting, registering with and finalizing the process's PMIx server.
#include "pmix/server_lifecycle.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include <pmix.h>
#include <spdlog/logger.h>

#include "pmix/client_env.hpp"
#include "pmix/module_log.hpp"
#include "pmix/pmix_host.hpp"
#include "util/worker_thread.hpp"

namespace canopy {
namespace {

// Set when PMIx_server_finalize was skipped: PMIx's progress thread still runs, so the process must not run
// static destructors under it.
std::atomic<bool> g_server_abandoned{false};

// "OpenPMIx 4.2.2rc2 (PMIx Standard: ...)" -> "4.2.2rc2", what PMIx_server_setup_fork puts in PMIX_VERSION.
std::string library_version()
{
    std::string_view text = PMIx_Get_version();
    auto start = text.find(' ');
    text = start == std::string_view::npos ? text : text.substr(start + 1);
    return std::string(text.substr(0, text.find(' ')));
}

std::string node_of(const PmixJob& job) { return job.hosts.at(static_cast<std::size_t>(job.node_index)); }

// Starts a PMIx operation that completes through an op callback, `start(cbfunc, cbdata)`: `done` gets its status
// on PMIx's thread, or at once if PMIx completed it in the call. Returns PMIx's refusal to start it, if it refused.
template <typename Start>
pmix_status_t start_op(Start start, Registered done)
{
    auto* held = new Registered(std::move(done));
    pmix_status_t rc = start(
        [](pmix_status_t status, void* cbdata) {
            std::unique_ptr<Registered> callback(static_cast<Registered*>(cbdata));
            (*callback)(status);
        },
        held);
    if (rc == PMIX_SUCCESS)
        return rc;
    std::unique_ptr<Registered> callback(held);   // no callback will come
    if (rc != PMIX_OPERATION_SUCCEEDED)
        return rc;
    (*callback)(PMIX_SUCCESS);
    return PMIX_SUCCESS;
}

// Starts an op-callback operation and waits at most `limit` for it: only the teardown, on its own thread, waits.
// The callback shares the wait's state, so one that comes after the wait gave up still writes into live memory.
template <typename Start>
pmix_status_t wait_for_op(std::chrono::milliseconds limit, Start start)
{
    struct Wait {
        std::mutex mutex;
        std::condition_variable cv;
        bool done = false;
        pmix_status_t status = PMIX_SUCCESS;
    };
    auto wait = std::make_shared<Wait>();
    pmix_status_t rc = start_op(start, [wait](pmix_status_t status) {
        std::lock_guard lock(wait->mutex);
        wait->status = status;
        wait->done = true;
        wait->cv.notify_all();
    });
    if (rc != PMIX_SUCCESS)
        return rc;
    std::unique_lock lock(wait->mutex);
    if (!wait->cv.wait_for(lock, limit, [&] { return wait->done; }))
        return PMIX_ERR_TIMEOUT;
    return wait->status;
}

// PMIx's listener stores its own address ("<nspace>.<rank>;tcp4://A:P") under PMIX_MYSERVER_URI as it starts.
// PMIx_Get waits for PMIx's thread, which has nothing else to do yet: no client knows the server so far.
Result<std::string> own_address(const PmixJob& job)
{
    pmix_proc_t self;
    PMIX_LOAD_PROCID(&self, pmix_server_nspace(job).c_str(), static_cast<pmix_rank_t>(job.node_index));
    pmix_value_t* value = nullptr;
    pmix_status_t rc = PMIx_Get(&self, PMIX_MYSERVER_URI, nullptr, 0, &value);
    if (rc != PMIX_SUCCESS || !value || value->type != PMIX_STRING || !value->data.string) {
        if (value)
            PMIX_VALUE_RELEASE(value);
        return make_error("PMIx host on {}: the server has no address of its own ({})", node_of(job),
                          pmix_error(rc == PMIX_SUCCESS ? PMIX_ERR_BAD_PARAM : rc));
    }
    std::string uri = value->data.string;
    PMIX_VALUE_RELEASE(value);
    return uri.substr(uri.find(';') + 1);
}

} // namespace

namespace {

// Spawned namespaces first, then the job's; each waits at most a second. PMIx runs the cleanups the ranks
// registered (PMIX_REGISTER_CLEANUP) as it deregisters their namespace.
pmix_status_t deregister_all(const std::vector<std::string>& nspaces)
{
    pmix_status_t worst = PMIX_SUCCESS;
    for (auto it = nspaces.rbegin(); it != nspaces.rend(); ++it) {
        auto rc = wait_for_op(std::chrono::seconds(1), [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
            PMIx_server_deregister_nspace(it->c_str(), cbfunc, cbdata);
            return PMIX_SUCCESS;
        });
        if (rc != PMIX_SUCCESS)
            worst = rc;
        if (rc == PMIX_ERR_TIMEOUT)
            break;   // PMIx's thread is stuck: the rest would wait as long
    }
    return worst;
}

} // namespace

Result<std::string> start_server(const PmixJob& job, const RankLayout& layout, pmix_server_module_t* upcalls,
                                 Registered job_registered)
{
    const std::string node = node_of(job);

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

    std::string nspace = pmix_server_nspace(job);
    std::string system_dir = pmix_system_tmpdir();
    pmix_rank_t server_rank = static_cast<pmix_rank_t>(job.node_index);
    bool no = false;
    pmix_info_t* init_info = nullptr;
    const std::size_t ninit = 7;
    PMIX_INFO_CREATE(init_info, ninit);
    PMIx_Info_load(&init_info[0], PMIX_SERVER_TMPDIR, job.tmpdir.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[1], PMIX_HOSTNAME, node.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[2], PMIX_SERVER_NSPACE, nspace.c_str(), PMIX_STRING);
    PMIx_Info_load(&init_info[3], PMIX_SERVER_RANK, &server_rank, PMIX_PROC_RANK);
    // No system-wide rendezvous files and no tool connections: only this job's ranks talk to us.
    PMIx_Info_load(&init_info[4], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
    PMIx_Info_load(&init_info[5], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
    PMIx_Info_load(&init_info[6], PMIX_SYSTEM_TMPDIR, system_dir.c_str(), PMIX_STRING);
    pmix_status_t rc = PMIX_SUCCESS;
    {
        AsynchronousSignalsHeld held;   // PMIx's progress thread inherits the mask: it must not take them
        rc = PMIx_server_init(upcalls, init_info, ninit);
    }
    PMIX_INFO_FREE(init_info, ninit);
    if (rc != PMIX_SUCCESS)
        return make_error("PMIx host on {}: PMIx_server_init failed with tmpdir {}: {}; check that the directory "
                          "exists and is writable",
                          node, job.tmpdir, pmix_error(rc));

    if (auto loaded = library_version(); loaded != pmix_build_version())
        pmix_log().warn("pmix: canopyd was built against PMIx {} but runs with {}; ranks started on demand are "
                        "told {}",
                        pmix_build_version(), loaded, pmix_build_version());

    auto address = own_address(job);
    if (!address) {
        PMIx_server_finalize();
        return address.error();
    }
    // The regex generators need an initialized PMIx, so the job info is built only now.
    if (auto registered = register_namespace(job, layout, std::move(job_registered)); !registered) {
        PMIx_server_finalize();
        return make_error("PMIx host on {}: {}", node, registered.error().message);
    }
    return *address;
}

Status register_namespace(const PmixJob& job, const RankLayout& layout, Registered done)
{
    auto job_info = make_job_info(job, layout);
    if (!job_info)
        return job_info.error();
    int local = job.node_index < 0 ? 0 : static_cast<int>(layout.local_size(job.node_index));
    // PMIx reads the info array until it calls back, so the callback owns it.
    auto info = std::make_shared<PmixInfoArray>(std::move(*job_info));
    pmix_status_t rc = start_op(
        [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
            return PMIx_server_register_nspace(job.nspace.c_str(), local, static_cast<pmix_info_t*>(info->data()),
                                               info->size(), cbfunc, cbdata);
        },
        [info, done = std::move(done)](pmix_status_t status) {
            if (done)
                done(status);
        });
    if (rc != PMIX_SUCCESS)
        return make_error("registering namespace {} failed: {}", job.nspace, pmix_error(rc));
    return {};
}

Status register_rank(const PmixJob& job, long rank, uid_t uid, gid_t gid, Registered done)
{
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, job.nspace.c_str(), static_cast<pmix_rank_t>(rank));
    pmix_status_t rc = start_op(
        [&](pmix_op_cbfunc_t cbfunc, void* cbdata) {
            return PMIx_server_register_client(&proc, uid, gid, nullptr, cbfunc, cbdata);
        },
        std::move(done));
    if (rc != PMIX_SUCCESS)
        return make_error("registering rank {} of {} failed: {}", rank, job.nspace, pmix_error(rc));
    return {};
}

Result<std::vector<std::string>> rank_environment(const PmixJob& job, long rank)
{
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, job.nspace.c_str(), static_cast<pmix_rank_t>(rank));
    char** env = static_cast<char**>(std::calloc(1, sizeof(char*)));
    if (!env)
        return make_error("PMIx host on {}: out of memory preparing rank {}", node_of(job), rank);
    pmix_status_t rc = PMIx_server_setup_fork(&proc, &env);
    std::vector<std::string> out;
    for (std::size_t i = 0; env && env[i]; ++i)
        out.emplace_back(env[i]);
    PMIX_ARGV_FREE(env);
    if (rc != PMIX_SUCCESS)
        return make_error("PMIx host on {}: PMIx_server_setup_fork for rank {} failed: {}", node_of(job), rank,
                          pmix_error(rc));
    for (auto& setting : canopy_pmix_settings())
        out.push_back(std::move(setting));
    return out;
}

void finalize_server(const std::vector<std::string>& nspaces, bool ended_abnormally)
{
    const std::string& nspace = nspaces.front();   // the job's
    if (ended_abnormally) {
        // PMIx 4.2.2 crashes in PMIx_server_finalize (about one run in three here) after clients were killed
        // inside a fence. The daemon exits after an aborted job anyway, so leave PMIx's state to process exit.
        // Deregistering the namespace still runs the cleanups the ranks registered (PMIX_REGISTER_CLEANUP).
        auto deregistered = deregister_all(nspaces);
        pmix_log().info("pmix: job {} ended abnormally; namespace deregistered: {}; skipping PMIx_server_finalize",
                        nspace, pmix_error(deregistered));
        g_server_abandoned = true;
        return;
    }

    // Deregister and finalize on a helper thread with a bound: whatever PMIx does, the daemon must get to exit.
    auto finished = std::make_shared<std::promise<void>>();
    auto result = finished->get_future();
    worker_thread([nspaces, finished] {
        auto deregistered = deregister_all(nspaces);
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

} // namespace canopy
