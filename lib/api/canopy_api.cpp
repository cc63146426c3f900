// The C ABI of libcanopy (canopy/canopy.h): turns each Result into a status code and a readable message.
#include <canopy/canopy.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <string>

#include "api/launcher_env.hpp"
#include "api/library.hpp"

using canopy::Error;
using canopy::api::Library;

namespace {

thread_local std::string last_error;

int report(const Error& failure)
{
    last_error = failure.message;
    return failure.code != CANOPY_OK ? failure.code : CANOPY_ERR_INVALID;   // an error never reads as success
}

// A canopy::Result or canopy::Status.
template <typename Outcome>
int report_outcome(const Outcome& outcome)
{
    return outcome ? CANOPY_OK : report(outcome.error());
}

// Copies bytes into a malloc'd buffer the caller frees with canopy_free (never NULL on success).
int hand_out(const std::string& bytes, void** out, std::size_t* len)
{
    void* buffer = std::malloc(bytes.empty() ? 1 : bytes.size());
    if (!buffer)
        return report(Error{"out of memory for a value of " + std::to_string(bytes.size()) + " bytes",
                            CANOPY_ERR_NO_MEMORY});
    if (!bytes.empty())
        std::memcpy(buffer, bytes.data(), bytes.size());
    *out = buffer;
    if (len)
        *len = bytes.size();
    return CANOPY_OK;
}

int missing_output(const char* function)
{
    return report(Error{std::string(function) + ": an output pointer is NULL", CANOPY_ERR_INVALID});
}

// No exception may cross the C ABI: a failed allocation inside the library becomes a status.
template <typename Body>
int guarded(Body body)
{
    try {
        return body();
    } catch (const std::bad_alloc&) {
        return report(Error{"libcanopy ran out of memory", CANOPY_ERR_NO_MEMORY});
    } catch (...) {
        return report(Error{"libcanopy: unexpected internal error", CANOPY_ERR_INVALID});
    }
}

Library& lib() { return Library::instance(); }

template <typename Field>
int query(Field field)
{
    // Rank information stays readable after canopy_finalize.
    if (lib().mode() == CANOPY_MODE_NONE && !lib().init())
        return -1;
    return field(lib().info());
}

} // namespace

