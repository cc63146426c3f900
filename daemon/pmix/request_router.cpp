// PMIx's requests on the io thread: to the tree, through the pending table, and back to PMIx.
#include "pmix/request_router.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <pmix.h>
#include <spdlog/logger.h>

#include "pmix/module_log.hpp"
#include "pmix/query_answers.hpp"
#include "pmix/server_lifecycle.hpp"
#include "pmix/server_lifecycle.hpp"

namespace canopy {

namespace asio = boost::asio;

namespace {

// A request's answer from PMIx's thread.
void complete_later(const RouterLink& link, std::uint64_t id, int status, Bytes bytes)
{
    link.post([id, status, bytes = std::move(bytes)](RequestRouter& router) mutable {
        router.complete(id, status, std::move(bytes));
    });
}

} // namespace

RequestRouter::RequestRouter(asio::io_context& io, PmixJob job, RankLayout layout, JobExchange& exchange,
                             PmixDaemonCalls calls)
    : io_(io),
      job_(std::move(job)),
      layout_(std::move(layout)),
      exchange_(exchange),
      calls_(std::move(calls)),
      node_(job_.hosts.at(static_cast<std::size_t>(job_.node_index))),
      namespaces_(job_),
      ranks_(node_, [this](long rank) { return namespaces_.rank_name(rank); }),
      pending_(io, PMIX_ERR_TIMEOUT)
{
}

void RequestRouter::client_connected(long rank, const OpAnswer& answer)
{
    pmix_log().debug("pmix: {} connected", ranks_.label(rank));
    if (auto loss = ranks_.loss_found_by_connect())
        report_lost(*loss);
    answer(PMIX_SUCCESS);   // 4.2.2 passes no callback here; a later version may
}

void RequestRouter::client_finalized(long rank, const OpAnswer& answer)
{
    pmix_log().debug("pmix: {} finalized", ranks_.label(rank));
    answer(PMIX_SUCCESS);   // without it the client hangs in PMIx_Finalize
}

void RequestRouter::abort(long rank, int status, const std::string& message, const OpAnswer& answer)
{
    pmix_log().info("pmix: {} called PMIx_Abort with status {}: {}", ranks_.label(rank), status, message);
    // Release the client first and only then start the teardown: killing ranks while PMIx still holds the abort
    // request crashes PMIx 4.2.2's progress thread (seen with MALLOC_PERTURB_).
    answer(PMIX_SUCCESS, [link = link(), rank, status, message] {
        link.post([rank, status, message](RequestRouter& router) {
            std::string line = fmt::format("{} called PMIx_Abort with status {}", router.ranks_.label(rank), status);
            if (!message.empty())
                line += ": " + message;
            router.report_abort(rank, status, line);
        });
    });
}

std::vector<long> RequestRouter::tree_participants(std::vector<long> participants, bool whole_job) const
{
    auto job_size = static_cast<long>(layout_.job_size());
    std::sort(participants.begin(), participants.end());
    participants.erase(std::unique(participants.begin(), participants.end()), participants.end());
    bool only_job = participants.empty() || participants.back() < job_size;
    if (only_job && (whole_job || static_cast<long>(participants.size()) == job_size))
        return {};
    if (whole_job) {   // the whole job and ranks of a spawned namespace: name the job's ranks one by one
        for (long rank = 0; rank < job_size; ++rank)
            participants.push_back(rank);
        std::sort(participants.begin(), participants.end());
        participants.erase(std::unique(participants.begin(), participants.end()), participants.end());
    }
    return participants;
}

void RequestRouter::fence(FenceCall call, ModexAnswer answer)
{
    auto participants = tree_participants(std::move(call.participants), call.whole_job);
    std::uint64_t id = pending_.add(
        {participants.empty(), participants},
        [answer = std::move(answer)](int status, Bytes bytes) { answer(status, std::move(bytes)); },
        std::chrono::seconds(call.timeout_s), "fence");
    // What the relay let through is within the limit already (PmixNode): this is for ranks that reach the server
    // another way (--pmix eager), before their data goes up the tree.
    if (calls_.within_limit && !call.local.empty() &&
        !calls_.within_limit(local_participants(participants), call.local.size(), "a PMIx fence")) {
        pending_.complete(id, PMIX_ERR_OUT_OF_RESOURCE, {});
        return;
    }
    pmix_log().debug("pmix: fence {} over {} ranks, collect={}, {} bytes from {}", id,
                     participants.empty() ? layout_.job_size() : participants.size(), call.collect, call.local.size(),
                     node_);
    contribute(id, call.local_status, "fence",
               [this, participants = std::move(participants),
                local = std::move(call.local)](std::function<void(Status, Bytes)> reply) mutable {
                   exchange_.fence(std::move(participants), std::move(local), std::move(reply), wire::FenceDomain::pmix,
                                   false);
               });
}

std::vector<long> RequestRouter::local_participants(const std::vector<long>& participants) const
{
    std::vector<long> local;
    if (participants.empty()) {   // the whole job
        long first = layout_.first_rank(job_.node_index);
        for (long rank = first; rank < first + static_cast<long>(layout_.local_size(job_.node_index)); ++rank)
            local.push_back(rank);
        return local;
    }
    std::copy_if(participants.begin(), participants.end(), std::back_inserter(local),
                 [this](long rank) { return is_local(rank); });
    return local;
}

void RequestRouter::contribute(std::uint64_t id, int local_status, const char* what,
                               std::function<void(std::function<void(Status, Bytes)>)> send)
{
    if (local_status == PMIX_SUCCESS) {
        send(tree_reply(id, what));
        return;
    }
    // A local participant died. Our ranks get the error and the other nodes our contribution (so none waits on
    // this node), but only once the dead rank's loss is on its way to the launcher, or after a second should its
    // exit never be seen: otherwise a rank failing because of the collective could be reported before the rank
    // that died, and the user would be pointed at the wrong rank.
    pmix_log().info("pmix: {} {} failed locally: {}", what, id, pmix_error(local_status));
    auto deferred = std::make_shared<std::function<void()>>([this, id, local_status, send = std::move(send)] {
        pending_.complete(id, local_status, {});
        send([](Status, Bytes) {});
    });
    auto once = [deferred] {
        if (auto run = std::exchange(*deferred, nullptr))
            run();
    };
    if (ranks_.abort_claimed()) {
        once();
        return;
    }
    held_contributions_.push_back(once);
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(1));
    timer->async_wait([link = link(), timer, once](const boost::system::error_code& error) {
        if (!error)
            link.run([&once](RequestRouter&) { once(); });
    });
}

