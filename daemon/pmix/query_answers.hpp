// PMIx_Query_info: which keys canopy answers, and with what. PMIx 4.2.2 sends every client query to the host (it
// answers none itself but attribute support), so a key missing here is "not found", never a hang.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace canopy {

// What the host knows when a query comes.
struct QueryFacts {
    std::vector<std::string> nspaces;   // the job's, then any it spawned
    std::vector<std::string> spawn_attributes;
};

using QueryValue = std::variant<std::string, std::size_t>;

struct QueryResults {
    std::vector<std::pair<std::string, QueryValue>> found;   // by key, in the order asked
    std::size_t asked = 0;
    // PMIX_SUCCESS, PMIX_ERR_PARTIAL_SUCCESS or PMIX_ERR_NOT_FOUND, by how many keys were found.
    enum class Outcome { all, some, none } outcome = Outcome::none;
};

// The keys canopy answers, for docs and the test: PMIX_QUERY_NAMESPACES, PMIX_QUERY_SPAWN_SUPPORT,
// PMIX_QUERY_NUM_PSETS, PMIX_QUERY_PSET_NAMES.
QueryResults answer_queries(const std::vector<std::vector<std::string>>& keys, const QueryFacts& facts);

} // namespace canopy
