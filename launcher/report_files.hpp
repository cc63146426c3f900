// Files the launcher writes when the job ends (--timing=FILE, --trace=FILE): checked before the job starts, so a
// path that cannot be written fails at once instead of after the whole job, and written whole or not at all.
#pragma once

#include <string>
#include <string_view>

#include "util/result.hpp"

namespace canopy {

// Whether a file can be created at `path` now: its directory exists, and a file can really be made there (which
// also catches a read-only mount or a full quota, for root as for anyone). Errors say why.
Status check_report_file(const std::string& path);

// Whether --timing=FILE names a page (FILE.html, FILE.htm, any case) rather than JSON.
bool is_html_file(std::string_view path);

// Writes `content` to a temporary file beside `path` and renames it over `path`: a reader never sees half a file,
// and a failed write leaves what was there.
Status write_report_file(const std::string& path, std::string_view content);

} // namespace canopy
