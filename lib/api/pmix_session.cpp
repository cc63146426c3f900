// PMIx client calls behind libcanopy's put/commit/fence/get and the PMIx launcher's job information.
#include "api/pmix_session.hpp"

#include <unistd.h>

#include <cstring>
#include <optional>

namespace canopy::api {

namespace {

// PMIx launchers differ in the integer width they use for the same key.
std::optional<std::int64_t> as_integer(const pmix_value_t* value)
{
    switch (value->type) {
    case PMIX_UINT8: return value->data.uint8;
    case PMIX_UINT16: return value->data.uint16;
    case PMIX_UINT32: return value->data.uint32;
    case PMIX_UINT64: return static_cast<std::int64_t>(value->data.uint64);
    case PMIX_INT8: return value->data.int8;
    case PMIX_INT16: return value->data.int16;
    case PMIX_INT32: return value->data.int32;
    case PMIX_INT64: return value->data.int64;
    case PMIX_INT: return value->data.integer;
    case PMIX_UINT: return value->data.uint;
    case PMIX_PROC_RANK: return value->data.rank;
    default: return std::nullopt;
    }
}

} // namespace

Status PmixSession::check(pmix_status_t status, const char* what)
{
    if (status == PMIX_SUCCESS)
        return done();
    int code = status == PMIX_ERR_NOT_FOUND ? CANOPY_ERR_NOT_FOUND
               : status == PMIX_ERR_TIMEOUT ? CANOPY_ERR_TIMEOUT
                                            : CANOPY_ERR_PMIX;
    return fail(code, "{}: {} failed: {}", who_, what, PMIx_Error_string(status));
}

Status PmixSession::open()
{
    std::lock_guard lock(mutex_);
    if (open_)
        return done();
    if (closed_)
        return fail(CANOPY_ERR_NOT_INITIALIZED, "{}: PMIx was already finalized (canopy_finalize); PMIx cannot "
                    "be opened twice in one process", who_);
    pmix_status_t status = PMIx_Init(&me_, nullptr, 0);
    if (status != PMIX_SUCCESS)
        return fail(CANOPY_ERR_PMIX, "{}: PMIx_Init failed: {}; the launcher's PMIx server is not reachable "
                    "(PMIX_SERVER_URI* and PMIX_NAMESPACE tell where it is)", who_, PMIx_Error_string(status));
    open_ = true;
    return done();
}

bool PmixSession::is_open()
{
    std::lock_guard lock(mutex_);
    return open_;
}

Status PmixSession::close()
{
    std::lock_guard lock(mutex_);
    if (!open_)
        return done();
    open_ = false;
    closed_ = true;
    return check(PMIx_Finalize(nullptr, 0), "PMIx_Finalize");
}

Result<RankInfo> PmixSession::job_info()
{
    if (auto opened = open(); !opened)
        return opened.error();
    RankInfo info;
    info.rank = static_cast<int>(me_.rank);
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me_.nspace, PMIX_RANK_WILDCARD);
    auto integer = [&](const pmix_proc_t* proc, const char* key) -> int {
        pmix_value_t* value = nullptr;
        if (PMIx_Get(proc, key, nullptr, 0, &value) != PMIX_SUCCESS || !value)
            return -1;
        auto number = as_integer(value);
        PMIX_VALUE_RELEASE(value);
        return number ? static_cast<int>(*number) : -1;
    };
    info.size = integer(&job, PMIX_JOB_SIZE);
    if (info.size < 0)
        return fail(CANOPY_ERR_PMIX, "{}: the PMIx launcher did not provide {} for namespace {}", who_,
                    PMIX_JOB_SIZE, me_.nspace);
    info.local_rank = integer(&me_, PMIX_LOCAL_RANK);
    info.local_size = integer(&job, PMIX_LOCAL_SIZE);
    info.node_rank = integer(&me_, PMIX_NODEID);
    info.num_nodes = integer(&job, PMIX_NUM_NODES);
    pmix_value_t* value = nullptr;
    if (PMIx_Get(&me_, PMIX_HOSTNAME, nullptr, 0, &value) == PMIX_SUCCESS && value) {
        if (value->type == PMIX_STRING && value->data.string)
            info.node_name = value->data.string;
        PMIX_VALUE_RELEASE(value);
    }
    if (info.node_name.empty()) {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        info.node_name = host;
    }
    return info;
}

Status PmixSession::put(const std::string& key, const void* data, std::size_t len)
{
    if (auto opened = open(); !opened)
        return opened.error();
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    // PMIx_Put copies the value, so it may point at the caller's buffer.
    value.data.bo.bytes = const_cast<char*>(static_cast<const char*>(data));
    value.data.bo.size = len;
    pmix_status_t status = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
    return check(status, "PMIx_Put");
}

Status PmixSession::commit()
{
    if (auto opened = open(); !opened)
        return opened.error();
    return check(PMIx_Commit(), "PMIx_Commit");
}

Status PmixSession::fence(bool collect)
{
    if (auto opened = open(); !opened)
        return opened.error();
    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info;
    bool flag = collect;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    pmix_status_t status = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return check(status, collect ? "PMIx_Fence (collecting data)" : "PMIx_Fence");
}

Result<std::string> PmixSession::get(int rank, const std::string& key)
{
    if (auto opened = open(); !opened)
        return opened.error();
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, me_.nspace, static_cast<pmix_rank_t>(rank));
    pmix_value_t* value = nullptr;
    // The node's PMIx server answers from what fences brought it; without IMMEDIATE it waits for a missing
    // key (about 2 s for a rank on this node) or asks the owner's node through the tree.
    pmix_info_t immediate;
    bool flag = true;
    PMIX_INFO_LOAD(&immediate, PMIX_IMMEDIATE, &flag, PMIX_BOOL);
    pmix_status_t status = PMIx_Get(&proc, key.c_str(), &immediate, 1, &value);
    PMIX_INFO_DESTRUCT(&immediate);
    if (status == PMIX_ERR_NOT_FOUND)
        return fail(CANOPY_ERR_NOT_FOUND, "{}: rank {} has no key '{}' (was it put and committed before the "
                    "last fence?)", who_, rank, key);
    if (status != PMIX_SUCCESS)
        return fail(CANOPY_ERR_PMIX, "{}: PMIx_Get of key '{}' from rank {} failed: {}", who_, key, rank,
                    PMIx_Error_string(status));
    std::string bytes;
    bool typed = value && value->type == PMIX_BYTE_OBJECT;
    if (typed && value->data.bo.size > 0)
        bytes.assign(value->data.bo.bytes, value->data.bo.size);
    int type = value ? value->type : 0;
    if (value)
        PMIX_VALUE_RELEASE(value);
    if (!typed)
        return fail(CANOPY_ERR_PMIX, "{}: key '{}' of rank {} holds PMIx type {}, not bytes; it was not put by "
                    "canopy_put", who_, key, rank, PMIx_Data_type_string(static_cast<pmix_data_type_t>(type)));
    return bytes;
}

} // namespace canopy::api
