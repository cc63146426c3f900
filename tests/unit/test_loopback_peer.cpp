// Unit tests for loopback_peer: the kernel's word on who made the far end of a loopback TCP connection.
#include "util/loopback_peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

namespace canopy {
namespace {

// A loopback listener on a port the kernel picks.
class Listener {
public:
    explicit Listener(const char* address = "127.0.0.1")
    {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in where{};
        where.sin_family = AF_INET;
        ::inet_pton(AF_INET, address, &where.sin_addr);
        EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where), 0);
        EXPECT_EQ(::listen(fd_, 8), 0);
        socklen_t size = sizeof address_;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address_), &size);
    }
    ~Listener() { ::close(fd_); }

    int connect() const
    {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address_), sizeof address_), 0);
        return fd;
    }
    int accept() const { return ::accept(fd_, nullptr, nullptr); }

private:
    int fd_ = -1;
    sockaddr_in address_{};
};

TEST(LoopbackPeer, AConnectionFromThisProcessIsItsOwnUsers)
{
    Listener listener("127.3.4.5");   // anywhere in 127.0.0.0/8 is loopback
    int client = listener.connect();
    int served = listener.accept();
    ASSERT_GE(served, 0);
    EXPECT_TRUE(from_loopback(served));
    auto uid = loopback_peer_uid(served);
    ASSERT_TRUE(uid.ok()) << uid.error().message;
    EXPECT_EQ(*uid, ::geteuid());
    long peer = -2;
    EXPECT_TRUE(loopback_peer_is_own_user(served, peer));
    EXPECT_EQ(peer, static_cast<long>(::geteuid()));
    ::close(served);
    ::close(client);
}

// A dual-stack listener ([tree] bind_address = "::") takes an IPv4 client's connection as IPv4-mapped IPv6.
TEST(LoopbackPeer, AnIpv4ClientOfAnIpv6ListenerIsFoundToo)
{
    int listener = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int off = 0;
    ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any), 0);
    ASSERT_EQ(::listen(listener, 4), 0);
    socklen_t size = sizeof any;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&any), &size);
    int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = any.sin6_port;
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    int served = ::accept(listener, nullptr, nullptr);
    ASSERT_GE(served, 0);
    auto uid = loopback_peer_uid(served);
    ASSERT_TRUE(uid.ok()) << uid.error().message;
    EXPECT_EQ(*uid, ::geteuid());
    ::close(served);
    ::close(client);
    ::close(listener);
}

TEST(LoopbackPeer, AFarEndThatNoProcessHoldsAnyMoreSaysNothingAndIsRefused)
{
    Listener listener;
    int client = listener.connect();
    int served = listener.accept();
    ::close(client);   // the far end goes to FIN_WAIT, held by no process
    auto uid = loopback_peer_uid(served);
    EXPECT_FALSE(uid.ok());
    long peer = -2;
    EXPECT_FALSE(loopback_peer_is_own_user(served, peer));
    EXPECT_EQ(peer, -1);
    ::close(served);
}

TEST(LoopbackPeer, AUnixSocketIsNotJudgedHere)
{
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    long peer = -2;
    EXPECT_FALSE(from_loopback(pair[0]));
    EXPECT_TRUE(loopback_peer_is_own_user(pair[0], peer));   // SO_PEERCRED's business
    ::close(pair[0]);
    ::close(pair[1]);
}

TEST(LoopbackPeer, AConnectionMadeByAnotherUserIsThatUsersWhateverItClaims)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "becoming another user needs root";
    Listener listener;
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    if (child == 0) {
        // nobody's uid: a socket made after this belongs to nobody, whatever the process says of itself later
        if (::setgid(65534) != 0 || ::setuid(65534) != 0)
            ::_exit(3);
        int fd = listener.connect();
        char byte = 'x';
        if (fd < 0 || ::write(ready[1], &byte, 1) != 1)
            ::_exit(4);
        ::pause();   // holds the connection until the parent kills it
        ::_exit(0);
    }
    ::close(ready[1]);
    char byte;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    int served = listener.accept();
    auto uid = loopback_peer_uid(served);
    ASSERT_TRUE(uid.ok()) << uid.error().message;
    EXPECT_EQ(*uid, 65534u);
    long peer = -2;
    EXPECT_FALSE(loopback_peer_is_own_user(served, peer));
    EXPECT_EQ(peer, 65534);
    ::close(served);
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
}

} // namespace
} // namespace canopy
