// The rank's PMIx client connection: opened on first use, key-value exchange, fences and job information.
#pragma once

#include <pmix.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "api/api_error.hpp"
#include "api/rank_info.hpp"

namespace canopy::api {

class PmixSession {
public:
    // `who` ("rank 3 on sim0001") goes into error messages.
    explicit PmixSession(std::string who) : who_(std::move(who)) {}

    // PMIx_Init if not yet done (it costs several milliseconds). Thread-safe.
    Status open();
    bool is_open();
    Status close();
    Result<RankInfo> job_info();

    Status put(const std::string& key, const void* value, std::size_t len);
    Status commit();
    // All ranks; `collect` asks PMIx to bring every committed value to every rank.
    Status fence(bool collect);
    Result<std::string> get(int rank, const std::string& key);

    void set_who(std::string who) { who_ = std::move(who); }

private:
    Status check(pmix_status_t status, const char* what);

    std::mutex mutex_;
    bool open_ = false;
    bool closed_ = false;
    pmix_proc_t me_{};
    std::string who_;
};

} // namespace canopy::api
