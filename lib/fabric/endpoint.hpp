// One reliable-datagram (FI_EP_RDM) endpoint of a libfabric provider, with its completion queue and address
// vector, driven by canopy's io_context. Providers progress when their queue is read, and shared memory wakes no
// file descriptor, so the endpoint polls while operations are outstanding: at once again while completions come,
// then backing off to 2 ms, and to 20 ms after a second without any. It owns the buffers it receives into, and
// registers them (and a ring it stages sends in) once, where the provider needs local registration (FI_MR_LOCAL).
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
#include "util/lifetime.hpp"
#include "util/result.hpp"

struct fid_fabric;
struct fid_domain;
struct fid_ep;
struct fid_cq;
struct fid_av;
struct fid_mr;

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
    static constexpr std::size_t no_slot = static_cast<std::size_t>(-1);
    // An operation in flight. FI_CONTEXT2 mode: the provider may use the context's words until completion.
    struct Operation {
        fi_context2 context;
        std::function<void(Status status, std::size_t length)> done;
        std::size_t staging_slot = no_slot;   // the endpoint's: the send slot its bytes were copied into
    };

    // The memory an endpoint owns, allocated and (where needed) registered once, when it opens.
    struct Buffers {
        std::size_t receives = 0;     // receive buffers, each posted by its index
        std::size_t send_slots = 0;   // registered slots sends are staged in: sends in flight at once
        std::size_t bytes = 0;        // each buffer's and slot's size: the largest message
        // A test hook (CANOPY_TEST_FABRIC_REGISTER=1, read by the fabric plane): register as if the provider
        // needed FI_MR_LOCAL, which none on a machine without fabric hardware does.
        bool always_register = false;
    };

    static Result<std::unique_ptr<Endpoint>> open(boost::asio::io_context& io, const ProviderChoice& choice,
                                                  const Buffers& buffers);
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

    // Whether the buffers are registered: the provider needs it (FI_MR_LOCAL), or a test asked for it.
    bool registers_memory() const { return send_mr_ || receive_mr_; }
    // How many times this endpoint called fi_mr_reg: once per area it owns, however many messages it moves.
    std::size_t registrations() const { return registrations_; }

    // Receive buffer `index` (< Buffers::receives): a completed receive's bytes are there until it is posted again.
    std::span<std::uint8_t> receive_buffer(std::size_t index);

    // Adds a peer to the address vector: the only endpoints this one sends to.
    Result<fi_addr_t> add_peer(std::span<const std::uint8_t> address);
    // Sends the pieces as one message of at most Buffers::bytes; the pieces and `operation` must stay valid until
    // its done runs. false: the provider's queue or every staging slot is full; try again after a completion.
    Result<bool> send(fi_addr_t peer, std::span<const iovec> pieces, Operation& operation);
    // Posts receive buffer `index`; `operation` must stay valid until its done runs.
    Status receive(std::size_t index, Operation& operation);

private:
    // Whole pages of their own (mmap): providers pin registered memory by the page, and verbs may mark those pages
    // MADV_DONTFORK (fork-safe mode), which must not take other data with them.
    class Pages {
    public:
        Pages() = default;
        ~Pages();
        Pages(const Pages&) = delete;
        Pages& operator=(const Pages&) = delete;
        Status allocate(std::size_t size);
        std::uint8_t* data() const { return data_; }
        std::size_t size() const { return size_; }

    private:
        std::uint8_t* data_ = nullptr;
        std::size_t size_ = 0;
    };

    Endpoint(boost::asio::io_context& io, const Api& api);
    Status allocate(const Buffers& buffers, bool needs_registration);
    Result<fid_mr*> register_pages(const Pages& pages, std::uint64_t access, std::uint64_t key, const char* what);
    // An operation completed: it is no longer outstanding, and its staging slot is free again.
    void finish(Operation& operation);
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
    std::size_t buffer_bytes_ = 0;
    std::size_t receives_ = 0;
    Pages receive_pages_, send_pages_;   // unmapped after the destructor has closed every object that uses them
    fid_mr* receive_mr_ = nullptr;
    fid_mr* send_mr_ = nullptr;
    std::vector<std::size_t> free_slots_;
    std::size_t registrations_ = 0;
    boost::asio::steady_timer timer_;
    std::chrono::microseconds backoff_{0};
    std::chrono::steady_clock::time_point last_completion_;
    bool poll_scheduled_ = false;
    std::size_t outstanding_ = 0;   // sends and receives posted and not yet complete: nothing to poll for at 0
    Lifetime lifetime_;
};

} // namespace canopy::fabric
