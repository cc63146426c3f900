// torchrun's error files: each rank gets TORCHELASTIC_ERROR_FILE, where torch.distributed.elastic's @record writes
// the exception that ended it. When the rank fails, its node reads the file, so that the job's one failure line
// says what was raised and where, and the timing JSON keeps the traceback.
#pragma once

#include <optional>
#include <string>

namespace canopy {

// The rank's file in its node's temp dir (removed with it).
std::string error_file_for(const std::string& node_tmpdir, long rank);

struct RecordedError {
    std::string summary;     // "ValueError: bad lr (at /work/train.py:12 in main)"
    std::string traceback;   // Python's, as recorded; at most 64 KiB
};

// What the file records; nullopt when there is no file or it is not what @record writes.
std::optional<RecordedError> read_error_file(const std::string& path);

} // namespace canopy
