// Telling whether a host name in a job's list is the machine we run on, so that its daemon starts directly
// rather than through ssh to ourselves (which a single-node job on a machine without sshd cannot do).
#pragma once

#include <string>
#include <string_view>

namespace canopy {

// This machine's host name (gethostname), "localhost" if it has none.
std::string this_host_name();

// True when `host` is this machine's host name, its short name or its canonical name (one lookup, made once),
// "localhost", or a literal address of one of its interfaces. Other names are not looked up: a job of 10,000
// hosts must not make 10,000 DNS queries. Names compare without regard to case.
bool names_this_host(std::string_view host);

} // namespace canopy
