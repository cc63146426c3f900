// How the host answers PMIx: PMIx's callback and its context held as one C++ value that the io thread can keep
// and call, and that always calls PMIx back on PMIx's own progress thread.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <pmix_server.h>

#include "pmix/pmix_host.hpp"

namespace canopy {

// Runs `fn` on PMIx's progress thread. PMIx 4.2.2 builds the reply inside its op and lookup callbacks without
// thread-shifting, so answering from our thread races with PMIx tearing down a client that just died (seen as a
// crash in PMIx_server_finalize). PMIx_server_setup_local_support with no info does nothing but thread-shift and
// call back, which makes it a hop onto PMIx's thread.
void run_on_pmix_thread(const std::string& nspace, std::function<void()> fn);

// The answer to an upcall that completes through pmix_op_cbfunc_t (connect, finalize, abort, publish, unpublish).
class OpAnswer {
public:
    OpAnswer(std::string nspace, pmix_op_cbfunc_t cbfunc, void* cbdata);
    // `then` runs on PMIx's thread right after PMIx took the answer.
    void operator()(pmix_status_t status, std::function<void()> then = {}) const;

private:
    std::string nspace_;
    pmix_op_cbfunc_t cbfunc_;
    void* cbdata_;
};

// The answer to a fence or a direct modex: a blob that PMIx owns until it calls the release function.
class ModexAnswer {
public:
    ModexAnswer(std::string nspace, pmix_modex_cbfunc_t cbfunc, void* cbdata);
    void operator()(pmix_status_t status, Bytes bytes) const;

private:
    std::string nspace_;
    pmix_modex_cbfunc_t cbfunc_;
    void* cbdata_;
};

// The answer to a lookup: the keys found, with their values as published (published_values.hpp).
class LookupAnswer {
public:
    LookupAnswer(std::string nspace, pmix_lookup_cbfunc_t cbfunc, void* cbdata);
    void operator()(pmix_status_t status, const std::vector<std::pair<std::string, Bytes>>& found) const;

private:
    std::string nspace_;
    pmix_lookup_cbfunc_t cbfunc_;
    void* cbdata_;
};

// The answer to a spawn: the new namespace, or an error (the caller learns nothing more from PMIx).
class SpawnAnswer {
public:
    SpawnAnswer(std::string nspace, pmix_spawn_cbfunc_t cbfunc, void* cbdata);
    void operator()(pmix_status_t status, const std::string& spawned) const;

private:
    std::string nspace_;
    pmix_spawn_cbfunc_t cbfunc_;
    void* cbdata_;
};

// The answer to a query: the info entries found, which PMIx holds until it calls the release function.
class InfoAnswer {
public:
    InfoAnswer(std::string nspace, pmix_info_cbfunc_t cbfunc, void* cbdata);
    // `info` was made with PMIX_INFO_CREATE (or is null); it passes to PMIx.
    void operator()(pmix_status_t status, pmix_info_t* info, std::size_t ninfo) const;

private:
    std::string nspace_;
    pmix_info_cbfunc_t cbfunc_;
    void* cbdata_;
};

} // namespace canopy
