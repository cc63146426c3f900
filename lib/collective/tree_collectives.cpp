// Fences and routed requests over the daemon tree, for one tree position.
#include "collective/tree_collectives.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "collective/routing.hpp"

namespace canopy {
namespace {

// Status codes on the wire: 0 is success, anything else failure with the payload as its message.
constexpr std::int32_t wire_failed = 1;

Bytes text_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string bytes_text(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

// Splits a blob into chunk-sized frames; an empty blob is still one (final) frame.
template <typename Message>
void send_chunks(const Message& header, const Bytes& blob, const std::function<void(std::vector<std::uint8_t>)>& send)
{
    std::size_t offset = 0;
    do {
        std::size_t size = std::min(TreeCollectives::chunk_bytes, blob.size() - offset);
        Message chunk = header;   // the header carries no blob
        chunk.total = blob.size();
        chunk.blob.assign(blob.begin() + static_cast<std::ptrdiff_t>(offset),
                          blob.begin() + static_cast<std::ptrdiff_t>(offset + size));
        offset += size;
        chunk.more = offset < blob.size();
        send(wire::to_frame(chunk));
    } while (offset < blob.size());
}

} // namespace

TreeCollectives::TreeCollectives(Topology topology, std::vector<std::uint64_t> ranks_per_node, long position,
                                 Links links, std::string where)
    : topology_(topology), tracker_(topology, std::move(ranks_per_node), position), position_(position),
      services_(std::move(where))
{
    if (links.to_parent)
        links_.to_parent = [this, send = std::move(links.to_parent)](std::vector<std::uint8_t> frame) {
            ++frames_sent_;
            send(std::move(frame));
        };
    links_.to_child = [this, send = std::move(links.to_child)](long child, std::vector<std::uint8_t> frame) {
        ++frames_sent_;
        send(child, std::move(frame));
    };
    links_.to_children_bulk = std::move(links.to_children_bulk);
}

void TreeCollectives::fence(std::vector<long> participants, Bytes local, Done done, wire::FenceDomain domain,
                            bool local_failed)
{
    FenceId id{std::move(participants), 0, domain};
    id.sequence = tracker_.next_local_sequence(id.participants, domain);
    fence_waiters_[id] = std::move(done);
    if (local_failed)
        fence_status_[id] = 1;
    if (auto blob = tracker_.contribute(id, position_, local))
        subtree_complete(id, fence_status_[id], std::move(*blob));
}

void TreeCollectives::watch_results(wire::FenceDomain domain,
                                    std::function<void(std::int32_t status, const Bytes& result)> seen)
{
    result_watchers_[domain] = std::move(seen);
}

void TreeCollectives::subtree_complete(const FenceId& id, std::int32_t status, Bytes blob)
{
    fence_status_.erase(id);
    if (position_ == 0) {
        // The root turns the fence around: its result goes down every subtree that took part.
        wire::FenceDown down;
        down.domain = id.domain;
        down.participants = id.participants;
        down.sequence = id.sequence;
        down.status = status;
        down.bulk = blob.size() >= bulk_bytes;
        auto children = tracker_.route(id.participants).children;
        send_chunks(down, blob,
                    [&](std::vector<std::uint8_t> frame) { send_down(children, std::move(frame), down.bulk); });
        // After it went down: a watcher may end the job.
        if (auto watcher = result_watchers_.find(id.domain); watcher != result_watchers_.end())
            watcher->second(status, blob);
        return;
    }
    wire::FenceUp up;
    up.domain = id.domain;
    up.participants = id.participants;
    up.sequence = id.sequence;
    up.status = status;
    send_chunks(up, blob, [&](std::vector<std::uint8_t> frame) {
        if (links_.to_parent)
            links_.to_parent(std::move(frame));
    });
}

void TreeCollectives::on_fence_down(const wire::FenceDown& chunk)
{
    FenceId id{chunk.participants, chunk.sequence, chunk.domain};
    auto route = tracker_.route(id.participants);
    if (!route.children.empty())
        send_down(route.children, wire::to_frame(chunk), chunk.bulk);
    auto waiter = fence_waiters_.find(id);
    if (waiter == fence_waiters_.end())
        return;   // only passing through
    auto& result = fence_results_[id];
    append_chunk(result, chunk.blob, chunk.total);
    if (chunk.more)
        return;
    Done done = std::move(waiter->second);
    fence_waiters_.erase(waiter);
    Bytes blob = std::move(result);
    fence_results_.erase(id);
    if (chunk.status != 0)
        done(make_error("a participant of the fence failed"), {});
    else
        done(Status{}, std::move(blob));
}

void TreeCollectives::send_request(long target, wire::RoutedOp op, Bytes payload, Done done)
{
    if (target == position_) {
        services_.dispatch(position_, op, payload, std::move(done));
        return;
    }
    std::uint64_t id = next_request_id_++;
    wire::RoutedRequest request{id, static_cast<std::uint64_t>(position_), static_cast<std::uint64_t>(target), op,
                                std::move(payload)};
    long hop = -1;
    if (!send_toward(target, wire::to_frame(request), &hop)) {
        done(make_error("no tree position {} to send a request to (outside the job, or it has left)", target), {});
        return;
    }
    request_waiters_[id] = std::move(done);
    if (hop != topology_.parent(position_))
        sent_down_[{position_, id}] = hop;
}

void TreeCollectives::publish(KeyValues entries, std::function<void(Status)> done)
{
    request<wire::PublishRequest>(0, {std::move(entries)}, [done = std::move(done)](auto reply) {
        done(reply ? Status{} : Status{reply.error()});
    });
}

void TreeCollectives::lookup(std::vector<std::string> keys, std::function<void(Status, KeyValues)> done,
                             std::size_t wait_for)
{
    request<wire::LookupRequest>(0, {wait_for, std::move(keys)}, [done = std::move(done)](auto reply) {
        if (!reply)
            return done(reply.error(), {});
        done(Status{}, std::move(reply->entries));
    });
}

void TreeCollectives::unpublish(std::vector<std::string> keys, std::function<void(Status)> done)
{
    request<wire::UnpublishRequest>(0, {std::move(keys)}, [done = std::move(done)](auto reply) {
        done(reply ? Status{} : Status{reply.error()});
    });
}

void TreeCollectives::on_request(wire::RoutedRequest request)
{
    long from = static_cast<long>(request.from);
    std::uint64_t id = request.id;
    if (static_cast<long>(request.target) != position_) {
        long target = static_cast<long>(request.target);
        long hop = -1;
        // A request that cannot go on is answered here: its requester must not wait for ever.
        if (!send_toward(target, wire::to_frame(request), &hop))
            reply_error(from, id, fmt::format("tree position {} cannot be reached from {} (it left the job)",
                                              target, position_));
        else if (hop != topology_.parent(position_))
            sent_down_[{from, id}] = hop;
        return;
    }
    services_.dispatch(from, request.op, request.payload, [this, from, id](Status status, Bytes reply) {
        wire::RoutedReply message{id, static_cast<std::uint64_t>(from), status.ok() ? 0 : wire_failed,
                                  status.ok() ? std::move(reply) : text_bytes(status.error().message)};
        send_toward(from, wire::to_frame(message));
    });
}

void TreeCollectives::on_reply(wire::RoutedReply reply)
{
    long to = static_cast<long>(reply.to);
    sent_down_.erase({to, reply.id});
    if (to != position_) {
        send_toward(to, wire::to_frame(reply));
        return;
    }
    auto waiter = request_waiters_.find(reply.id);
    if (waiter == request_waiters_.end())
        return;   // answered already (failed at teardown)
    Done done = std::move(waiter->second);
    request_waiters_.erase(waiter);
    if (reply.status != 0)
        done(Error{bytes_text(reply.payload)}, {});
    else
        done(Status{}, std::move(reply.payload));
}

void TreeCollectives::reply_error(long to, std::uint64_t id, const std::string& why)
{
    if (to != position_) {
        wire::RoutedReply message{id, static_cast<std::uint64_t>(to), wire_failed, text_bytes(why)};
        send_toward(to, wire::to_frame(message));
        return;
    }
    auto waiter = request_waiters_.find(id);
    if (waiter == request_waiters_.end())
        return;
    Done done = std::move(waiter->second);
    request_waiters_.erase(waiter);
    done(Error{why}, {});
}

void TreeCollectives::child_lost(long child)
{
    lost_children_.insert(child);
    std::vector<std::pair<long, std::uint64_t>> unanswered;
    for (auto it = sent_down_.begin(); it != sent_down_.end();) {
        if (it->second == child) {
            unanswered.push_back(it->first);
            it = sent_down_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto [from, id] : unanswered)
        reply_error(from, id, fmt::format("tree position {} left the job before answering a request", child));
}

void TreeCollectives::send_down(const std::vector<long>& children, std::vector<std::uint8_t> frame, bool bulk)
{
    if (bulk && links_.to_children_bulk) {
        frames_sent_ += children.size();
        links_.to_children_bulk(children, std::move(frame));
        return;
    }
    for (long child : children)
        links_.to_child(child, frame);
}

bool TreeCollectives::send_toward(long target, std::vector<std::uint8_t> frame, long* via)
{
    if (target < 0 || target > topology_.nodes())
        return false;
    long hop = next_position(topology_, position_, target);
    if (hop < 0 || hop == position_)
        return false;
    if (via)
        *via = hop;
    if (hop == topology_.parent(position_)) {
        if (!links_.to_parent)
            return false;
        links_.to_parent(std::move(frame));
    } else {
        if (lost_children_.contains(hop))
            return false;
        bool bulk = frame.size() >= bulk_bytes;
        send_down({hop}, std::move(frame), bulk);
    }
    return true;
}

bool TreeCollectives::handle(long from, const wire::Frame& frame)
{
    auto type = static_cast<wire::MessageType>(frame.type);
    if (type == wire::MessageType::fence_up || type == wire::MessageType::fence_down ||
        type == wire::MessageType::routed_request || type == wire::MessageType::routed_reply)
        ++frames_received_;
    switch (type) {
    case wire::MessageType::fence_up: {
        auto chunk = wire::decode_frame<wire::FenceUp>(frame);
        if (!chunk || from == topology_.parent(position_))
            return false;
        FenceId id{std::move(chunk->participants), chunk->sequence, chunk->domain};
        auto& status = fence_status_[id];
        if (chunk->status != 0)
            status = chunk->status;
        if (auto blob = tracker_.contribute(id, from, chunk->blob, !chunk->more, chunk->total))
            subtree_complete(id, fence_status_[id], std::move(*blob));
        return true;
    }
    case wire::MessageType::fence_down: {
        auto chunk = wire::decode_frame<wire::FenceDown>(frame);
        if (!chunk || from != topology_.parent(position_))
            return false;
        on_fence_down(*chunk);
        return true;
    }
    case wire::MessageType::routed_request: {
        auto request = wire::decode_frame<wire::RoutedRequest>(frame);
        if (!request)
            return false;
        on_request(std::move(*request));
        return true;
    }
    case wire::MessageType::routed_reply: {
        auto reply = wire::decode_frame<wire::RoutedReply>(frame);
        if (!reply)
            return false;
        on_reply(std::move(*reply));
        return true;
    }
    default:
        return false;
    }
}

void TreeCollectives::fail_all(const std::string& why)
{
    auto fences = std::move(fence_waiters_);
    fence_waiters_.clear();
    fence_results_.clear();
    fail_waiting(std::move(fences), why);
}

void TreeCollectives::forget_ranks_exchange(std::uint64_t attempt, const std::string& why)
{
    tracker_.forget_ranks_fences(attempt);
    auto of_ranks = [](const auto& entry) { return entry.first.domain != wire::FenceDomain::restart; };
    std::erase_if(fence_status_, of_ranks);
    std::erase_if(fence_results_, of_ranks);
    std::map<FenceId, Done> fences;
    for (auto waiter = fence_waiters_.begin(); waiter != fence_waiters_.end();) {
        auto at = waiter++;
        if (of_ranks(*at))
            fences.insert(fence_waiters_.extract(at));
    }
    fail_waiting(std::move(fences), why);
}

void TreeCollectives::fail_waiting(std::map<FenceId, Done> fences, const std::string& why)
{
    // Taken out first: a callback may start new work, which finds the tables empty.
    auto requests = std::move(request_waiters_);
    request_waiters_.clear();
    sent_down_.clear();
    for (auto& [id, done] : fences)
        done(Error{why}, {});
    for (auto& [id, done] : requests)
        done(Error{why}, {});
}

} // namespace canopy
