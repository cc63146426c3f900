// Why a system call ran out of something: which limit of the user's or the node's it is at.
#pragma once

#include <string>

namespace canopy {

// Which limit a failure with `error` hit: for EAGAIN from a fork or a thread's clone, this user's process limit
// (`ulimit -u`, which counts threads too) or the system's process table; for EMFILE, this process's descriptor
// limit (`ulimit -n`); for ENFILE, the system's file table; "" for other errors. Appended to "cannot start a
// process: <strerror>", "cannot create a pipe: <strerror>" and the like.
std::string limit_note(int error);

} // namespace canopy
