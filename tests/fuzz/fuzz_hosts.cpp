// Fuzzes what users and batch systems hand canopy as hosts: hostlists, hostfiles and SLURM's variables.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hosts/host_names.hpp"
#include "hosts/hostfile.hpp"
#include "hosts/hostlist.hpp"

namespace {

// An upper bound on the hosts `text` can expand to: every bracket group gives at most 10^digits per range.
// Lists up to max_hostlist_hosts are legitimate and cost linear time (0.25 s for a million without sanitizers),
// but a large one takes over the 1 s limit under them, so the fuzzer keeps to lists that stay small.
double most_hosts(std::string_view text)
{
    double bound = 1 + static_cast<double>(std::count(text.begin(), text.end(), ',') +
                                           std::count(text.begin(), text.end(), '\n'));
    for (std::size_t open = text.find('['); open != std::string_view::npos; open = text.find('[', open + 1)) {
        auto close = text.find(']', open);
        auto group = text.substr(open, close == std::string_view::npos ? close : close - open);
        std::size_t digits = 0, run = 0;
        for (char c : group) {
            run = (c >= '0' && c <= '9') ? run + 1 : 0;
            digits = std::max(digits, run);
        }
        bound *= static_cast<double>(1 + std::count(group.begin(), group.end(), ',')) * std::pow(10.0, digits);
    }
    return bound;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    if (most_hosts(text) > 20000)
        return 0;

    auto hosts = canopy::expand_hostlist(text);
    if (hosts) {
        // The tree sends host lists compressed; every daemon must expand them back to the same names.
        auto again = canopy::expand_hostlist(canopy::compress_hostlist(*hosts));
        if (!again || *again != *hosts)
            std::abort();
    }
    // A daemon keeps the list compressed and names hosts one at a time: the same names, and the same verdict.
    auto names = canopy::HostNames::parse(text);
    if (names.ok() != hosts.ok())
        std::abort();
    if (names) {
        if (names->size() != hosts->size() || names->expand() != *hosts)
            std::abort();
        for (std::size_t i = 0; i < hosts->size(); i += 1 + hosts->size() / 16)
            if ((*names)[i] != (*hosts)[i])
                std::abort();
    }

    (void)canopy::parse_hostfile(text, "fuzz-hosts");

    // SLURM_JOB_NODELIST, a newline, then SLURM_TASKS_PER_NODE.
    auto newline = text.find('\n');
    if (newline != std::string_view::npos)
        (void)canopy::hosts_from_slurm(text.substr(0, newline), text.substr(newline + 1));
    return 0;
}
