// Rank placement arithmetic and the PMIx job info built from it.
#include "pmix/job_info.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <pmix.h>
#include <pmix_server.h>

namespace canopy {

Result<RankLayout> RankLayout::make(const PmixJob& job)
{
    if (job.nspace.empty() || job.nspace.size() > PMIX_MAX_NSLEN)
        return make_error("PMIx job: namespace '{}' must have 1 to {} characters", job.nspace, PMIX_MAX_NSLEN);
    if (job.hosts.empty())
        return make_error("PMIx job {}: no nodes given", job.nspace);
    if (job.hosts.size() != job.ranks_per_node.size())
        return make_error("PMIx job {}: {} node names but {} rank counts", job.nspace, job.hosts.size(),
                          job.ranks_per_node.size());
    if (job.node_index < -1 || job.node_index >= static_cast<long>(job.hosts.size()))
        return make_error("PMIx job {}: node index {} is outside 0..{}", job.nspace, job.node_index,
                          job.hosts.size() - 1);
    RankLayout layout;
    // PMIx's node map names every node: made here, when a PMIx server is made, not with every daemon's plan.
    layout.hosts_ = job.hosts.expand();
    const auto& hosts = layout.hosts_;
    std::uint64_t next = 0;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        // PMIx_generate_ppn cannot express an empty node, and a daemon without ranks hosts no PMIx clients.
        if (job.ranks_per_node[i] == 0)
            return make_error("PMIx job {}: node {} ({}) has no ranks; give every node at least one rank",
                              job.nspace, i, hosts[i]);
        if (hosts[i].empty() || hosts[i].find_first_of(",;") != std::string::npos)
            return make_error("PMIx job {}: node {} has the name '{}', which is empty or contains ',' or ';'",
                              job.nspace, i, hosts[i]);
        if (job.ranks_per_node[i] > 65535)
            return make_error("PMIx job {}: node {} ({}) has {} ranks; PMIx local ranks stop at 65535",
                              job.nspace, i, hosts[i], job.ranks_per_node[i]);
        next += job.ranks_per_node[i];
    }
    // pmix_rank_t is 32 bits and its top values are reserved (WILDCARD, UNDEF, ...).
    if (next >= 0xffff0000ULL)
        return make_error("PMIx job {}: {} ranks is more than PMIx can name", job.nspace, next);
    if (!job.ranks_per_app.empty() && RankBlocks(job.ranks_per_app).world_size() != static_cast<long>(next))
        return make_error("PMIx job {}: its programs have {} ranks, its nodes {}", job.nspace,
                          RankBlocks(job.ranks_per_app).world_size(), next);
    layout.blocks_ = RankBlocks(job.ranks_per_node);
    return layout;
}

std::string RankLayout::node_list() const
{
    return fmt::format("{}", fmt::join(hosts_, ","));
}

std::string RankLayout::ppn_list() const
{
    std::string out;
    for (long node = 0; node < blocks_.nodes(); ++node) {
        if (node > 0)
            out += ';';
        // Every rank spelled out: PMIx 4.2.2 hands each node's field back verbatim as PMIX_LOCAL_PEERS and counts
        // commas for PMIX_LOCAL_SIZE, so "0-3" would read as one peer. The regex still compresses the list.
        out += local_peers(node);
    }
    return out;
}

std::string RankLayout::local_peers(long node) const
{
    std::string out;
    long first = blocks_.first_rank(node), end = first + blocks_.local_size(node);
    out.reserve(static_cast<std::size_t>(end - first) * 6);
    for (auto r = first; r < end; ++r) {
        if (r > first)
            out += ',';
        out += std::to_string(r);
    }
    return out;
}

PmixInfoArray::PmixInfoArray(PmixInfoArray&& other) noexcept
    : info_(std::exchange(other.info_, nullptr)), count_(std::exchange(other.count_, 0))
{
}

PmixInfoArray& PmixInfoArray::operator=(PmixInfoArray&& other) noexcept
{
    if (this != &other) {
        PmixInfoArray old(std::move(*this));
        info_ = std::exchange(other.info_, nullptr);
        count_ = std::exchange(other.count_, 0);
    }
    return *this;
}

PmixInfoArray::~PmixInfoArray()
{
    auto* info = static_cast<pmix_info_t*>(info_);
    PMIX_INFO_FREE(info, count_);
}

namespace {

// A PMIx info list that releases itself; add() remembers the first failure so callers check once.
class InfoList {
public:
    InfoList() : list_(PMIx_Info_list_start()) {}
    ~InfoList() { PMIx_Info_list_release(list_); }
    InfoList(const InfoList&) = delete;
    InfoList& operator=(const InfoList&) = delete;

