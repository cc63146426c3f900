// canopyd's accept(): a loopback connection made by another user is closed before anything reads it.
//
// PMIx's server (canopyd-pmix.so, libpmix) accepts on its own thread and then trusts the uid that a TCP client's
// handshake claims, and its listening port is on loopback, where every user of the node can reach it. canopyd
// defines accept and accept4 and exports them (own_user_accept.list), so that libpmix's calls, and Asio's, come
// here first: the kernel's socket table says who made the far end (util/loopback_peer.hpp), and only this
// process's own user gets through. Connections from other hosts and Unix sockets pass untouched; they are
// authenticated by the tree's secret and by SO_PEERCRED.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include <spdlog/logger.h>

#include "util/log.hpp"
#include "util/loopback_peer.hpp"

namespace {

void report_refused(long uid)
{
    // A stranger may knock a thousand times: the first refusal is a warning, the rest only in the debug log.
    static std::atomic<bool> warned{false};
    auto& log = canopy::area_logger("tree");
    if (!warned.exchange(true))
        log.warn("refused a loopback connection from another user (uid {}): only this job's user may connect",
                 uid);
    else
        log.debug("refused a loopback connection from another user (uid {})", uid);
}

} // namespace

extern "C" int accept4(int listening, sockaddr* address, socklen_t* address_size, int flags)
{
    const socklen_t capacity = address_size ? *address_size : 0;
    for (;;) {
        int connection = static_cast<int>(::syscall(SYS_accept4, listening, address, address_size, flags));
        long peer = -1;
        if (connection < 0 || canopy::loopback_peer_is_own_user(connection, peer))
            return connection;
        ::close(connection);
        report_refused(peer);
        if (address_size)
            *address_size = capacity;   // the next try fills it again
    }
}

extern "C" int accept(int listening, sockaddr* address, socklen_t* address_size)
{
    return accept4(listening, address, address_size, 0);
}
