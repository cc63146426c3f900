// Answers to PMIx, each delivered on PMIx's progress thread.
#include "pmix/pmix_answers.hpp"

#include <memory>

#include <spdlog/logger.h>

#include "pmix/module_log.hpp"
#include "pmix/published_values.hpp"

namespace canopy {

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

OpAnswer::OpAnswer(std::string nspace, pmix_op_cbfunc_t cbfunc, void* cbdata)
    : nspace_(std::move(nspace)), cbfunc_(cbfunc), cbdata_(cbdata)
{
}

void OpAnswer::operator()(pmix_status_t status, std::function<void()> then) const
{
    if (!cbfunc_ && !then)
        return;
    run_on_pmix_thread(nspace_, [cbfunc = cbfunc_, cbdata = cbdata_, status, then = std::move(then)] {
        if (cbfunc)
            cbfunc(status, cbdata);
        if (then)
            then();
    });
}

ModexAnswer::ModexAnswer(std::string nspace, pmix_modex_cbfunc_t cbfunc, void* cbdata)
    : nspace_(std::move(nspace)), cbfunc_(cbfunc), cbdata_(cbdata)
{
}

void ModexAnswer::operator()(pmix_status_t status, Bytes bytes) const
{
    if (!cbfunc_)
        return;
    auto* held = status == PMIX_SUCCESS && !bytes.empty() ? new Bytes(std::move(bytes)) : nullptr;
    run_on_pmix_thread(nspace_, [cbfunc = cbfunc_, cbdata = cbdata_, status, held] {
        if (!held) {
            cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
            return;
        }
        cbfunc(status, reinterpret_cast<const char*>(held->data()), held->size(), cbdata,
               [](void* p) { delete static_cast<Bytes*>(p); }, held);
    });
}

LookupAnswer::LookupAnswer(std::string nspace, pmix_lookup_cbfunc_t cbfunc, void* cbdata)
    : nspace_(std::move(nspace)), cbfunc_(cbfunc), cbdata_(cbdata)
{
}

void LookupAnswer::operator()(pmix_status_t status, const std::vector<std::pair<std::string, Bytes>>& found) const
{
    if (!cbfunc_)
        return;
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
    run_on_pmix_thread(nspace_, [cbfunc = cbfunc_, cbdata = cbdata_, rc, pdata, n, allocated]() mutable {
        cbfunc(rc, n > 0 ? pdata : nullptr, n, cbdata);
        if (pdata)
            PMIX_PDATA_FREE(pdata, allocated);   // PMIx packed its reply inside cbfunc
    });
}

SpawnAnswer::SpawnAnswer(std::string nspace, pmix_spawn_cbfunc_t cbfunc, void* cbdata)
    : nspace_(std::move(nspace)), cbfunc_(cbfunc), cbdata_(cbdata)
{
}

void SpawnAnswer::operator()(pmix_status_t status, const std::string& spawned) const
{
    if (!cbfunc_)
        return;
    run_on_pmix_thread(nspace_, [cbfunc = cbfunc_, cbdata = cbdata_, status, spawned] {
        pmix_nspace_t name;
        PMIX_LOAD_NSPACE(name, spawned.c_str());
        cbfunc(status, name, cbdata);
    });
}

InfoAnswer::InfoAnswer(std::string nspace, pmix_info_cbfunc_t cbfunc, void* cbdata)
    : nspace_(std::move(nspace)), cbfunc_(cbfunc), cbdata_(cbdata)
{
}

void InfoAnswer::operator()(pmix_status_t status, pmix_info_t* info, std::size_t ninfo) const
{
    if (!cbfunc_) {
        if (info)
            PMIX_INFO_FREE(info, ninfo);
        return;
    }
    struct Held {
        pmix_info_t* info;
        std::size_t ninfo;
    };
    auto* held = info ? new Held{info, ninfo} : nullptr;
    run_on_pmix_thread(nspace_, [cbfunc = cbfunc_, cbdata = cbdata_, status, held] {
        if (!held) {
            cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
            return;
        }
        cbfunc(status, held->info, held->ninfo, cbdata,
               [](void* p) {
                   std::unique_ptr<Held> h(static_cast<Held*>(p));
                   PMIX_INFO_FREE(h->info, h->ninfo);
               },
               held);
    });
}

} // namespace canopy
