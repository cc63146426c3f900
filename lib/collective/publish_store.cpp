// The job-wide publish/lookup store kept at the root.
#include "collective/publish_store.hpp"

#include <algorithm>

namespace canopy {

void PublishStore::serve_on(RoutedServices& services)
{
    services.serve<wire::PublishRequest>(
        [this](long, wire::PublishRequest request, auto reply) { publish(std::move(request), std::move(reply)); });
    services.serve<wire::LookupRequest>(
        [this](long, wire::LookupRequest request, auto reply) { lookup(std::move(request), std::move(reply)); });
    services.serve<wire::UnpublishRequest>(
        [this](long, wire::UnpublishRequest request, auto reply) { unpublish(request, std::move(reply)); });
}

wire::KeyValues PublishStore::found(const std::vector<std::string>& keys) const
{
    wire::KeyValues entries;
    for (const auto& key : keys)
        if (auto it = values_.find(key); it != values_.end())
            entries.emplace_back(key, it->second);
    return entries;
}

void PublishStore::answer_waiting()
{
    std::vector<WaitingLookup> still;
    std::vector<std::pair<RoutedServices::Reply<wire::LookupRequest>, wire::KeyValues>> ready;
    for (auto& lookup : waiting_) {
        auto entries = found(lookup.request.keys);
        if (entries.size() >= lookup.request.wait_for)
            ready.emplace_back(std::move(lookup.reply), std::move(entries));
        else
            still.push_back(std::move(lookup));
    }
    waiting_ = std::move(still);
    for (auto& [reply, entries] : ready)   // after the list is whole again: a reply may serve another request
        reply(wire::LookupReply{std::move(entries)});
}

void PublishStore::publish(wire::PublishRequest request, RoutedServices::Reply<wire::PublishRequest> reply)
{
    // All or nothing: a publish that names a taken key changes nothing.
    for (const auto& [key, value] : request.entries)
        if (values_.contains(key))
            return reply(make_error("key '{}' is already published in this job", key));
    for (auto& [key, value] : request.entries)
        values_[key] = std::move(value);
    reply(wire::Acknowledged{});
    answer_waiting();
}

void PublishStore::lookup(wire::LookupRequest request, RoutedServices::Reply<wire::LookupRequest> reply)
{
    request.wait_for = std::min<std::uint64_t>(request.wait_for, request.keys.size());
    auto entries = found(request.keys);
    if (entries.size() >= request.wait_for)
        return reply(wire::LookupReply{std::move(entries)});
    waiting_.push_back({std::move(request), std::move(reply)});
}

void PublishStore::unpublish(const wire::UnpublishRequest& request,
                             RoutedServices::Reply<wire::UnpublishRequest> reply)
{
    // PMIx_Unpublish without keys would mean "all the caller published"; the store does not know callers, and
    // removing every rank's data would be worse, so it removes nothing.
    for (const auto& key : request.keys)
        values_.erase(key);
    reply(wire::Acknowledged{});
}

void PublishStore::fail_waiting(const std::string& why)
{
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& lookup : waiting)
        lookup.reply(make_error("{}", why));
}

} // namespace canopy
