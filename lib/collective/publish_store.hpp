// The job-wide publish/lookup store kept at the root (PMIx_Publish, MPI_Publish_name and friends).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "collective/routed_services.hpp"
#include "wire/routed.hpp"

namespace canopy {

// Keys are unique job-wide; a lookup gets the entries found, and none found is not an error. A lookup waiting for
// `wait_for` of its keys (PMIx's PMIX_WAIT) is answered once that many are published.
class PublishStore {
public:
    // Registers the store's publish, lookup and unpublish requests.
    void serve_on(RoutedServices& services);

    void publish(wire::PublishRequest request, RoutedServices::Reply<wire::PublishRequest> reply);
    void lookup(wire::LookupRequest request, RoutedServices::Reply<wire::LookupRequest> reply);
    void unpublish(const wire::UnpublishRequest& request, RoutedServices::Reply<wire::UnpublishRequest> reply);
    // Answers every waiting lookup with an error: the job is ending.
    void fail_waiting(const std::string& why);
    // The job's ranks restart (--max-restarts): every name goes, and the waiting lookups with their ranks.
    void forget_values()
    {
        values_.clear();
        waiting_.clear();
    }
    std::size_t size() const { return values_.size(); }
    std::size_t waiting() const { return waiting_.size(); }

private:
    struct WaitingLookup {
        wire::LookupRequest request;
        RoutedServices::Reply<wire::LookupRequest> reply;
    };
    wire::KeyValues found(const std::vector<std::string>& keys) const;
    void answer_waiting();

    std::map<std::string, std::vector<std::uint8_t>> values_;
    std::vector<WaitingLookup> waiting_;
};

} // namespace canopy
