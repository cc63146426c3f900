// Host lists from hostfiles (Open MPI / MPICH / PBS_NODEFILE style) and from SLURM's environment.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

struct HostEntry {
    std::string name;
    int slots = 0; // 0 = not given

    bool operator==(const HostEntry&) const = default;
};

// Lines: "host", "host:slots", "host slots=N" ("max_slots=M" is accepted and ignored), '#' comments
// (whole line or trailing), blank lines, surrounding whitespace. A name may use hostlist syntax and then
// gives several entries with the same slots.
// Consecutive duplicate names merge: without explicit slots each line counts one slot, and then every
// host without explicit slots gets its line count (a PBS_NODEFILE lists a host once per slot:
// "n1\nn1\nn2" -> {n1,2},{n2,1}); with explicit slots on every merged line the slots add up; mixing the
// two for one host is an error. Non-consecutive duplicates are an error naming both lines.
// Errors name the file and line: `hostfile hosts.txt:3: slots must be a positive integer, got "x"`.
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, std::string_view file_name);

// Reads and parses the file. Missing/unreadable -> `hostfile FILE: cannot read: No such file or
// directory`; no hosts in it -> `hostfile FILE: no hosts listed`.
Result<std::vector<HostEntry>> read_hostfile(const std::string& path);

// --hosts: a hostlist whose items may end in ":slots" as a hostfile's lines may, e.g. "n1:2,nid[01-04]:4" (the
// slots apply to every host of the item). An item with several ':' is an IPv6 address and has no slots. Errors
// quote the item: `--hosts "n1:x": slots must be a positive integer, got "x"`.
Result<std::vector<HostEntry>> parse_hosts_option(std::string_view list);

// SLURM_JOB_NODELIST + SLURM_TASKS_PER_NODE ("2(x3),1" means 2,2,2,1) -> entries with slots.
// An empty tasks_per_node leaves slots at 0 (not given).
Result<std::vector<HostEntry>> hosts_from_slurm(std::string_view nodelist, std::string_view tasks_per_node);

} // namespace canopy
