#include "pmix/server_gate.hpp"

#include <dirent.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace canopy {

using tcp = boost::asio::ip::tcp;

namespace {

// Whether `fd` is a TCP socket listening on exactly `server`.
bool listens_on(int fd, const tcp::endpoint& server)
{
    int listening = 0;
    socklen_t size = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening)
        return false;
    sockaddr_in address{};
    size = sizeof address;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0 || address.sin_family != AF_INET)
        return false;
    return ntohl(address.sin_addr.s_addr) == server.address().to_v4().to_uint() &&
           ntohs(address.sin_port) == server.port();
}

} // namespace

Result<std::shared_ptr<ServerGate>> ServerGate::close(const tcp::endpoint& server)
{
    if (!server.address().is_v4() || !server.address().is_loopback())
        return make_error("the PMIx server listens on {}, not on an IPv4 loopback address",
                          server.address().to_string());
    DIR* fds = ::opendir("/proc/self/fd");
    if (!fds)
        return make_error("cannot list this process's descriptors in /proc/self/fd");
    int found = -1;
    while (dirent* entry = ::readdir(fds)) {
        char* end = nullptr;
        long fd = std::strtol(entry->d_name, &end, 10);
        if (end != entry->d_name && *end == '\0' && fd != ::dirfd(fds) && listens_on(static_cast<int>(fd), server)) {
            found = static_cast<int>(fd);
            break;
        }
    }
    ::closedir(fds);
    if (found < 0)
        return make_error("no socket of this process listens on {}:{}", server.address().to_string(), server.port());
    std::shared_ptr<ServerGate> gate(new ServerGate(found, server));
    if (auto applied = gate->apply(); !applied)
        return applied.error();
    return gate;
}

Status ServerGate::admit(std::uint16_t port)
{
    if (opened_)
        return {};
    admitted_.insert(port);
    return apply();
}

void ServerGate::revoke(std::uint16_t port)
{
    if (!opened_ && admitted_.erase(port))
        (void)apply();   // a server that is gone needs no gate
}

void ServerGate::open()
{
    opened_ = true;
    int unused = 0;   // the kernel wants an int's worth of option, and ignores it
    if (listens_on(fd_, server_))
        ::setsockopt(fd_, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof unused);
}

Status ServerGate::apply()
{
    // PMIx may have closed its socket, and the number may belong to someone else by now.
    if (!listens_on(fd_, server_))
        return make_error("the PMIx server no longer listens on {}:{}", server_.address().to_string(), server_.port());
    // Classic BPF, run on each packet the listening socket receives (connection attempts and handshake ACKs):
    // absolute loads start at the TCP header, SKF_NET_OFF reaches back into the IP header. Jumps stay short, so
    // any number of ports fits up to the kernel's instruction limit.
    std::vector<sock_filter> program = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<std::uint32_t>(SKF_NET_OFF + 12)),   // IPv4 source
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, server_.address().to_v4().to_uint(), 1, 0),
        BPF_STMT(BPF_RET | BPF_K, 0),                                                     // drop
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0),                                            // TCP source port
    };
    for (std::uint16_t port : admitted_) {
        program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1));
        program.push_back(BPF_STMT(BPF_RET | BPF_K, 0xffffffffu));                        // keep the whole packet
    }
    program.push_back(BPF_STMT(BPF_RET | BPF_K, 0));
    if (program.size() > BPF_MAXINSNS)
        return make_error("{} PMIx connections at once are more than a socket filter can admit", admitted_.size());
    sock_fprog filter{static_cast<unsigned short>(program.size()), program.data()};
    if (::setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &filter, sizeof filter) != 0)
        return make_error("cannot filter the PMIx server's port: {}", std::strerror(errno));
    return {};
}

} // namespace canopy
