#include "hosts/this_host.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace canopy {
namespace {

std::string lowered(std::string_view text)
{
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

// An address in the form inet_ntop gives, so that "::1" and "0:0::1" compare equal; empty if not an address.
std::string canonical_address(std::string_view text)
{
    std::string copy(text);
    unsigned char bytes[sizeof(in6_addr)];
    char out[INET6_ADDRSTRLEN];
    for (int family : {AF_INET, AF_INET6})
        if (::inet_pton(family, copy.c_str(), bytes) == 1 && ::inet_ntop(family, bytes, out, sizeof out))
            return out;
    return {};
}

struct ThisHost {
    std::set<std::string> names;
    std::set<std::string> addresses;
};

ThisHost find_this_host()
{
    ThisHost found;
    std::string name = lowered(this_host_name());
    found.names = {name, name.substr(0, name.find('.')), "localhost"};
    addrinfo hints{};
    hints.ai_flags = AI_CANONNAME;
    addrinfo* info = nullptr;
    if (::getaddrinfo(name.c_str(), nullptr, &hints, &info) == 0 && info) {
        if (info->ai_canonname)
            found.names.insert(lowered(info->ai_canonname));
        ::freeaddrinfo(info);
    }
    ifaddrs* interfaces = nullptr;
    if (::getifaddrs(&interfaces) == 0) {
        for (ifaddrs* entry = interfaces; entry; entry = entry->ifa_next) {
            if (!entry->ifa_addr)
                continue;
            char text[INET6_ADDRSTRLEN];
            int family = entry->ifa_addr->sa_family;
            const void* address = family == AF_INET ? static_cast<const void*>(
                                                          &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr)
                                  : family == AF_INET6
                                      ? static_cast<const void*>(
                                            &reinterpret_cast<sockaddr_in6*>(entry->ifa_addr)->sin6_addr)
                                      : nullptr;
            if (address && ::inet_ntop(family, address, text, sizeof text))
                found.addresses.insert(text);
        }
        ::freeifaddrs(interfaces);
    }
    return found;
}

} // namespace

std::string this_host_name()
{
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0')
        return "localhost";
    return name;
}

bool names_this_host(std::string_view host)
{
    static const ThisHost self = find_this_host();
    if (self.names.contains(lowered(host)))
        return true;
    std::string address = canonical_address(host);
    return !address.empty() && self.addresses.contains(address);
}

} // namespace canopy