extern "C" {

int canopy_init(void)
{
    return guarded([] { return report_outcome(lib().init()); });
}

int canopy_finalize(void)
{
    return guarded([] { return report_outcome(lib().finalize()); });
}

const char* canopy_last_error(void) { return last_error.c_str(); }

namespace {

struct StatusInfo {
    const char* name;
    const char* text;
};
// Indexed by the code: the codes run from 0 without gaps (canopy.h).
constexpr StatusInfo statuses[] = {
    {"CANOPY_OK", "ok"},
    {"CANOPY_ERR_NOT_FOUND", "not found"},
    {"CANOPY_ERR_TIMEOUT", "timeout"},
    {"CANOPY_ERR_NOT_AVAILABLE", "not available outside canopy"},
    {"CANOPY_ERR_INVALID", "invalid argument"},
    {"CANOPY_ERR_NOT_INITIALIZED", "not initialized"},
    {"CANOPY_ERR_PMIX", "PMIx error"},
    {"CANOPY_ERR_DAEMON", "canopyd error"},
    {"CANOPY_ERR_NO_MEMORY", "out of memory"},
};
static_assert(std::size(statuses) == CANOPY_ERR_NO_MEMORY + 1, "a status code without a name, or a gap");

const StatusInfo* status_info(int status)
{
    return status >= 0 && status < static_cast<int>(std::size(statuses)) ? &statuses[status] : nullptr;
}

} // namespace

const char* canopy_status_string(int status)
{
    const auto* info = status_info(status);
    return info ? info->text : "unknown status";
}

const char* canopy_status_name(int status)
{
    const auto* info = status_info(status);
    return info ? info->name : nullptr;
}

const char* canopy_mode_name(int mode) { return canopy::api::mode_name(mode); }

int canopy_mode(void) { return lib().mode(); }

int canopy_rank(void) { return query([](const auto& info) { return info.rank; }); }
int canopy_size(void) { return query([](const auto& info) { return info.size; }); }
int canopy_local_rank(void) { return query([](const auto& info) { return info.local_rank; }); }
int canopy_local_size(void) { return query([](const auto& info) { return info.local_size; }); }
int canopy_node_rank(void) { return query([](const auto& info) { return info.node_rank; }); }
int canopy_num_nodes(void) { return query([](const auto& info) { return info.num_nodes; }); }

const char* canopy_node_name(void)
{
    if (lib().mode() == CANOPY_MODE_NONE && !lib().init())
        return nullptr;
    return lib().info().node_name.c_str();
}

int canopy_mark(const char* name)
{
    return guarded([&] { return report_outcome(lib().mark(name, std::nullopt)); });
}

int canopy_mark_duration(const char* name, int64_t duration_ns)
{
    return guarded([&] { return report_outcome(lib().mark(name, duration_ns)); });
}

int canopy_put(const char* key, const void* value, size_t len)
{
    return guarded([&] { return report_outcome(lib().put(key, value, len)); });
}

int canopy_commit(void)
{
    return guarded([] { return report_outcome(lib().commit()); });
}

int canopy_fence(void)
{
    return guarded([] { return report_outcome(lib().fence()); });
}

int canopy_get(int rank, const char* key, void** value, size_t* len)
{
    if (!value || !len)
        return missing_output("canopy_get");
    return guarded([&] {
        auto got = lib().get(rank, key);
        return got ? hand_out(*got, value, len) : report(got.error());
    });
}

int canopy_barrier(void)
{
    return guarded([] { return report_outcome(lib().barrier()); });
}

int canopy_allgather(const void* data, size_t len, void** out, size_t* lens)
{
    if (!out || !lens)
        return missing_output("canopy_allgather");
    return guarded([&] {
        auto all = lib().allgather(data, len);
        if (!all)
            return report(all.error());
        std::string joined;
        for (std::size_t i = 0; i < all->size(); ++i) {
            lens[i] = (*all)[i].size();
            joined += (*all)[i];
        }
        return hand_out(joined, out, nullptr);
    });
}

int canopy_store_set(const char* key, const void* value, size_t len)
{
    return guarded([&] { return report_outcome(lib().store_set(key, value, len)); });
}

int canopy_store_get(const char* key, int timeout_ms, void** value, size_t* len)
{
    if (!value || !len)
        return missing_output("canopy_store_get");
    return guarded([&] {
        auto got = lib().store_get(key, timeout_ms);
        return got ? hand_out(*got, value, len) : report(got.error());
    });
}

int canopy_store_add(const char* key, int64_t delta, int64_t* value)
{
    return guarded([&] {
        auto sum = lib().store_add(key, delta);
        if (!sum)
            return report(sum.error());
        if (value)
            *value = *sum;
        return CANOPY_OK;
    });
}

int canopy_store_compare_set(const char* key, const void* expected, size_t expected_len, const void* desired,
                             size_t desired_len, void** value, size_t* len)
{
    if (!value || !len)
        return missing_output("canopy_store_compare_set");
    return guarded([&] {
        auto now = lib().store_compare_set(key, expected, expected_len, desired, desired_len);
        return now ? hand_out(*now, value, len) : report(now.error());
    });
}

int canopy_store_check(const char* const* keys, size_t n, int* all_exist)
{
    if (!all_exist)
        return missing_output("canopy_store_check");
    return guarded([&] {
        auto present = lib().store_check(keys, n);
        if (!present)
            return report(present.error());
        *all_exist = *present ? 1 : 0;
        return CANOPY_OK;
    });
}

int canopy_store_delete(const char* key, int* existed)
{
    return guarded([&] {
        auto gone = lib().store_delete(key);
        if (!gone)
            return report(gone.error());
        if (existed)
            *existed = *gone ? 1 : 0;
        return CANOPY_OK;
    });
}

int canopy_store_num_keys(int64_t* count)
{
    if (!count)
        return missing_output("canopy_store_num_keys");
    return guarded([&] {
        auto keys = lib().store_num_keys();
        if (!keys)
            return report(keys.error());
        *count = *keys;
        return CANOPY_OK;
    });
}

int canopy_store_wait(const char* const* keys, size_t n, int timeout_ms)
{
    return guarded([&] { return report_outcome(lib().store_wait(keys, n, timeout_ms)); });
}

void canopy_free(void* buffer) { std::free(buffer); }

} // extern "C"
