// --synthetic-ranks: a node's ranks replaced by in-process ones that go through the node's real exchange paths.
#include "synthetic/synthetic_ranks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "proc/memory_use.hpp"
#include "proc/rank_env.hpp"
#include "synthetic/pmi_rank.hpp"
#include "wire/codec.hpp"

namespace canopy {

namespace asio = boost::asio;

SyntheticRanks::SyntheticRanks(asio::io_context& io, synthetic::Spec spec, SyntheticNode node, JobExchange& exchange,
                               SyntheticTree tree)
    : io_(io), spec_(spec), node_(std::move(node)), exchange_(exchange), tree_(std::move(tree))
{
}

SyntheticRanks::~SyntheticRanks()
{
    lifetime_.end();
    stop();
}

Status SyntheticRanks::prepare_rank(RankLaunch& launch)
{
    if (spec_.path != synthetic::Path::pmi)
        return {};
    std::string fd = environment_value(launch.env, "PMI_FD");
    if (fd.empty())
        return make_error("synthetic rank {} on {} has no PMI connection: the PMI path needs simple PMI served "
                          "(--pmi all or simple)", launch.rank, node_.name);
    int own = ::fcntl(std::stoi(fd), F_DUPFD_CLOEXEC, 3);
    if (own < 0)
        return make_error("cannot keep synthetic rank {}'s PMI connection on {}", launch.rank, node_.name);
    pmi_fds_[launch.rank] = own;
    return {};
}

void SyntheticRanks::ranks_started()
{
    // What the exchange costs is measured from here: the node's state before it, its peak during it.
    reset_peak_memory();
    if (auto use = read_memory_use())
        baseline_bytes_ = use->resident_bytes;
    started_ = tree_.now();
    ranks_left_ = node_.local_size;
    if (ranks_left_ == 0)
        return finish();
    switch (spec_.path) {
    case synthetic::Path::pmi: return start_pmi_ranks();
    case synthetic::Path::pmix: return start_pmix_allgather();
    case synthetic::Path::dmodex: return start_direct_modex();
    }
}

void SyntheticRanks::start_pmi_ranks()
{
    // The puts' keys and values are what every node's PMI server holds after the barrier.
    for (long rank = 0; rank < node_.world_size; ++rank)
        result_bytes_ += synthetic::key_of(rank).size() + spec_.bytes;
    auto fds = std::move(pmi_fds_);
    pmi_fds_.clear();
    for (auto [rank, fd] : fds) {
        auto client = std::make_shared<SyntheticPmiRank>(io_, rank, fd, spec_, node_.world_size);
        pmi_ranks_.push_back(client);
        SyntheticPmiRank::Events events;
        events.entered_barrier = lifetime_.guard([this] { entered_fence(); });
        events.left_barrier = lifetime_.guard([this] { left_fence(); });
        asio::co_spawn(io_, client->run(std::move(events)),
                       lifetime_.guard([this, id = rank](std::exception_ptr exception, Status status) {
            rank_finished(id, exception ? Status(make_error("synthetic rank {}: internal error", id)) : status);
        }));
    }
}

std::string SyntheticRanks::local_value(long rank) const
{
    return rank == spec_.corrupt_rank ? synthetic::corrupted_value_of(rank, spec_.bytes)
                                      : synthetic::value_of(rank, spec_.bytes);
}

void SyntheticRanks::start_pmix_allgather()
{
    // Every local rank has committed: the node's blob goes into the fence, as the PMIx host's fence upcall sends it.
    std::vector<std::pair<long, std::string>> values;
    for (long rank = node_.first_rank; rank < node_.first_rank + node_.local_size; ++rank)
        values.emplace_back(rank, local_value(rank));
    pmix_fence(synthetic::encode_values(values), [this](Bytes result) {
        auto index = synthetic::ValueIndex::build(std::move(result), node_.world_size);
        if (!index) {
            rank_finished(node_.first_rank, index.error());
            return finish();
        }
        result_bytes_ = index->result_bytes();
        result_.emplace(std::move(*index));
        for (long reader = node_.first_rank; reader < node_.first_rank + node_.local_size; ++reader)
            for (long peer : synthetic::peers_of(reader, node_.world_size, spec_.ranks_per_node, spec_.gets)) {
                if (auto value = result_->find(peer))
                    check(reader, peer, *value);
                else
                    rank_finished(reader, make_error("synthetic rank {} found no value for rank {} in the PMIx "
                                                     "fence's result", reader, peer));
            }
        finish();
    });
}

void SyntheticRanks::start_direct_modex()
{
    // A fence without data (PMIx_Fence without PMIX_COLLECT_DATA): every value is committed once it returns, and is
    // then fetched from its node on first get, one request per remote rank whatever the local readers.
    pmix_fence({}, [this](Bytes) {
        issuing_ = true;
        for (long reader = node_.first_rank; reader < node_.first_rank + node_.local_size; ++reader)
            for (long peer : synthetic::peers_of(reader, node_.world_size, spec_.ranks_per_node, spec_.gets)) {
                if (peer >= node_.first_rank && peer < node_.first_rank + node_.local_size) {
                    check(reader, peer, local_value(peer));
                    continue;
                }
                if (auto known = fetched_.find(peer); known != fetched_.end()) {
                    check(reader, peer, known->second);
                    continue;
                }
                auto& waiting = readers_[peer];
                waiting.push_back(reader);
                if (waiting.size() > 1)
                    continue;   // already on its way
                ++fetches_;
                tree_.direct_modex(peer, lifetime_.guard([this, peer](Status got, Bytes value) {
                    fetched(peer, std::move(got), std::move(value));
                }));
            }
        issuing_ = false;
        if (readers_.empty())
            final_fence();
    });
}

void SyntheticRanks::pmix_fence(Bytes local, std::function<void(Bytes result)> then)
{
    in_fence_ = node_.local_size;
    fence_entered_ = tree_.now();
    whole_job_fence(std::move(local), lifetime_.guard([this, then = std::move(then)](Status status, Bytes result) {
        fence_done_ = tree_.now();
        if (!status) {
            rank_finished(node_.first_rank, make_error("the PMIx fence failed: {}", status.error().message));
            return finish();
        }
        then(std::move(result));
    }));
}

void SyntheticRanks::whole_job_fence(Bytes local, std::function<void(Status, Bytes)> done)
{
    exchange_.fence({}, std::move(local), std::move(done), wire::FenceDomain::pmix, false);
}

void SyntheticRanks::final_fence()
{
    // As MPI_Finalize fences: no node leaves while another may still fetch from it.
    whole_job_fence({}, lifetime_.guard([this](Status status, Bytes) {
        if (!status)
            rank_finished(node_.first_rank, make_error("the final PMIx fence failed: {}", status.error().message));
        finish();
    }));
}

void SyntheticRanks::fetched(long peer, Status status, Bytes value)
{
    auto waiting = readers_.find(peer);
    if (waiting == readers_.end())
        return;
    std::vector<long> readers = std::move(waiting->second);
    readers_.erase(waiting);
    if (!status) {
        rank_finished(readers.front(), make_error("synthetic rank {} could not fetch rank {}'s value: {}",
                                                  readers.front(), peer, status.error().message));
    } else {
        std::string text(value.begin(), value.end());
        for (long reader : readers)
            check(reader, peer, text);
        result_bytes_ += text.size();
        fetched_.emplace(peer, std::move(text));
    }
    if (readers_.empty() && !issuing_)
        final_fence();
}

void SyntheticRanks::check(long reader, long peer, std::string_view value)
{
    if (auto wrong = synthetic::check_value(reader, peer, value, spec_.bytes); !wrong.empty())
        rank_finished(reader, Error{wrong});
}

void SyntheticRanks::entered_fence()
{
    if (++in_fence_ == node_.local_size)
        fence_entered_ = tree_.now();
}

void SyntheticRanks::left_fence()
{
    if (fence_done_ == 0)
        fence_done_ = tree_.now();
}

void SyntheticRanks::rank_finished(long rank, Status status)
{
    if (!status && !failed_) {
        failed_ = true;   // the first failure ends the job; the rest follow from it
        tree_.fail(rank, fmt::format("{} (on {})", status.error().message, node_.name));
    }
    if (spec_.path == synthetic::Path::pmi && --ranks_left_ == 0)
        finish();
}

void SyntheticRanks::finish()
{
    if (finished_)
        return;
    finished_ = true;
    done_ = tree_.now();
    if (auto use = read_memory_use(); use && use->peak_bytes > baseline_bytes_)
        peak_over_baseline_bytes_ = use->peak_bytes - baseline_bytes_;
    for (auto& rank : pmi_ranks_)
        rank->close();   // after finalize: the PMI server hears an orderly end
    if (wake_)
        asio::post(io_, [wake = std::move(wake_)] { wake(); });
}

void SyntheticRanks::serve_requests(RoutedServices& services)
{
    services.serve<wire::DirectModexRequest>([this](long, wire::DirectModexRequest request, auto reply) {
        auto rank = static_cast<long>(request.rank);
        if (rank < node_.first_rank || rank >= node_.first_rank + node_.local_size)
            return reply(make_error("{} hosts no synthetic rank {}", node_.name, request.rank));
        std::string value = local_value(rank);
        reply(wire::ModexData{Bytes(value.begin(), value.end())});
    });
}

bool SyntheticRanks::drained(std::function<void()> wake)
{
    if (finished_ || stopped_)
        return true;
    wake_ = std::move(wake);
    return false;
}

void SyntheticRanks::record(timing::PhaseSet& phases, const std::string& node)
{
    if (!finished_)
        return;
    phases.add("synthetic.fence_entered", fence_entered_, node);
    phases.add("synthetic.fence_done", fence_done_, node);
    phases.add("synthetic.exchange_done", done_, node);
    phases.add("synthetic.fence.duration", fence_done_ - fence_entered_, node);
    // Sizes in KiB and the ratio in percent: the report shows those as whole numbers (timing/analysis.hpp).
    phases.add("synthetic.baseline_kib", static_cast<double>(baseline_bytes_) / 1024, node);
    phases.add("synthetic.peak_over_baseline_kib", static_cast<double>(peak_over_baseline_bytes_) / 1024, node);
    phases.add("synthetic.result_kib", static_cast<double>(result_bytes_) / 1024, node);
    if (result_bytes_ > 0)
        phases.add("synthetic.peak_ratio_percent",
                   100.0 * static_cast<double>(peak_over_baseline_bytes_) / static_cast<double>(result_bytes_), node);
    if (spec_.path == synthetic::Path::dmodex)
        phases.add("synthetic.fetch_messages", static_cast<double>(fetches_), node);
}

void SyntheticRanks::stop()
{
    if (stopped_)
        return;
    stopped_ = true;
    for (auto& rank : pmi_ranks_)
        rank->close();
    for (auto [rank, fd] : pmi_fds_)
        ::close(fd);
    pmi_fds_.clear();
}

} // namespace canopy
