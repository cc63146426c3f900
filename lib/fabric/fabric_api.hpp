// libfabric's few real entry points, loaded when a job first moves bulk data over a fabric. canopy and canopyd do
// not link libfabric: a node without it runs as before, with bulk data on the tree's TCP links, and a job that
// moves none never maps it. Everything else in libfabric's API is inline calls through the objects these return.
#pragma once

#include <csignal>
#include <cstdint>
#include <iterator>

#include <rdma/fabric.h>

#include "util/result.hpp"
#include "util/worker_thread.hpp"

namespace canopy::fabric {

struct Api {
    int (*getinfo)(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
                   const struct fi_info* hints, struct fi_info** info) = nullptr;
    void (*freeinfo)(struct fi_info* info) = nullptr;
    struct fi_info* (*dupinfo)(const struct fi_info* info) = nullptr;
    int (*open_fabric)(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) = nullptr;
    const char* (*strerror)(int error) = nullptr;
    std::uint32_t (*version)() = nullptr;
};

// The API version canopy asks for: 1.9, which every libfabric since 2019 offers.
inline constexpr std::uint32_t api_version = FI_VERSION(1, 9);

// Loads libfabric.so.1 once; later calls return the same result.
Result<const Api*> load_api();

// Providers may take over signal handlers as they load: Debian's psm provider (libinfinipath) installs its own for
// SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT, and they call exit(). A SIGTERM while providers load then
// deadlocks in libfabric's destructor (an orphaned canopyd, for good), and one later skips canopy's teardown.
// While this lives, the calling thread holds the asynchronous signals; at its end the handlers there before are
// put back, and then the held signals reach them. canopy's other threads block them from their start
// (worker_thread), so none can take one meanwhile.
class SignalHandlersKept {
public:
    SignalHandlersKept();
    ~SignalHandlersKept();
    SignalHandlersKept(const SignalHandlersKept&) = delete;
    SignalHandlersKept& operator=(const SignalHandlersKept&) = delete;

private:
    static constexpr int kept[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGABRT, SIGBUS,  SIGFPE,
                                   SIGSEGV, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD};
    AsynchronousSignalsHeld held_;
    struct sigaction before_[std::size(kept)];
};

} // namespace canopy::fabric