Status RequestRouter::add_namespace(PmixNamespace ns)
{
    auto layout = RankLayout::make(ns.job);
    if (!layout)
        return layout.error();
    auto nspace = ns.job.nspace;
    auto job = ns.job;
    if (auto added = namespaces_.add(std::move(ns)); !added)
        return added;
    return register_namespace(job, *layout, [link = link(), nspace](pmix_status_t status) {
        if (status != PMIX_SUCCESS)
            link.post([nspace, status](RequestRouter& router) {
                router.report_error(fmt::format("cannot register the spawned namespace {} with PMIx on {}: {}",
                                                nspace, router.node(), pmix_error(status)));
            });
    });
}

void RequestRouter::spawn(wire::SpawnRequest request, SpawnAnswer answer)
{
    if (!calls_.spawn) {
        answer(PMIX_ERR_NOT_SUPPORTED, "");
        return;
    }
    // Pending, so that the host closing answers the caller too.
    auto spawned = std::make_shared<std::string>();
    std::uint64_t id = pending_.add(
        {}, [answer = std::move(answer), spawned](int status, Bytes) { answer(status, *spawned); },
        std::chrono::seconds(0), "spawn");
    pmix_log().info("pmix: tree rank {} spawns {} x {}", request.parent_rank, request.count, request.argv.at(0));
    calls_.spawn(std::move(request), [link = link(), id, spawned](Status status, wire::SpawnReply reply) {
        link.run([&](RequestRouter& router) {
            // The caller gets only a status; the user gets the reason, which names the limit.
            if (!status.ok())
                router.report_error(fmt::format("PMIx_Spawn from {}: {}", router.node(), status.error().message));
            // The namespace-start reached this node before the reply did, so PMIx knows the namespace by now.
            *spawned = reply.nspace;
            router.complete(id, status.ok() ? PMIX_SUCCESS : PMIX_ERR_OUT_OF_RESOURCE, {});
        });
    });
}

void RequestRouter::query(std::vector<std::vector<std::string>> keys, InfoAnswer answer)
{
    std::vector<std::string> nspaces{nspace()};
    for (const auto& ns : namespaces_.spawned_so_far())
        nspaces.push_back(ns.job.nspace);
    auto results = answer_queries(keys, {nspaces, {PMIX_HOST, PMIX_WDIR, PMIX_MAPBY, PMIX_PPR}});
    if (results.found.empty()) {
        answer(PMIX_ERR_NOT_FOUND, nullptr, 0);
        return;
    }
    pmix_info_t* info = nullptr;
    PMIX_INFO_CREATE(info, results.found.size());
    for (std::size_t i = 0; i < results.found.size(); ++i) {
        const auto& [key, value] = results.found[i];
        if (auto* text = std::get_if<std::string>(&value))
            PMIX_INFO_LOAD(&info[i], key.c_str(), text->c_str(), PMIX_STRING);
        else
            PMIX_INFO_LOAD(&info[i], key.c_str(), &std::get<std::size_t>(value), PMIX_SIZE);
    }
    answer(results.outcome == QueryResults::Outcome::all ? PMIX_SUCCESS : PMIX_ERR_PARTIAL_SUCCESS, info,
           results.found.size());
}

