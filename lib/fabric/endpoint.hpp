// One reliable-datagram (FI_EP_RDM) endpoint of a libfabric provider, with its completion queue and address
// vector, driven by canopy's io_context. Providers progress when their queue is read, and shared memory wakes no
// file descriptor, so the endpoint polls while operations are outstanding: at once again while completions come,
// then backing off to 2 ms, and to 20 ms after a second without any.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <rdma/fabric.h>

#include "fabric/fabric_api.hpp"
#include "util/result.hpp"

struct fid_fabric;
struct fid_domain;
struct fid_ep;
struct fid_cq;
struct fid_av;

namespace canopy::fabric {

// Which provider to use: a name ("shm", "tcp;ofi_rxm", "cxi"...), or the best this node offers (auto).
struct ProviderChoice {
    bool automatic = true;
    std::string name;      // when not automatic
    bool one_host = false; // every peer is on this machine (simulated nodes): shared memory ranks first
};

// "auto" or a provider name; "off" is for the caller to handle.
ProviderChoice parse_provider_choice(const std::string& text, bool one_host);

// Whether libfabric on this machine has the provider chosen (loading libfabric to find out); the error says why not.
Status provider_available(const ProviderChoice& choice);

// The providers auto takes, best first; the rest (tcp, udp, sockets) are no faster than the tree's own TCP links.
const std::vector<std::string>& preferred_providers(bool one_host);

class Endpoint {
public:
    // An operation in flight. FI_CONTEXT2 mode: the provider may use the context's words until completion.
    struct Operation {
        fi_context2 context;
        std::function<void(Status status, std::size_t length)> done;
    };

    static Result<std::unique_ptr<Endpoint>> open(boost::asio::io_context& io, const ProviderChoice& choice);
    ~Endpoint();
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;

    const std::string& provider() const { return provider_; }
    const std::vector<std::uint8_t>& address() const { return address_; }
    // The largest message the endpoint sends or receives.
    std::size_t max_message() const { return max_message_; }
    // A file the provider keeps while the endpoint is open, which a process killed outright leaves behind: shm's
    // region, /dev/shm/NAME for the address fi_shm://NAME. Empty for other providers.
    const std::string& shared_memory_file() const { return shared_memory_file_; }

    // Adds a peer to the address vector: the only endpoints this one sends to.
    Result<fi_addr_t> add_peer(std::span<const std::uint8_t> address);
    // Sends the pieces as one message; `operation` must stay valid until its done runs. false: the provider's
    // queue is full; try again after a completion.
    Result<bool> send(fi_addr_t peer, std::span<const iovec> pieces, Operation& operation);
    Status receive(void* buffer, std::size_t size, Operation& operation);

private:
    Endpoint(boost::asio::io_context& io, const Api& api);
    void poll_soon();
    void poll();

    boost::asio::io_context& io_;
    const Api& api_;
    std::string provider_;
    std::vector<std::uint8_t> address_;
    std::size_t max_message_ = 0;
    std::string shared_memory_file_;
    fid_fabric* fabric_ = nullptr;
    fid_domain* domain_ = nullptr;
    fid_cq* cq_ = nullptr;
    fid_av* av_ = nullptr;
    fid_ep* ep_ = nullptr;
    boost::asio::steady_timer timer_;
    std::chrono::microseconds backoff_{0};
    std::chrono::steady_clock::time_point last_completion_;
    bool poll_scheduled_ = false;
    std::size_t outstanding_ = 0;   // sends and receives posted and not yet complete: nothing to poll for at 0
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy::fabric
