#include "util/loopback_peer.hpp"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace canopy {
namespace {

bool is_loopback(const sockaddr_storage& address)
{
    if (address.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr) >> 24) == 127;
    if (address.ss_family != AF_INET6)
        return false;
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

struct Ends {
    sockaddr_storage local{};
    sockaddr_storage peer{};
};

bool ends_of(int fd, Ends& ends)
{
    socklen_t size = sizeof ends.local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ends.local), &size) != 0)
        return false;
    size = sizeof ends.peer;
    return ::getpeername(fd, reinterpret_cast<sockaddr*>(&ends.peer), &size) == 0 &&
           ends.local.ss_family == ends.peer.ss_family;
}

// Fills `address` and `port` of a sock_diag socket id from `end`.
void to_diag(const sockaddr_storage& end, __be32 (&address)[4], __be16& port)
{
    if (end.ss_family == AF_INET) {
        const auto& v4 = reinterpret_cast<const sockaddr_in&>(end);
        address[0] = v4.sin_addr.s_addr;
        port = v4.sin_port;
    } else {
        const auto& v6 = reinterpret_cast<const sockaddr_in6&>(end);
        std::memcpy(address, &v6.sin6_addr, sizeof address);
        port = v6.sin6_port;
    }
}

struct UniqueSocket {
    int fd;
    ~UniqueSocket()
    {
        if (fd >= 0)
            ::close(fd);
    }
};

// Asks the kernel for the one socket whose own end is `peer` and whose far end is `local`: the other side of our
// connection.
Result<inet_diag_msg> find_far_socket(const Ends& ends)
{
    UniqueSocket netlink{::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)};
    if (netlink.fd < 0)
        return make_error("cannot ask the kernel whose socket this is: {}", std::strerror(errno));
    timeval limit{1, 0};   // the kernel answers at once; this only bounds a broken netlink
    ::setsockopt(netlink.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);

    struct {
        nlmsghdr header;
        inet_diag_req_v2 request;
    } message{};
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.request.sdiag_family = static_cast<__u8>(ends.peer.ss_family);
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0u;
    to_diag(ends.peer, message.request.id.idiag_src, message.request.id.idiag_sport);
    to_diag(ends.local, message.request.id.idiag_dst, message.request.id.idiag_dport);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(netlink.fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
        return make_error("cannot ask the kernel whose socket this is: {}", std::strerror(errno));

    alignas(nlmsghdr) char answer[8192];
    ssize_t size = ::recv(netlink.fd, answer, sizeof answer, 0);
    if (size < 0)
        return make_error("the kernel did not say whose socket this is: {}", std::strerror(errno));
    auto* reply = reinterpret_cast<nlmsghdr*>(answer);
    if (!NLMSG_OK(reply, static_cast<unsigned>(size)))
        return make_error("the kernel's answer on a socket's owner is malformed");
    if (reply->nlmsg_type == NLMSG_ERROR) {
        const auto* failure = static_cast<const nlmsgerr*>(NLMSG_DATA(reply));
        return make_error("the kernel knows no socket at the far end: {}", std::strerror(-failure->error));
    }
    if (reply->nlmsg_type != SOCK_DIAG_BY_FAMILY || reply->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
        return make_error("the kernel's answer on a socket's owner is malformed");
    return *static_cast<const inet_diag_msg*>(NLMSG_DATA(reply));
}

} // namespace

bool from_loopback(int fd)
{
    Ends ends;
    return ends_of(fd, ends) && is_loopback(ends.peer);
}

Result<uid_t> loopback_peer_uid(int fd)
{
    Ends ends;
    if (!ends_of(fd, ends))
        return make_error("not a connected socket: {}", std::strerror(errno));
    if (!is_loopback(ends.peer))
        return make_error("the connection does not come from a loopback address");
    auto far = find_far_socket(ends);
    if (!far)
        return far.error();
    // A socket no process holds (closed, waiting out TIME_WAIT) reports inode 0 and uid 0: nobody's word.
    if (far->idiag_inode == 0)
        return make_error("no process holds the far end of the connection any more");
    return static_cast<uid_t>(far->idiag_uid);
}

bool loopback_peer_is_own_user(int fd, long& peer)
{
    peer = -1;
    sockaddr_storage local{};
    socklen_t size = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) != 0 ||
        (local.ss_family != AF_INET && local.ss_family != AF_INET6))
        return true;
    Ends ends;
    if (!ends_of(fd, ends))
        return false;   // a TCP connection that has no far end any more serves nobody
    if (!is_loopback(ends.peer))
        return true;
    auto uid = loopback_peer_uid(fd);
    if (!uid)
        return false;
    peer = static_cast<long>(*uid);
    return *uid == ::geteuid();
}

} // namespace canopy
