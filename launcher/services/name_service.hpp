// The job's name service at the root: PMIx_Publish, MPI_Publish_name and their lookups (collective/publish_store).
#pragma once

#include "collective/publish_store.hpp"
#include "root_service.hpp"

namespace canopy {

class NameService : public RootService {
public:
    void serve_requests(RoutedServices& services) override { store_.serve_on(services); }
    void stop(const std::string& why) override { store_.fail_waiting(why); }
    void next_attempt() override { store_.forget_values(); }

private:
    PublishStore store_;
};

} // namespace canopy
