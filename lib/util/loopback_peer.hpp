// Who holds the far end of a TCP connection made on this host, as the kernel knows it. Loopback TCP has no
// SO_PEERCRED, and PMIx's own handshake carries a uid the client merely claims; the kernel's socket table
// (sock_diag) records which user made each socket.
#pragma once

#include <sys/types.h>

#include "util/result.hpp"

namespace canopy {

// Whether the connected TCP socket `fd` comes from a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z).
bool from_loopback(int fd);

// The user who made the socket at the far end of the connected loopback TCP socket `fd`. An error when the kernel
// knows no such socket here, or when no process holds it any more (closed or orphaned: then nothing says whose it
// was), so that any doubt refuses.
Result<uid_t> loopback_peer_uid(int fd);

// Whether `fd` may be served by a process that admits only its own user on loopback: true for a connection from
// another host or a Unix socket (which are authenticated otherwise), and for a loopback one whose far end this
// process's effective user made. `peer` gets the far end's uid where known, else -1.
bool loopback_peer_is_own_user(int fd, long& peer);

} // namespace canopy
