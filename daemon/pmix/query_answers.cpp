#include "pmix/query_answers.hpp"

#include <pmix_common.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace canopy {

QueryResults answer_queries(const std::vector<std::vector<std::string>>& keys, const QueryFacts& facts)
{
    QueryResults results;
    for (const auto& query : keys) {
        for (const auto& key : query) {
            ++results.asked;
            if (key == PMIX_QUERY_NAMESPACES)
                results.found.emplace_back(key, fmt::format("{}", fmt::join(facts.nspaces, ",")));
            else if (key == PMIX_QUERY_SPAWN_SUPPORT)
                results.found.emplace_back(key, fmt::format("{}", fmt::join(facts.spawn_attributes, ",")));
            else if (key == PMIX_QUERY_NUM_PSETS)
                results.found.emplace_back(key, std::size_t{0});   // canopy defines no process sets
            else if (key == PMIX_QUERY_PSET_NAMES)
                results.found.emplace_back(key, std::string());
        }
    }
    results.outcome = results.found.empty()                    ? QueryResults::Outcome::none
                      : results.found.size() == results.asked ? QueryResults::Outcome::all
                                                               : QueryResults::Outcome::some;
    return results;
}

} // namespace canopy
