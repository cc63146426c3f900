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
#include <string>

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "util/log.hpp"
#include "util/loopback_peer.hpp"

namespace {

void report_refused(int connection, long uid)
{
    // A stranger may knock a thousand times: the first refusal is a warning, the rest only in the debug log.
    static std::atomic<bool> warned{false};
    std::string why;
    if (uid >= 0) {
        why = fmt::format("from another user (uid {})", uid);
    } else {   // nobody's word, or none to be had: a kernel or sandbox without sock_diag refuses every one
        auto unknown = canopy::loopback_peer_uid(connection);
        why = fmt::format("whose maker the kernel did not tell ({})", unknown ? "closed" : unknown.error().message);
    }
    auto& log = canopy::area_logger("tree");
    if (!warned.exchange(true))
        log.warn("refused a loopback connection {}: only this job's user may connect", why);
    else
        log.debug("refused a loopback connection {}", why);
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
        report_refused(connection, peer);
        ::close(connection);
        if (address_size)
            *address_size = capacity;   // the next try fills it again
    }
}

extern "C" int accept(int listening, sockaddr* address, socklen_t* address_size)
{
    return accept4(listening, address, address_size, 0);
}
