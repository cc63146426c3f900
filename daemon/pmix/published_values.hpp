// Published values travel through the tree as opaque bytes: the publisher's pmix_proc_t, then the pmix_value_t,
// packed by PMIx, so a lookup can report who published.
#pragma once

#include <cstdint>
#include <vector>

#include <pmix.h>

#include "util/result.hpp"

namespace canopy {

Result<std::vector<std::uint8_t>> pack_published(const pmix_proc_t& publisher, const pmix_value_t& value);

// Fills `out`'s proc and value (its key is the caller's).
pmix_status_t unpack_published(const std::vector<std::uint8_t>& bytes, pmix_pdata_t& out);

} // namespace canopy
