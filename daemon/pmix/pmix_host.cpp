// The PmixHost behind canopyd-pmix.so, wiring its parts: the server's life (server_lifecycle), PMIx's upcalls
// (upcalls) and the io thread's work on them (RequestRouter, with its pending table and rank tracker).
#include "pmix/pmix_host.hpp"

#include <spdlog/logger.h>

#include "pmix/module_log.hpp"
#include "pmix/request_router.hpp"
#include "pmix/server_lifecycle.hpp"
#include "pmix/upcalls.hpp"

namespace canopy {
namespace {

class PmixServerHost final : public PmixHost {
public:
    explicit PmixServerHost(std::shared_ptr<RequestRouter> router) : router_(std::move(router)) {}

    ~PmixServerHost() override
    {
        detach_upcalls();   // new upcalls now answer "not supported"
        // Release anyone still waiting before PMIx goes away; late tree replies find nothing pending.
        router_->close();
        finalize_server(router_->nspace(), router_->ranks().ended_abnormally());
    }

    Result<std::vector<std::string>> prepare_rank(long rank, uid_t uid, gid_t gid) override
    {
        const PmixJob& job = router_->job();
        if (!router_->is_local(rank))
            return make_error("PMIx host on {}: rank {} does not run on this node", router_->node(), rank);
        if (auto registered = register_rank(job, rank, uid, gid); !registered)
            return registered.error();
        return rank_environment(job, rank);
    }

    void serve_direct_modex(long rank, std::function<void(Status, Bytes)> done) override
    {
        router_->serve_direct_modex(rank, std::move(done));
    }

    void rank_exited(long rank, int wait_status) override { router_->rank_exited(rank, wait_status); }

    std::size_t pending_requests() const override { return router_->pending_requests(); }

private:
    std::shared_ptr<RequestRouter> router_;
};

} // namespace

Result<std::unique_ptr<PmixHost>> start_pmix_host(boost::asio::io_context& io, PmixJob job, PmixTree tree)
{
    auto layout = RankLayout::make(job);
    if (!layout)
        return layout.error();
    if (!tree.fence || !tree.abort)
        return make_error("PMIx host for job {}: the tree must provide at least fence and abort", job.nspace);
    auto router = std::make_shared<RequestRouter>(io, job, *layout, std::move(tree));
    // Attached before init: PMIx may call up as soon as it starts.
    if (auto attached = attach_upcalls(router); !attached)
        return make_error("PMIx host for job {}: {}", job.nspace, attached.error().message);
    if (auto started = start_server(job, *layout, upcall_table()); !started) {
        detach_upcalls();
        return started.error();
    }
    pmix_log().info("pmix: server up on {} for {} ({} ranks here of {}, tmpdir {})", router->node(), job.nspace,
                    layout->local_size(job.node_index), layout->job_size(), job.tmpdir);
    return std::unique_ptr<PmixHost>(new PmixServerHost(std::move(router)));
}

} // namespace canopy
