// An RDM endpoint: choosing the provider, opening its objects, and polling its completion queue.
#include "fabric/endpoint.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

namespace canopy::fabric {
namespace {

// What canopy needs of a provider: reliable messages in order and our contexts. It can register its buffers
// (FI_MR_LOCAL), so providers that need that (efa's RDM endpoints in some versions) are offered too.
fi_info* make_hints(const Api& api, const char* provider)
{
    fi_info* hints = api.dupinfo(nullptr);
    if (!hints)
        return nullptr;
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    if (provider)
        hints->fabric_attr->prov_name = ::strdup(provider);   // freed with the hints
    return hints;
}

// "shm, tcp;ofi_rxm, ...": the providers this node offers canopy, for error lines.
std::string offered(const Api& api)
{
    fi_info* hints = make_hints(api, nullptr);
    fi_info* found = nullptr;
    int rc = hints ? api.getinfo(api_version, nullptr, nullptr, 0, hints, &found) : -FI_ENOMEM;
    api.freeinfo(hints);
    std::vector<std::string> names;
    for (fi_info* info = rc == 0 ? found : nullptr; info; info = info->next)
        if (info->fabric_attr && info->fabric_attr->prov_name &&
            std::find(names.begin(), names.end(), info->fabric_attr->prov_name) == names.end())
            names.emplace_back(info->fabric_attr->prov_name);
    api.freeinfo(found);
    return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

Result<fi_info*> choose(const Api& api, const ProviderChoice& choice)
{
    fi_info* hints = make_hints(api, choice.automatic ? nullptr : choice.name.c_str());
    if (!hints)
        return make_error("cannot allocate libfabric hints");
    fi_info* found = nullptr;
    int rc = api.getinfo(api_version, nullptr, nullptr, 0, hints, &found);
    api.freeinfo(hints);
    if (!choice.automatic) {
        if (rc != 0 || !found) {
            api.freeinfo(found);
            return make_error("libfabric has no provider '{}' for canopy here (it offers: {})", choice.name,
                              offered(api));
        }
        fi_info* picked = api.dupinfo(found);
        api.freeinfo(found);
        return picked;
    }
    for (const auto& name : preferred_providers(choice.one_host))
        for (fi_info* info = rc == 0 ? found : nullptr; info; info = info->next)
            if (info->fabric_attr && info->fabric_attr->prov_name && name == info->fabric_attr->prov_name) {
                fi_info* picked = api.dupinfo(info);
                api.freeinfo(found);
                return picked;
            }
    api.freeinfo(found);
    return make_error("no provider faster than TCP (this node offers: {})", offered(api));
}

std::string describe(const Api& api, int rc) { return fmt::format("{} ({})", api.strerror(-rc), rc); }

std::string mebibytes(std::size_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// Where a node's fabric hardware shows: Slingshot (cxi), and InfiniBand, RoCE, EFA and Omni-Path adapters, which
// all register as infiniband devices.
std::optional<std::string> fabric_device()
{
    for (const char* where : {"/sys/class/cxi", "/sys/class/infiniband"}) {
        std::error_code error;
        for (const auto& entry : std::filesystem::directory_iterator(where, error))
            return entry.path().string();
    }
    return std::nullopt;
}

struct Picked {
    const Api* api;
    fi_info* info;   // the caller's to free
};

// auto loads libfabric only where there is fabric hardware: loading Debian's build costs a process 0.25 s (PSM's
// timer calibration at load), which a node with nothing faster than TCP should not pay.
Result<Picked> pick(const ProviderChoice& choice)
{
    if (choice.automatic && !fabric_device())
        return make_error("no fabric device on this node (nothing in /sys/class/cxi or /sys/class/infiniband)");
    SignalHandlersKept handlers;   // while libfabric loads its providers
    auto api = load_api();
    if (!api)
        return api.error();
    auto info = choose(**api, choice);
    if (!info)
        return info.error();
    return Picked{*api, *info};
}

} // namespace

Status provider_available(const ProviderChoice& choice)
{
    auto picked = pick(choice);
    if (!picked)
        return picked.error();
    picked->api->freeinfo(picked->info);
    return {};
}

ProviderChoice parse_provider_choice(const std::string& text, bool one_host)
{
    if (text == "auto")
        return {true, {}, one_host};
    return {false, text, one_host};
}

const std::vector<std::string>& preferred_providers(bool one_host)
{
    // Slingshot, InfiniBand (through rxm), EFA, Omni-Path and Intel's PSM3.
    static const std::vector<std::string> hosts = {"cxi", "verbs;ofi_rxm", "efa", "opx", "psm3", "psm2"};
    static const std::vector<std::string> one = [] {
        std::vector<std::string> list = {"shm"};
        list.insert(list.end(), hosts.begin(), hosts.end());
        return list;
    }();
    return one_host ? one : hosts;
}

Endpoint::Pages::~Pages()
{
    if (data_)
        ::munmap(data_, size_);
}

Status Endpoint::Pages::allocate(std::size_t size)
{
    if (size == 0)
        return {};
    void* mapped = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED)
        return make_error("cannot map {} for fabric buffers: {}", mebibytes(size), std::strerror(errno));
    data_ = static_cast<std::uint8_t*>(mapped);
    size_ = size;
    return {};
}

Endpoint::Endpoint(boost::asio::io_context& io, const Api& api) : io_(io), api_(api), timer_(io) {}

Result<fid_mr*> Endpoint::register_pages(const Pages& pages, std::uint64_t access, std::uint64_t key,
                                         const char* what)
{
    fid_mr* mr = nullptr;
    ++registrations_;
    // Keys differ: a provider without FI_MR_PROV_KEY takes ours, unique in the domain.
    int rc = fi_mr_reg(domain_, pages.data(), pages.size(), access, 0, key, 0, &mr, nullptr);
    if (rc != 0)
        return make_error("{}: registering its {} ({}) failed: {}{}", provider_, what, mebibytes(pages.size()),
                          describe(api_, rc),
                          rc == -FI_ENOMEM ? "; is the locked-memory limit (ulimit -l) lower than that?" : "");
    return mr;
}

Status Endpoint::allocate(const Buffers& buffers, bool registering)
{
    buffer_bytes_ = buffers.bytes;
    receives_ = buffers.receives;
    if (auto mapped = receive_pages_.allocate(receives_ * buffer_bytes_); !mapped)
        return make_error("{}: {}", provider_, mapped.error().message);
    if (!registering)
        return {};
    // Sends are copied into a ring of slots registered once, rather than registered where their bytes are: the
    // fabric plane makes a fresh frame for every message (and every relay), so that would be a fi_mr_reg (a system
    // call, pages pinned) per message. Copying at most 1 MiB costs less than the tag check each node makes anyway.
    if (auto mapped = send_pages_.allocate(buffers.send_slots * buffer_bytes_); !mapped)
        return make_error("{}: {}", provider_, mapped.error().message);
    if (receive_pages_.size() > 0) {
        auto mr = register_pages(receive_pages_, FI_RECV, 1, "receive buffers");
        if (!mr)
            return mr.error();
        receive_mr_ = *mr;
    }
    if (send_pages_.size() > 0) {
        auto mr = register_pages(send_pages_, FI_SEND, 2, "send buffers");
        if (!mr)
            return mr.error();
        send_mr_ = *mr;
        for (std::size_t slot = buffers.send_slots; slot-- > 0;)
            free_slots_.push_back(slot);
    }
    return {};
}

Result<std::unique_ptr<Endpoint>> Endpoint::open(boost::asio::io_context& io, const ProviderChoice& choice,
                                                 const Buffers& buffers)
{
    auto picked = pick(choice);
    if (!picked)
        return picked.error();
    const Api* api = picked->api;
    fi_info* info = picked->info;
    std::unique_ptr<Endpoint> endpoint(new Endpoint(io, *api));
    Endpoint& e = *endpoint;
    e.provider_ = info->fabric_attr->prov_name;
    e.max_message_ = info->ep_attr->max_msg_size;
    auto fail = [&](const char* step, int rc) {
        std::string message = fmt::format("{}: {} failed: {}", e.provider_, step, describe(*api, rc));
        api->freeinfo(info);
        return make_error("{}", message);
    };
    if (int rc = api->open_fabric(info->fabric_attr, &e.fabric_, nullptr); rc != 0)
        return fail("fi_fabric", rc);
    if (int rc = fi_domain(e.fabric_, info, &e.domain_, nullptr); rc != 0)
        return fail("fi_domain", rc);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_MSG;
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (int rc = fi_cq_open(e.domain_, &cq_attr, &e.cq_, nullptr); rc != 0)
        return fail("fi_cq_open", rc);
    fi_av_attr av_attr{};
    av_attr.type = info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info->domain_attr->av_type;
    if (int rc = fi_av_open(e.domain_, &av_attr, &e.av_, nullptr); rc != 0)
        return fail("fi_av_open", rc);
    if (int rc = fi_endpoint(e.domain_, info, &e.ep_, nullptr); rc != 0)
        return fail("fi_endpoint", rc);
    if (int rc = fi_ep_bind(e.ep_, &e.cq_->fid, FI_TRANSMIT | FI_RECV); rc != 0)
        return fail("binding the completion queue", rc);
    if (int rc = fi_ep_bind(e.ep_, &e.av_->fid, 0); rc != 0)
        return fail("binding the address vector", rc);
    if (int rc = fi_enable(e.ep_); rc != 0)
        return fail("fi_enable", rc);
    std::size_t length = 64;
    e.address_.resize(length);
    int rc = fi_getname(&e.ep_->fid, e.address_.data(), &length);
    if (rc == -FI_ETOOSMALL) {
        e.address_.resize(length);
        rc = fi_getname(&e.ep_->fid, e.address_.data(), &length);
    }
    if (rc != 0)
        return fail("fi_getname", rc);
    e.address_.resize(length);
    std::string name(e.address_.begin(), std::find(e.address_.begin(), e.address_.end(), '\0'));
    if (e.provider_ == "shm" && name.starts_with("fi_shm://") && name.find('/', 9) == std::string::npos)
        e.shared_memory_file_ = "/dev/shm/" + name.substr(9);
    bool needs_registration = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
    api->freeinfo(info);
    if (auto allocated = e.allocate(buffers, needs_registration || buffers.always_register); !allocated)
        return allocated.error();
    e.last_completion_ = std::chrono::steady_clock::now();
    return endpoint;
}

Endpoint::~Endpoint()
{
    lifetime_.end();
    // Closed before the operations' owners free them: no completion can arrive after this. The registrations go
    // before their domain, and the pages they cover after everything (members outlive this body).
    for (fid* object : {ep_ ? &ep_->fid : nullptr, receive_mr_ ? &receive_mr_->fid : nullptr,
                        send_mr_ ? &send_mr_->fid : nullptr, av_ ? &av_->fid : nullptr, cq_ ? &cq_->fid : nullptr,
                        domain_ ? &domain_->fid : nullptr, fabric_ ? &fabric_->fid : nullptr})
        if (object)
            fi_close(object);
}

Result<fi_addr_t> Endpoint::add_peer(std::span<const std::uint8_t> address)
{
    fi_addr_t peer = FI_ADDR_UNSPEC;
    int inserted = fi_av_insert(av_, address.data(), 1, &peer, 0, nullptr);
    if (inserted != 1)
        return make_error("{}: cannot add a peer's address ({} bytes) to the address vector: {}", provider_,
                          address.size(), inserted < 0 ? describe(api_, inserted) : std::string("refused"));
    return peer;
}

std::span<std::uint8_t> Endpoint::receive_buffer(std::size_t index)
{
    return {receive_pages_.data() + index * buffer_bytes_, buffer_bytes_};
}

Result<bool> Endpoint::send(fi_addr_t peer, std::span<const iovec> pieces, Operation& operation)
{
    std::size_t length = 0;
    for (const iovec& piece : pieces)
        length += piece.iov_len;
    if (length > buffer_bytes_)
        return make_error("{}: a {}-byte message is larger than the endpoint's {}-byte buffers", provider_, length,
                          buffer_bytes_);
    ssize_t rc;
    if (!send_mr_) {
        rc = fi_sendv(ep_, pieces.data(), nullptr, pieces.size(), peer, &operation.context);
    } else if (free_slots_.empty()) {
        rc = -FI_EAGAIN;   // every slot is in flight: a completion frees one
    } else {
        std::uint8_t* staged = send_pages_.data() + free_slots_.back() * buffer_bytes_;
        for (const iovec& piece : pieces) {
            if (piece.iov_len == 0)
                continue;   // an empty piece may have no base at all, and memcpy must not see a null one
            std::memcpy(staged, piece.iov_base, piece.iov_len);
            staged += piece.iov_len;
        }
        rc = fi_send(ep_, staged - length, length, fi_mr_desc(send_mr_), peer, &operation.context);
        if (rc == 0) {
            operation.staging_slot = free_slots_.back();
            free_slots_.pop_back();
        }
    }
    if (rc == -FI_EAGAIN) {
        poll_soon();
        return false;
    }
    if (rc != 0)
        return make_error("{}: fi_sendv failed: {}", provider_, describe(api_, static_cast<int>(rc)));
    ++outstanding_;
    backoff_ = {};
    poll_soon();
    return true;
}

Status Endpoint::receive(std::size_t index, Operation& operation)
{
    if (index >= receives_)
        return make_error("{}: no receive buffer {} (the endpoint has {})", provider_, index, receives_);
    void* buffer = receive_buffer(index).data();
    void* descriptor = receive_mr_ ? fi_mr_desc(receive_mr_) : nullptr;
    ssize_t rc;
    while ((rc = fi_recv(ep_, buffer, buffer_bytes_, descriptor, FI_ADDR_UNSPEC, &operation.context)) == -FI_EAGAIN)
        poll();   // the provider's queue is full of completions we have not read
    if (rc != 0)
        return make_error("{}: fi_recv failed: {}", provider_, describe(api_, static_cast<int>(rc)));
    ++outstanding_;
    backoff_ = {};
    poll_soon();
    return {};
}

void Endpoint::finish(Operation& operation)
{
    --outstanding_;
    if (operation.staging_slot != no_slot) {
        free_slots_.push_back(operation.staging_slot);
        operation.staging_slot = no_slot;
    }
}

void Endpoint::poll_soon()
{
    if (outstanding_ == 0)
        return;
    if (poll_scheduled_) {
        if (backoff_.count() == 0)
            timer_.cancel();   // the waiting poll runs now
        return;
    }
    poll_scheduled_ = true;
    timer_.expires_after(backoff_);
    timer_.async_wait(lifetime_.guard([this](const boost::system::error_code&) {
        poll_scheduled_ = false;
        poll();
    }));
}

void Endpoint::poll()
{
    auto watch = lifetime_.watch();   // a completion's owner may destroy this endpoint
    bool any = false;
    std::array<fi_cq_msg_entry, 32> entries;
    for (;;) {
        ssize_t count = fi_cq_read(cq_, entries.data(), entries.size());
        if (count > 0) {
            any = true;
            for (ssize_t i = 0; i < count; ++i) {
                auto* operation = reinterpret_cast<Operation*>(entries[static_cast<std::size_t>(i)].op_context);
                finish(*operation);
                operation->done({}, entries[static_cast<std::size_t>(i)].len);
                if (!watch.alive())
                    return;
            }
            continue;
        }
        if (count == -FI_EAVAIL) {
            fi_cq_err_entry error{};
            if (fi_cq_readerr(cq_, &error, 0) > 0) {
                any = true;
                auto* operation = reinterpret_cast<Operation*>(error.op_context);
                finish(*operation);
                const char* detail = fi_cq_strerror(cq_, error.prov_errno, error.err_data, nullptr, 0);
                operation->done(make_error("{}: {}{}{}", provider_, api_.strerror(error.err), detail ? ": " : "",
                                           detail ? detail : ""),
                                0);
                if (!watch.alive())
                    return;
                continue;
            }
        }
        break;
    }
    auto now = std::chrono::steady_clock::now();
    if (any) {
        last_completion_ = now;
        backoff_ = {};
    } else {
        auto cap = now - last_completion_ < std::chrono::seconds(1) ? std::chrono::microseconds(2000)
                                                                     : std::chrono::microseconds(20000);
        backoff_ = std::min<std::chrono::microseconds>(cap, std::max<std::chrono::microseconds>(
                                                                 std::chrono::microseconds(50), backoff_ * 2));
    }
    poll_soon();
}

} // namespace canopy::fabric