    void add(const char* key, const void* value, pmix_data_type_t type)
    {
        pmix_status_t rc = list_ ? PMIx_Info_list_add(list_, key, value, type) : PMIX_ERR_NOMEM;
        if (rc != PMIX_SUCCESS && failed_key_.empty())
            failed_key_ = fmt::format("{} ({})", key, PMIx_Error_string(rc));
    }
    // Adds this list's contents as one PMIX_DATA_ARRAY value of another list.
    void add_to(InfoList& outer, const char* key)
    {
        pmix_data_array_t array;
        pmix_status_t rc = PMIx_Info_list_convert(list_, &array);
        if (rc != PMIX_SUCCESS) {
            if (outer.failed_key_.empty())
                outer.failed_key_ = fmt::format("{} ({})", key, PMIx_Error_string(rc));
            return;
        }
        outer.add(key, &array, PMIX_DATA_ARRAY);   // copies the array
        PMIx_Data_array_destruct(&array);
        if (!failed_key_.empty() && outer.failed_key_.empty())
            outer.failed_key_ = failed_key_;
    }
    const std::string& failed_key() const { return failed_key_; }

    Result<PmixInfoArray> take()
    {
        pmix_data_array_t array;
        pmix_status_t rc = PMIx_Info_list_convert(list_, &array);
        if (rc != PMIX_SUCCESS)
            return make_error("PMIx job info: cannot build the info array ({})", PMIx_Error_string(rc));
        // The converted array owns its pmix_info_t block; keep it and drop the wrapper.
        PmixInfoArray out(array.array, array.size);
        return out;
    }

private:
    void* list_;
    std::string failed_key_;
};

} // namespace