void RequestRouter::connect(ConnectCall call, OpAnswer answer, const char* what)
{
    auto participants = tree_participants(std::move(call.participants), call.whole_job);
    std::uint64_t id = pending_.add(
        {participants.empty(), participants}, [answer = std::move(answer)](int status, Bytes) { answer(status); },
        std::chrono::seconds(call.timeout_s), what);
    pmix_log().debug("pmix: {} {} over {} ranks from {}", what, id,
                     participants.empty() ? layout_.job_size() : participants.size(), node_);
    contribute(id, call.local_status, what,
               [this, participants = std::move(participants),
                failed = call.local_status != PMIX_SUCCESS](std::function<void(Status, Bytes)> reply) mutable {
                   // A fence without data, numbered apart from the job's fences.
                   exchange_.fence(std::move(participants), {}, std::move(reply), wire::FenceDomain::pmix_connect,
                                   failed);
               });
}

void RequestRouter::direct_modex(long rank, int timeout_s, ModexAnswer answer)
{
    if (!namespaces_.proc_of(rank)) {
        answer(PMIX_ERR_NOT_FOUND, {});
        return;
    }
    std::uint64_t id = pending_.add(
        {false, {rank}}, [answer = std::move(answer)](int status, Bytes bytes) { answer(status, std::move(bytes)); },
        std::chrono::seconds(timeout_s), "direct modex");
    pmix_log().debug("pmix: direct modex {} for tree rank {}", id, rank);
    calls_.direct_modex(rank, tree_reply(id, "direct modex"));
}

void RequestRouter::publish(long rank, std::vector<std::pair<std::string, Bytes>> data, OpAnswer answer)
{
    // Published values stay at the root until unpublished: they count against the rank's limit until then.
    if (calls_.keep)
        for (const auto& [key, value] : data)
            if (!calls_.keep(rank, "pmix-name:" + key, key.size() + value.size(), "PMIx_Publish")) {
                answer(PMIX_ERR_OUT_OF_RESOURCE);
                return;
            }
    std::uint64_t id = pending_.add(
        {}, [answer = std::move(answer)](int status, Bytes) { answer(status); }, std::chrono::seconds(0), "publish");
    // A refused publish (a key taken already) is answered as a plain error.
    exchange_.publish(std::move(data), [reply = tree_reply(id, "publish")](Status status) { reply(status, {}); });
}

void RequestRouter::lookup(std::vector<std::string> keys, std::size_t wait_for, int timeout_s, LookupAnswer answer)
{
    // The found values wait beside the pending request, so that a timeout can answer it too.
    auto found = std::make_shared<std::vector<std::pair<std::string, Bytes>>>();
    std::uint64_t id = pending_.add(
        {}, [answer = std::move(answer), found](int status, Bytes) { answer(status, *found); },
        std::chrono::seconds(timeout_s), "lookup");
    exchange_.lookup(
        std::move(keys),
        [reply = tree_reply(id, "lookup"), found](Status status, std::vector<std::pair<std::string, Bytes>> values) {
            *found = std::move(values);
            reply(status, {});
        },
        wait_for);
}

void RequestRouter::unpublish(long rank, std::vector<std::string> keys, OpAnswer answer)
{
    if (calls_.drop)
        for (const auto& key : keys)
            calls_.drop(rank, "pmix-name:" + key);
    std::uint64_t id = pending_.add(
        {}, [answer = std::move(answer)](int status, Bytes) { answer(status); }, std::chrono::seconds(0),
        "unpublish");
    exchange_.unpublish(std::move(keys), [reply = tree_reply(id, "unpublish")](Status status) { reply(status, {}); });
}

std::function<void(Status, Bytes)> RequestRouter::tree_reply(std::uint64_t id, const char* what)
{
    return [link = link(), id, what](Status status, Bytes bytes) {
        link.run([&](RequestRouter& router) {
            // Once a rank here was lost or aborted, the job is ending or restarting: a failure is its consequence.
            if (!status.ok())
                pmix_log().log(router.ranks().abort_claimed() ? spdlog::level::info : spdlog::level::warn,
                               "pmix: {} failed: {}", what, status.error().message);
            router.complete(id, status.ok() ? PMIX_SUCCESS : PMIX_ERROR, std::move(bytes));
        });
    };
}

