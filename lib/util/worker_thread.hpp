// Worker threads, which leave signals to the thread whose event loop handles them. Header only: the staging
// libraries that use it link no other part of lib/util.
#pragma once

#include <signal.h>

#include <thread>
#include <utility>

namespace canopy {

// The signals that come from outside or from children (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1,
// SIGUSR2, SIGCHLD); never the faults, which must reach a handler in the thread that faults.
inline sigset_t asynchronous_signals()
{
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal : {SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD})
        sigaddset(&signals, signal);
    return signals;
}

// While this lives, the calling thread holds the asynchronous signals; one that came meanwhile is delivered once
// it ends.
class AsynchronousSignalsHeld {
public:
    AsynchronousSignalsHeld()
    {
        sigset_t held = asynchronous_signals();
        pthread_sigmask(SIG_BLOCK, &held, &before_);
    }
    ~AsynchronousSignalsHeld() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
    AsynchronousSignalsHeld(const AsynchronousSignalsHeld&) = delete;
    AsynchronousSignalsHeld& operator=(const AsynchronousSignalsHeld&) = delete;

private:
    sigset_t before_;
};

// A thread that starts with the asynchronous signals blocked, as a new thread inherits its creator's mask. The
// kernel gives a process's signal to any thread that does not block it: otherwise a worker could run a handler a
// library installed (fabric::SignalHandlersKept), or canopy's own while the main thread holds its signals at the
// job's end.
template <typename Function>
std::thread worker_thread(Function&& function)
{
    AsynchronousSignalsHeld held;
    return std::thread(std::forward<Function>(function));
}

} // namespace canopy
