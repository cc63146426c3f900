// Reads a node's topology with hwloc: this machine's, or an hwloc XML file's (--topology, as HWLOC_XMLFILE does for
// hwloc's own tools). libhwloc is loaded at run time, on the first call: a job that binds nothing never maps it, so
// a daemon's start costs what it did without it.
#pragma once

#include <string>

#include "affinity/node_topology.hpp"
#include "util/result.hpp"

namespace canopy {

// `xml_file` empty: this machine, limited to the CPUs this process may use. `with_devices`: find its GPUs and NICs
// too, which costs hwloc a scan of the PCI devices (about 7 ms a node on this project's VM, against 1 ms without).
// Errors name the file, or say that hwloc could not be loaded and which package has it.
Result<NodeTopology> load_node_topology(const std::string& xml_file, bool with_devices = true);

} // namespace canopy
