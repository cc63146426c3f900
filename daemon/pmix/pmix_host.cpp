// The PmixHost behind canopyd-pmix.so, wiring its parts: the server's life (server_lifecycle), PMIx's upcalls
// (upcalls) and the io thread's work on them (RequestRouter, with its pending table and rank tracker).
#include "pmix/pmix_host.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "pmix/module_log.hpp"
#include "pmix/pmix_commands.hpp"
#include "pmix/request_router.hpp"
#include "pmix/server_lifecycle.hpp"
#include "pmix/upcalls.hpp"

namespace canopy {
namespace {

// A registration PMIx failed after it was made: the rank fails by itself if it uses PMIx; the user learns why.
Registered report_failure(RouterLink link, std::string what)
{
    return [link, what = std::move(what)](pmix_status_t status) {
        if (status != PMIX_SUCCESS)
            link.post([what, status](RequestRouter& router) {
                router.report_error(fmt::format("{} with PMIx on {}: {}", what, router.node(), pmix_error(status)));
            });
    };
}

class PmixServerHost final : public PmixHost {
public:
    PmixServerHost(std::shared_ptr<RequestRouter> router, std::string server_uri)
        : router_(std::move(router)), server_uri_(std::move(server_uri))
    {
    }

    ~PmixServerHost() override
    {
        detach_upcalls();   // new upcalls now answer "not supported"
        // Release anyone still waiting before PMIx goes away; late tree replies find nothing pending.
        router_->close();
        std::vector<std::string> nspaces{router_->nspace()};
        for (const auto& ns : router_->namespaces().spawned_so_far())
            nspaces.push_back(ns.job.nspace);
        finalize_server(nspaces, router_->ranks().ended_abnormally());
    }

    Status add_namespace(PmixNamespace ns) override { return router_->add_namespace(std::move(ns)); }

    Result<std::vector<std::string>> prepare_rank(long rank, uid_t uid, gid_t gid) override
    {
        if (auto registered = register_rank(rank, uid, gid); !registered)
            return registered.error();
        auto who = router_->namespaces().proc_of(rank);
        return rank_environment(router_->namespaces().find(who->nspace)->job, who->rank);
    }

    Status register_rank(long rank, uid_t uid, gid_t gid) override
    {
        auto who = router_->namespaces().proc_of(rank);
        if (!who || !router_->is_local(rank))
            return make_error("PMIx host on {}: tree rank {} does not run on this node", router_->node(), rank);
        return canopy::register_rank(router_->namespaces().find(who->nspace)->job, who->rank, uid, gid,
                                     report_failure(router_->link(), fmt::format("cannot register rank {} of {}",
                                                                                 who->rank, who->nspace)));
    }

    const std::string& server_uri() const override { return server_uri_; }

    Status restart_job(const std::string& nspace) override
    {
        return router_->next_attempt(nspace, report_failure(router_->link(), fmt::format("cannot register job {}",
                                                                                        nspace)));
    }

    void serve_direct_modex(long rank, std::function<void(Status, Bytes)> done) override
    {
        router_->serve_direct_modex(rank, std::move(done));
    }

    void rank_exited(long rank, int wait_status) override { router_->rank_exited(rank, wait_status); }

    std::size_t pending_requests() const override { return router_->pending_requests(); }

    std::string job_control_prefix() const override { return pmix_command::packed(pmix_command::job_control); }
    std::string commit_prefix() const override { return pmix_command::packed(pmix_command::commit); }
    std::string publish_prefix() const override { return pmix_command::packed(pmix_command::publish); }

    std::vector<CleanupRegistration> registered_cleanups(std::string_view message) const override
    {
        return canopy::registered_cleanups(message);
    }

private:
    std::shared_ptr<RequestRouter> router_;
    std::string server_uri_;
};

} // namespace

Result<std::unique_ptr<PmixHost>> start_pmix_host(boost::asio::io_context& io, PmixJob job, JobExchange& exchange,
                                                  PmixDaemonCalls calls)
{
    auto layout = RankLayout::make(job);
    if (!layout)
        return layout.error();
    if (!calls.abort)
        return make_error("PMIx host for job {}: the daemon must provide abort", job.nspace);
    auto router = std::make_shared<RequestRouter>(io, job, *layout, exchange, std::move(calls));
    // Attached before init: PMIx may call up as soon as it starts.
    if (auto attached = attach_upcalls(router); !attached)
        return make_error("PMIx host for job {}: {}", job.nspace, attached.error().message);
    auto uri = start_server(job, *layout, upcall_table(),
                            report_failure(router->link(), fmt::format("cannot register job {}", job.nspace)));
    if (!uri) {
        detach_upcalls();
        return uri.error();
    }
    pmix_log().info("pmix: server up on {} for {} ({} ranks here of {}, tmpdir {})", router->node(), job.nspace,
                    layout->local_size(job.node_index), layout->job_size(), job.tmpdir);
    return std::unique_ptr<PmixHost>(new PmixServerHost(std::move(router), std::move(*uri)));
}

} // namespace canopy
