// The fabric plane: announcing endpoints, sealed sends to each child, checked receives from the parent.
#include "fabric/fabric_plane.hpp"

#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "tree/topology.hpp"
#include "util/log.hpp"

namespace canopy::fabric {
namespace {

spdlog::logger& fabric_log() { return area_logger("fabric"); }

} // namespace

struct FabricPlane::Send : Endpoint::Operation {
    long child = 0;
    SealHeader header;
    std::shared_ptr<const Outgoing> message;
    std::vector<std::uint8_t> corrupted;   // fault injection: what goes out instead
};

struct FabricPlane::Receive : Endpoint::Operation {
    std::size_t index = 0;           // the endpoint's receive buffer it posts
    std::span<std::uint8_t> buffer;
};

bool uses_fabric(const wire::LaunchPlan& plan) { return plan.job.fabric != "off"; }

FabricPlane::FabricPlane(boost::asio::io_context& io, const auth::Key& key, long position, std::string node,
                         std::string parent, ChildSet& children, Hooks hooks)
    : io_(io), job_key_(key), position_(position), node_(std::move(node)), parent_(std::move(parent)),
      children_(children), hooks_(std::move(hooks)), retry_(io)
{
}

FabricPlane::~FabricPlane()
{
    lifetime_.end();
    endpoint_.reset();
}

Result<std::unique_ptr<FabricPlane>> FabricPlane::open(boost::asio::io_context& io, const auth::Key& key,
                                                       const wire::LaunchPlan& plan, long position, std::string node,
                                                       ChildSet& children, Hooks hooks)
{
    bool one_host = plan.simulated || plan.agent == "local";
    // Every daemon of a job on one machine talks over loopback only; elsewhere the site's settings stand.
    if (one_host)
        ::setenv("FI_TCP_IFACE", "lo", 0);
    Topology topology(static_cast<long>(plan.hosts.size()), static_cast<long>(plan.fanout));
    long above = position > 0 ? topology.parent(position) : -1;
    Endpoint::Buffers buffers;
    buffers.receives = above >= 0 ? receive_buffers : 0;
    buffers.send_slots = topology.children(position).empty() ? 0 : staged_sends;
    buffers.bytes = sizeof(SealHeader) + max_frame_bytes;
    const char* force_registration = std::getenv("CANOPY_TEST_FABRIC_REGISTER");
    buffers.always_register = force_registration && std::string_view(force_registration) == "1";
    auto endpoint = Endpoint::open(io, parse_provider_choice(plan.job.fabric, one_host), buffers);
    if (!endpoint)
        return endpoint.error();
    if ((*endpoint)->registers_memory())
        fabric_log().debug("{}: {} registers its buffers ({})", node, (*endpoint)->provider(),
                           buffers.always_register ? "CANOPY_TEST_FABRIC_REGISTER" : "the provider needs FI_MR_LOCAL");
    std::string parent = above < 0    ? std::string()
                         : above == 0 ? std::string("the launcher")
                                      : plan.hosts[static_cast<std::size_t>(Topology::position_to_node(above))];
    std::unique_ptr<FabricPlane> plane(
        new FabricPlane(io, key, position, std::move(node), std::move(parent), children, std::move(hooks)));
    plane->endpoint_ = std::move(*endpoint);
    plane->payload_key_ = payload_key(key);
    if (const char* corrupt = std::getenv("CANOPY_FAULT_FABRIC_CORRUPT"))
        plane->corrupt_send_ = std::strtoull(corrupt, nullptr, 10);
    if (above >= 0) {
        plane->parent_key_ = link_key(key, above, position);
        for (std::size_t i = 0; i < receive_buffers; ++i) {
            auto receive = std::make_unique<Receive>();
            receive->index = i;
            receive->buffer = plane->endpoint_->receive_buffer(i);
            plane->receives_.push_back(std::move(receive));
        }
        for (auto& receive : plane->receives_) {
            plane->post(*receive);
            if (plane->failed_)
                return make_error("cannot post receives on {}", plane->endpoint_->provider());
        }
    }
    return plane;
}

wire::FabricHello FabricPlane::hello() const { return {endpoint_->provider(), endpoint_->address(), {}}; }

const std::string& FabricPlane::shared_memory_file() const { return endpoint_->shared_memory_file(); }

void FabricPlane::child_announced(long position, const wire::FabricHello& hello)
{
    ChildPath& path = paths_[position];
    if (path.kind != ChildPath::Kind::undecided)
        return;
    const std::string& host = children_.host_of(position);
    path.kind = ChildPath::Kind::link;
    if (hello.address.empty()) {
        fabric_log().info("{} has no fabric ({}): its bulk data goes over its TCP link", host, hello.why_not);
        return;
    }
    if (hello.provider != endpoint_->provider()) {
        fabric_log().info("{} uses {}, {} uses {}: bulk data to it goes over its TCP link", host, hello.provider,
                          node_, endpoint_->provider());
        return;
    }
    auto address = endpoint_->add_peer(hello.address);
    if (!address) {
        fabric_log().warn("{}; bulk data to {} goes over its TCP link", address.error().message, host);
        return;
    }
    path.kind = ChildPath::Kind::fabric;
    path.address = *address;
    path.key = link_key(job_key_, position_, position);
    fabric_log().debug("bulk data to {} goes over {}", host, endpoint_->provider());
}

std::shared_ptr<const FabricPlane::Outgoing> FabricPlane::made_here(std::vector<std::uint8_t> frame)
{
    std::uint64_t message = (static_cast<std::uint64_t>(position_) << 40) | made_++;
    auto tag = tag_payload(payload_key_, message, frame);
    return std::make_shared<const Outgoing>(Outgoing{std::move(frame), message, tag});
}

void FabricPlane::broadcast(std::vector<std::uint8_t> frame, bool urgent)
{
    send_to(children_.connected_positions(), made_here(std::move(frame)), urgent);
}

void FabricPlane::send(const std::vector<long>& children, std::vector<std::uint8_t> frame)
{
    if (frame.size() > max_frame_bytes) {   // one large reply: the links carry it whole
        for (long child : children)
            children_.send(child, frame);
        return;
    }
    send_to(children, made_here(std::move(frame)));
}

void FabricPlane::relay(const wire::Frame& frame, bool urgent)
{
    if (children_.connected_count() == 0)
        return;   // a leaf
    auto bytes = wire::encode_frame(frame);
    // A frame that came over the fabric keeps the tag it was checked with: one pass per node, not per child.
    auto children = children_.connected_positions();
    if (&frame == delivering_)
        send_to(children,
                std::make_shared<const Outgoing>(Outgoing{std::move(bytes), delivering_message_, delivering_tag_}),
                urgent);
    else
        send_to(children, made_here(std::move(bytes)), urgent);
}

void FabricPlane::send_to(const std::vector<long>& children, std::shared_ptr<const Outgoing> message, bool urgent)
{
    if (failed_)
        return;
    if (message->frame.size() > max_frame_bytes) {
        fail(fmt::format("a {}-byte bulk frame is larger than the fabric's {} bytes", message->frame.size(),
                         max_frame_bytes));
        return;
    }
    // Children that never announced an endpoint keep their link for good; a lost one gets nothing.
    for (long position : children) {
        if (!children_.connected(position))
            continue;
        ChildPath& path = paths_[position];
        if (path.kind == ChildPath::Kind::undecided) {
            path.kind = ChildPath::Kind::link;
            fabric_log().debug("{} sent no fabric hello before its first bulk data: it gets it over its TCP link",
                               children_.host_of(position));
        }
        if (path.kind == ChildPath::Kind::link) {
            children_.send(position, message->frame, urgent);
            continue;
        }
        path.waiting.push_back(message);
        path.waiting_bytes += message->frame.size();
        pump(position);
    }
}

void FabricPlane::pump(long child)
{
    ChildPath& path = paths_[child];
    while (!failed_ && path.in_flight < sends_per_child && !path.waiting.empty()) {
        auto send = std::make_unique<Send>();
        Send* raw = send.get();
        send->child = child;
        send->message = path.waiting.front();
        send->header = seal(path.key, path.next_sequence, send->message->message, send->message->frame.size(),
                            send->message->tag);
        send->done = lifetime_.guard([this, raw](Status status, std::size_t) { sent(raw, status); });
        const std::uint8_t* payload = send->message->frame.data();
        if (corrupt_send_ && *corrupt_send_ == sends_made_) {
            send->corrupted = send->message->frame;
            send->corrupted.back() ^= 0x40;
            payload = send->corrupted.data();
        }
        iovec pieces[2] = {{&send->header, sizeof send->header},
                           {const_cast<std::uint8_t*>(payload), send->message->frame.size()}};
        auto queued = endpoint_->send(path.address, pieces, *send);
        if (!queued) {
            fail(fmt::format("cannot send bulk data from {} to {}: {}", node_, children_.host_of(child),
                             queued.error().message));
            return;
        }
        if (!*queued) {   // the provider's queue or the endpoint's send slots are full: again shortly
            retry_.expires_after(std::chrono::microseconds(200));
            retry_.async_wait(lifetime_.guard([this](const boost::system::error_code& error) {
                if (!error)
                    pump_all();
            }));
            return;
        }
        sends_.emplace(raw, std::move(send));
        ++sends_made_;
        ++path.in_flight;
        ++path.next_sequence;
        path.waiting_bytes -= path.waiting.front()->frame.size();
        path.waiting.pop_front();
    }
}

void FabricPlane::pump_all(long after)
{
    auto next = paths_.upper_bound(after);
    for (std::size_t visited = 0; visited < paths_.size() && !failed_; ++visited, ++next) {
        if (next == paths_.end())
            next = paths_.begin();
        if (next->second.kind == ChildPath::Kind::fabric)
            pump(next->first);
    }
}

void FabricPlane::sent(Send* send, const Status& status)
{
    auto owned = std::move(sends_.at(send));
    sends_.erase(send);
    if (!status) {
        fail(fmt::format("bulk data from {} to {} failed on the fabric: {}", node_, children_.host_of(owned->child),
                         status.error().message));
        return;
    }
    --paths_[owned->child].in_flight;
    pump_all(owned->child);   // the others first: a freed staging slot goes round the children in turn
    resume_receives();
}

void FabricPlane::post(Receive& receive)
{
    receive.done = lifetime_.guard(
        [this, &receive](Status status, std::size_t length) { received(receive, status, length); });
    if (auto posted = endpoint_->receive(receive.index, receive); !posted)
        fail(fmt::format("cannot receive bulk data on {}: {}", node_, posted.error().message));
}

void FabricPlane::received(Receive& receive, const Status& status, std::size_t length)
{
    if (failed_)
        return;
    if (!status) {
        fail(fmt::format("bulk data from {} to {} failed on the fabric: {}", parent_, node_, status.error().message));
        return;
    }
    SealHeader header;
    if (length < sizeof header) {
        fail(fmt::format("bulk data from {} to {}: a {}-byte message, too short to be one; dropped", parent_, node_,
                         length));
        return;
    }
    std::memcpy(&header, receive.buffer.data(), sizeof header);
    std::span<const std::uint8_t> message(receive.buffer.data() + sizeof header, length - sizeof header);
    auto tag = unseal(parent_key_, payload_key_, header, message);
    if (!tag) {
        // Never written anywhere: the stream cannot go on without it, so the job ends here rather than waits.
        fail(fmt::format("bulk data from {} to {} over {} failed its check and was dropped: {}", parent_, node_,
                         endpoint_->provider(), tag.error().message));
        return;
    }
    if (header.sequence < expected_sequence_ || early_.count(header.sequence) ||
        header.sequence >= expected_sequence_ + receive_buffers) {
        fail(fmt::format("bulk data from {} to {} over {}: message {} arrived where {} was due; dropped", parent_,
                         node_, endpoint_->provider(), header.sequence, expected_sequence_));
        return;
    }
    early_.emplace(header.sequence, std::make_pair(&receive, header));
    auto watch = lifetime_.watch();   // delivering may end the job, and this plane with it
    // Hand on, in the parent's order, every message that is now due.
    for (auto due = early_.find(expected_sequence_); due != early_.end(); due = early_.find(expected_sequence_)) {
        auto [ready, ready_header] = due->second;
        early_.erase(due);
        ++expected_sequence_;
        deliver(*ready, ready_header, PayloadTag{ready_header.tag_kind, ready_header.tag});
        if (!watch.alive() || failed_)
            return;
    }
}

void FabricPlane::deliver(Receive& receive, const SealHeader& header, const PayloadTag& tag)
{
    auto frame = wire::read_frame(
        std::span<const std::uint8_t>(receive.buffer.data() + sizeof header, header.length));
    if (!frame) {
        fail(fmt::format("bulk data from {} to {}: {}", parent_, node_, frame.error().message));
        return;
    }
    auto watch = lifetime_.watch();
    delivering_ = &*frame;
    delivering_message_ = header.message;
    delivering_tag_ = tag;
    hooks_.deliver(*frame);
    if (!watch.alive())
        return;
    delivering_ = nullptr;
    if (lagging())
        held_.push_back(&receive);
    else
        post(receive);
}

bool FabricPlane::lagging() const
{
    for (const auto& [position, path] : paths_)
        if (path.waiting_bytes > window_bytes)
            return true;
    return false;
}

void FabricPlane::resume_receives()
{
    if (held_.empty() || lagging())
        return;
    auto held = std::move(held_);
    held_.clear();
    for (Receive* receive : held)
        post(*receive);
}

std::size_t FabricPlane::max_queued_bytes() const
{
    std::size_t most = children_.max_queued_bytes();
    for (const auto& [position, path] : paths_)
        most = std::max(most, path.waiting_bytes + path.in_flight * max_frame_bytes);
    return most;
}

void FabricPlane::fail(const std::string& line)
{
    if (failed_)
        return;
    failed_ = true;
    hooks_.fail(line);
}

wire::FabricHello start_fabric_plane(boost::asio::io_context& io, const auth::Key& key, const wire::LaunchPlan& plan,
                                     long position, std::string node, TreePosition& tree, FabricPlane::Hooks hooks)
{
    auto fail = hooks.fail;
    auto watch_file = hooks.watch_file;
    auto plane = FabricPlane::open(io, key, plan, position, node, tree.children(), std::move(hooks));
    if (!plane) {
        std::string why = plane.error().message;
        if (plan.job.fabric != "auto")
            fail(fmt::format("--fabric {} on {}: {}", plan.job.fabric, node, why));
        return {{}, {}, why};
    }
    auto hello = (*plane)->hello();
    if (const auto& file = (*plane)->shared_memory_file(); !file.empty() && watch_file)
        watch_file(file);
    tree.use_bulk_route(std::move(*plane));
    return hello;
}

} // namespace canopy::fabric