void RequestRouter::serve_direct_modex(long rank, std::function<void(Status, Bytes)> done)
{
    if (!is_local(rank)) {
        asio::post(io_, [done = std::move(done), rank, node = node_] {
            done(make_error("PMIx direct modex: rank {} is not on {}", rank, node), {});
        });
        return;
    }
    std::uint64_t id = pending_.add(
        {false, {rank}},
        [done, rank, node = node_](int status, Bytes bytes) {
            if (status == PMIX_SUCCESS)
                done(Status{}, std::move(bytes));
            else
                done(make_error("PMIx direct modex for rank {} on {} failed: {}", rank, node, pmix_error(status)),
                     {});
        },
        std::chrono::seconds(0), "serving a direct modex");
    // PMIx answers on its thread once the rank has committed its data.
    struct Request {
        RouterLink link;
        std::uint64_t id;
    };
    auto who = namespaces_.proc_of(rank);   // is_local above found it
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, who->nspace.c_str(), static_cast<pmix_rank_t>(who->rank));
    auto* request = new Request{link(), id};
    pmix_status_t rc = PMIx_server_dmodex_request(
        &proc,
        [](pmix_status_t status, char* data, std::size_t size, void* cbdata) {
            std::unique_ptr<Request> answered(static_cast<Request*>(cbdata));
            complete_later(answered->link, answered->id, status,
                           Bytes(reinterpret_cast<std::uint8_t*>(data), reinterpret_cast<std::uint8_t*>(data) + size));
        },
        request);
    if (rc != PMIX_SUCCESS) {
        delete request;
        complete_later(link(), id, rc, {});
    }
}

void RequestRouter::rank_exited(long rank, int wait_status)
{
    if (auto loss = ranks_.exited(rank, wait_status))
        report_lost(*loss);
}

void RequestRouter::report_error(const std::string& message)
{
    if (calls_.report_error)
        calls_.report_error(message);
    else
        pmix_log().warn("pmix: {}", message);
}

void RequestRouter::close()
{
    pending_.fail_all(PMIX_ERR_UNREACH);
    closed_ = true;
}

Status RequestRouter::next_attempt(const std::string& nspace, std::function<void(pmix_status_t)> registered)
{
    pending_.fail_all(PMIX_ERR_UNREACH);
    held_contributions_.clear();
    ranks_.next_attempt();
    job_.nspace = nspace;
    namespaces_.rename_job(nspace);
    return register_namespace(job_, layout_, std::move(registered));
}

// The rank can no longer take part in collectives: fail what waits on it, tell its peers and the daemon.
void RequestRouter::report_lost(const RankTracker::Loss& loss)
{
    pending_.fail_waiting_on(loss.rank, PMIX_ERR_PROC_TERM_WO_SYNC);
    if (ranks_.abort_claimed()) {
        pmix_log().info("pmix: {} (job already being torn down)", loss.message);
        return;
    }
    pmix_log().info("pmix: {}", loss.message);   // the launcher prints it for the user
    notify_local_peers(loss.rank, loss.code);
    report_abort(loss.rank, loss.code, loss.message);
}

void RequestRouter::report_abort(long rank, int status, const std::string& message)
{
    if (!ranks_.claim_abort())
        return;
    if (calls_.abort)
        calls_.abort(rank, status, message);
    release_held_contributions();
}

// The loss report has gone up the same link first, so the launcher names the rank that died rather than a rank on
// another node that failed because the fence did.
void RequestRouter::release_held_contributions()
{
    auto held = std::move(held_contributions_);
    held_contributions_.clear();
    for (auto& send : held)
        send();
}

void RequestRouter::notify_local_peers(long rank, int code)
{
    struct Notice {
        pmix_proc_t affected;
        pmix_info_t* info = nullptr;
        std::size_t ninfo = 2;
    };
    auto who = namespaces_.proc_of(rank);
    if (!who)
        return;
    auto* notice = new Notice;
    PMIX_LOAD_PROCID(&notice->affected, who->nspace.c_str(), static_cast<pmix_rank_t>(who->rank));
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
            pmix_log().warn("pmix: cannot notify the ranks on {} that rank {} is gone: {}", node_, rank,
                            pmix_error(rc));
        PMIX_INFO_FREE(notice->info, notice->ninfo);
        delete notice;
    }
}

} // namespace canopy