Result<PmixInfoArray> make_job_info(const PmixJob& job, const RankLayout& layout)
{
    char* node_regex = nullptr;
    char* ppn_regex = nullptr;
    std::string nodes = layout.node_list(), ppn = layout.ppn_list();
    if (pmix_status_t rc = PMIx_generate_regex(nodes.c_str(), &node_regex); rc != PMIX_SUCCESS)
        return make_error("PMIx job {}: PMIx_generate_regex failed on the node list ({})", job.nspace,
                          PMIx_Error_string(rc));
    if (pmix_status_t rc = PMIx_generate_ppn(ppn.c_str(), &ppn_regex); rc != PMIX_SUCCESS) {
        std::free(node_regex);
        return make_error("PMIx job {}: PMIx_generate_ppn failed on the rank map ({})", job.nspace,
                          PMIx_Error_string(rc));
    }

    const long node = job.node_index;
    const auto job_size = static_cast<std::uint32_t>(layout.job_size());
    const auto universe_size = static_cast<std::uint32_t>(std::max<std::uint64_t>(job.universe_size, job_size));
    const auto num_nodes = static_cast<std::uint32_t>(layout.node_count());
    // An MPMD job's programs take ranks in blocks, as nodes do.
    const RankBlocks apps(job.ranks_per_app.empty() ? std::vector<std::uint64_t>{job_size} : job.ranks_per_app);
    const auto num_apps = static_cast<std::uint32_t>(apps.nodes());

    InfoList info;
    // Maps as PMIX_REGEX: passed as strings they break above 4 KB (REFERENCE.md).
    info.add(PMIX_NODE_MAP, node_regex, PMIX_REGEX);
    info.add(PMIX_PROC_MAP, ppn_regex, PMIX_REGEX);
    std::free(node_regex);
    std::free(ppn_regex);
    info.add(PMIX_JOBID, job.nspace.c_str(), PMIX_STRING);
    info.add(PMIX_UNIV_SIZE, &universe_size, PMIX_UINT32);
    info.add(PMIX_JOB_SIZE, &job_size, PMIX_UINT32);
    info.add(PMIX_MAX_PROCS, &job_size, PMIX_UINT32);
    info.add(PMIX_NUM_NODES, &num_nodes, PMIX_UINT32);
    info.add(PMIX_JOB_NUM_APPS, &num_apps, PMIX_UINT32);
    for (long app = 0; app < apps.nodes(); ++app) {
        const auto appnum = static_cast<std::uint32_t>(app);
        const auto app_size = static_cast<std::uint32_t>(apps.local_size(app));
        const auto app_leader = static_cast<pmix_rank_t>(apps.first_rank(app));
        if (num_apps == 1)   // the job's one program: also job-level, as before there were several
            info.add(PMIX_APPNUM, &appnum, PMIX_UINT32);
        InfoList app_info;
        app_info.add(PMIX_APPNUM, &appnum, PMIX_UINT32);   // which program the rest is about
        app_info.add(PMIX_APP_SIZE, &app_size, PMIX_UINT32);
        app_info.add(PMIX_APPLDR, &app_leader, PMIX_PROC_RANK);
        app_info.add_to(info, PMIX_APP_INFO_ARRAY);
    }
    if (!job.parent_nspace.empty()) {
        pmix_proc_t parent;
        PMIX_LOAD_PROCID(&parent, job.parent_nspace.c_str(), static_cast<pmix_rank_t>(job.parent_rank));
        bool spawned = true;
        info.add(PMIX_PARENT_ID, &parent, PMIX_PROC);
        info.add(PMIX_SPAWNED, &spawned, PMIX_BOOL);
    }
    // A spawned namespace with no rank on this node: its maps, and nothing about this node.
    if (node < 0) {
        if (!info.failed_key().empty())
            return make_error("PMIx job {}: cannot store job info key {}", job.nspace, info.failed_key());
        return info.take();
    }
    const auto local_size = static_cast<std::uint32_t>(layout.local_size(node));
    const auto node_id = static_cast<std::uint32_t>(node);
    const pmix_rank_t local_leader = static_cast<pmix_rank_t>(layout.first_rank(node));
    const std::string peers = layout.local_peers(node);
    const std::string hostname = job.hosts[static_cast<std::size_t>(node)];
    // Job-level copies of this node's facts: Open MPI 4.1 asks for them with the wildcard rank.
    info.add(PMIX_LOCAL_SIZE, &local_size, PMIX_UINT32);
    info.add(PMIX_LOCAL_PEERS, peers.c_str(), PMIX_STRING);
    info.add(PMIX_LOCALLDR, &local_leader, PMIX_PROC_RANK);
    info.add(PMIX_NODEID, &node_id, PMIX_UINT32);
    info.add(PMIX_HOSTNAME, hostname.c_str(), PMIX_STRING);

    // Node-level info for this node only. Every node's hostname already follows from the two maps; registering
    // all nodes made each daemon's registration O(nodes), about 5 ms of CPU per daemon at 256 nodes.
    InfoList node_info;
    node_info.add(PMIX_NODEID, &node_id, PMIX_UINT32);
    node_info.add(PMIX_HOSTNAME, hostname.c_str(), PMIX_STRING);
    node_info.add(PMIX_LOCAL_SIZE, &local_size, PMIX_UINT32);
    node_info.add(PMIX_NODE_SIZE, &local_size, PMIX_UINT32);
    node_info.add(PMIX_LOCALLDR, &local_leader, PMIX_PROC_RANK);
    node_info.add(PMIX_LOCAL_PEERS, peers.c_str(), PMIX_STRING);
    node_info.add_to(info, PMIX_NODE_INFO);

    // Per-rank data for this node's ranks only. PMIx derives every rank's hostname from the two maps, so
    // registration stays O(local ranks + nodes) however large the job is. (PMIx 4.2.2 does not answer PMIX_NODEID
    // for a rank on another node even when every rank's data is registered: it asks that node's blob instead.)
    for (long r = layout.first_rank(node); r < layout.first_rank(node) + static_cast<long>(local_size); ++r) {
        const pmix_rank_t rank = static_cast<pmix_rank_t>(r);
        const std::uint16_t local_rank = layout.local_rank(r);
        const auto appnum = static_cast<std::uint32_t>(std::max(0L, apps.node_of(r)));
        const auto app_rank = static_cast<pmix_rank_t>(r - apps.first_rank(appnum));
        InfoList proc;
        proc.add(PMIX_RANK, &rank, PMIX_PROC_RANK);
        proc.add(PMIX_GLOBAL_RANK, &rank, PMIX_PROC_RANK);
        proc.add(PMIX_APPNUM, &appnum, PMIX_UINT32);
        proc.add(PMIX_APP_RANK, &app_rank, PMIX_PROC_RANK);
        proc.add(PMIX_LOCAL_RANK, &local_rank, PMIX_UINT16);
        proc.add(PMIX_NODE_RANK, &local_rank, PMIX_UINT16);
        proc.add(PMIX_HOSTNAME, hostname.c_str(), PMIX_STRING);
        proc.add(PMIX_NODEID, &node_id, PMIX_UINT32);
        auto local = static_cast<std::size_t>(local_rank);
        if (local < job.local_cpusets.size() && !job.local_cpusets[local].empty()) {
            proc.add(PMIX_CPUSET, job.local_cpusets[local].c_str(), PMIX_STRING);
            if (local < job.local_localities.size() && !job.local_localities[local].empty())
                proc.add(PMIX_LOCALITY_STRING, job.local_localities[local].c_str(), PMIX_STRING);
        }
        proc.add_to(info, PMIX_PROC_DATA);
    }

    if (!info.failed_key().empty())
        return make_error("PMIx job {}: cannot store job info key {}", job.nspace, info.failed_key());
    return info.take();
}

} // namespace canopy
