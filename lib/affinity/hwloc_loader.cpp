// hwloc through dlopen: the functions canopy calls are looked up once; hwloc's inline helpers are not used, since
// they would need the library linked.
#include "affinity/hwloc_loader.hpp"

#include <dlfcn.h>
#include <hwloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "affinity/cpubind.hpp"
#include "util/library_symbols.hpp"

namespace canopy {
namespace {

constexpr const char* hwloc_library = "libhwloc.so.15";

struct Hwloc {
    decltype(&hwloc_get_api_version) get_api_version = nullptr;
    decltype(&hwloc_topology_init) topology_init = nullptr;
    decltype(&hwloc_topology_set_xml) topology_set_xml = nullptr;
    decltype(&hwloc_topology_set_io_types_filter) topology_set_io_types_filter = nullptr;
    decltype(&hwloc_topology_load) topology_load = nullptr;
    decltype(&hwloc_topology_destroy) topology_destroy = nullptr;
    decltype(&hwloc_get_type_depth) get_type_depth = nullptr;
    decltype(&hwloc_get_nbobjs_by_depth) get_nbobjs_by_depth = nullptr;
    decltype(&hwloc_get_obj_by_depth) get_obj_by_depth = nullptr;
    decltype(&hwloc_bitmap_first) bitmap_first = nullptr;
    decltype(&hwloc_bitmap_next) bitmap_next = nullptr;
};

// Loaded once per process; RTLD_GLOBAL because hwloc's plugins (PCI discovery) take their symbols from it. The first
// call decides which plugins load: a process binds one job's ranks, so every later call wants the same devices.
Result<const Hwloc*> hwloc_functions(bool with_devices)
{
    static std::optional<Result<const Hwloc*>> loaded;
    if (loaded)
        return *loaded;
    static Hwloc functions;
    // Read by hwloc as it starts, and left to the user when set. Its X11 and OpenCL plugins find displays and
    // OpenCL devices, which no binding uses (the X11 one tries 32 displays); without its libxml2 plugin (which maps
    // ICU) it reads XML with its own parser, twice as fast; PCI discovery only when devices are wanted. 1.7 ms of a
    // 2.8 ms load, on this project's VM.
    ::setenv("HWLOC_PLUGINS_BLACKLIST",
             with_devices ? "hwloc_gl,hwloc_opencl,hwloc_xml_libxml" : "hwloc_gl,hwloc_opencl,hwloc_xml_libxml,hwloc_pci",
             0);
    void* library = ::dlopen(hwloc_library, RTLD_NOW | RTLD_GLOBAL);
    if (library == nullptr) {
        loaded = make_error("cannot load {} (Debian's package libhwloc15): {}", hwloc_library, ::dlerror());
        return *loaded;
    }
    LibrarySymbols symbols(library);
    symbols.find(functions.get_api_version, "hwloc_get_api_version");
    symbols.find(functions.topology_init, "hwloc_topology_init");
    symbols.find(functions.topology_set_xml, "hwloc_topology_set_xml");
    symbols.find(functions.topology_set_io_types_filter, "hwloc_topology_set_io_types_filter");
    symbols.find(functions.topology_load, "hwloc_topology_load");
    symbols.find(functions.topology_destroy, "hwloc_topology_destroy");
    symbols.find(functions.get_type_depth, "hwloc_get_type_depth");
    symbols.find(functions.get_nbobjs_by_depth, "hwloc_get_nbobjs_by_depth");
    symbols.find(functions.get_obj_by_depth, "hwloc_get_obj_by_depth");
    symbols.find(functions.bitmap_first, "hwloc_bitmap_first");
    symbols.find(functions.bitmap_next, "hwloc_bitmap_next");
    if (symbols.missing() != nullptr)
        loaded = make_error("{} lacks {}", hwloc_library, symbols.missing());
    else if ((functions.get_api_version() >> 16) != (HWLOC_API_VERSION >> 16))
        loaded = make_error("{} is API {:x}, canopy was built for {:x}", hwloc_library, functions.get_api_version(),
                            HWLOC_API_VERSION);
    else
        loaded = &functions;
    return *loaded;
}

CpuList bitmap_list(const Hwloc& hwloc, hwloc_const_bitmap_t bitmap)
{
    CpuList ids;
    if (bitmap == nullptr)
        return ids;
    for (int id = hwloc.bitmap_first(bitmap); id >= 0; id = hwloc.bitmap_next(bitmap, id))
        ids.push_back(id);
    return ids;
}

CpuList only_allowed(CpuList cpus, const CpuList& allowed)
{
    std::erase_if(cpus, [&](int cpu) { return !std::binary_search(allowed.begin(), allowed.end(), cpu); });
    return cpus;
}

bool has_prefix_then_digit(const char* name, std::string_view prefix)
{
    return name != nullptr && std::string_view(name).starts_with(prefix) && std::strlen(name) > prefix.size() &&
           name[prefix.size()] >= '0' && name[prefix.size()] <= '9';
}

std::string pci_bus_id(hwloc_obj_t pci)
{
    const auto& attr = pci->attr->pcidev;
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", attr.domain, attr.bus, attr.dev, attr.func);
}

hwloc_obj_t pci_ancestor(hwloc_obj_t obj)
{
    while (obj != nullptr && obj->type != HWLOC_OBJ_PCI_DEVICE)
        obj = obj->parent;
    return obj;
}

hwloc_obj_t non_io_ancestor(hwloc_obj_t obj)
{
    while (obj != nullptr && obj->cpuset == nullptr)
        obj = obj->parent;
    return obj;
}

// A GPU by the backend that named it; which backends a node has depends on its drivers and hwloc's plugins.
struct GpuName {
    GpuVendor vendor;
    std::string_view prefix;
};
constexpr GpuName gpu_backends[] = {
    {GpuVendor::nvidia, "nvml"}, {GpuVendor::nvidia, "cuda"}, {GpuVendor::amd, "rsmi"}, {GpuVendor::intel, "ze"}};

// A GPU seen only as a PCI device (no vendor backend in this hwloc): display controllers of the three vendors.
// Intel's VGA-class devices are integrated graphics, not accelerators.
std::optional<GpuVendor> pci_gpu_vendor(hwloc_obj_t pci)
{
    unsigned class_id = pci->attr->pcidev.class_id;
    bool display = (class_id >> 8) == 0x03 || class_id == 0x1200;
    switch (pci->attr->pcidev.vendor_id) {
    case 0x10de:
        return display ? std::optional(GpuVendor::nvidia) : std::nullopt;
    case 0x1002:
        return display && class_id != 0x0300 ? std::optional(GpuVendor::amd) : std::nullopt;
    case 0x8086:
        return display && class_id != 0x0300 ? std::optional(GpuVendor::intel) : std::nullopt;
    default:
        return std::nullopt;
    }
}

// Level Zero's FLAT hierarchy (its default) shows each tile as a device of its own, numbered across the GPUs in
// order: GPU 1's tile 0 is device 2 when GPU 0 has two tiles.
void number_flat_devices(NodeTopology& node)
{
    int next = 0;
    for (auto& gpu : node.gpus) {
        if (gpu.vendor != GpuVendor::intel)
            continue;
        for (auto& tile : node.tiles)
            if (tile.vendor == gpu.vendor && tile.index == gpu.index) {
                tile.flat.push_back(next);
                gpu.flat.push_back(next++);
            }
        if (gpu.flat.empty())
            gpu.flat.push_back(next++);
    }
}

class TopologyReader {
public:
    TopologyReader(const Hwloc& hwloc, hwloc_topology_t topology, CpuList allowed)
        : hwloc_(hwloc), topology_(topology), allowed_(std::move(allowed))
    {
    }

    void read(NodeTopology& node)
    {
        node.numa_domains = domains(HWLOC_OBJ_NUMANODE);
        node.packages = domains(HWLOC_OBJ_PACKAGE);
        read_cores(node);
        if (node.numa_domains.empty())
            node.numa_domains.push_back({0, node.all_cpus()});
        if (node.packages.empty())
            node.packages.push_back({0, node.all_cpus()});
        for (auto& core : node.cores) {
            core.numa = holder(node.numa_domains, core.cpus.front());
            core.package = holder(node.packages, core.cpus.front());
        }
        read_places(node);
        read_devices(node);
    }

private:
    std::vector<hwloc_obj_t> objects(hwloc_obj_type_t type)
    {
        std::vector<hwloc_obj_t> found;
        int depth = hwloc_.get_type_depth(topology_, type);
        if (depth == HWLOC_TYPE_DEPTH_UNKNOWN || depth == HWLOC_TYPE_DEPTH_MULTIPLE)
            return found;
        unsigned count = hwloc_.get_nbobjs_by_depth(topology_, depth);
        for (unsigned i = 0; i < count; ++i)
            found.push_back(hwloc_.get_obj_by_depth(topology_, depth, i));
        return found;
    }

    CpuList near_cpus(hwloc_obj_t obj)
    {
        hwloc_obj_t holder = non_io_ancestor(obj);
        CpuList all = bitmap_list(hwloc_, holder == nullptr ? nullptr : holder->cpuset);
        CpuList usable = only_allowed(all, allowed_);
        return usable.empty() ? all : usable;
    }

    std::vector<TopologyDomain> domains(hwloc_obj_type_t type)
    {
        std::vector<TopologyDomain> found;
        for (hwloc_obj_t obj : objects(type)) {
            CpuList cpus = only_allowed(bitmap_list(hwloc_, obj->cpuset), allowed_);
            if (!cpus.empty())
                found.push_back({static_cast<int>(obj->os_index), std::move(cpus)});
        }
        return found;
    }

    static int holder(const std::vector<TopologyDomain>& domains, int cpu)
    {
        for (std::size_t i = 0; i < domains.size(); ++i)
            if (std::binary_search(domains[i].cpus.begin(), domains[i].cpus.end(), cpu))
                return static_cast<int>(i);
        return 0;
    }

    void read_cores(NodeTopology& node)
    {
        auto cores = objects(HWLOC_OBJ_CORE);
        if (cores.empty())   // some virtual machines show PUs only
            cores = objects(HWLOC_OBJ_PU);
        for (hwloc_obj_t obj : cores) {
            CpuList cpus = only_allowed(bitmap_list(hwloc_, obj->cpuset), allowed_);
            if (!cpus.empty())
                node.cores.push_back({std::move(cpus), 0, 0});
        }
        std::sort(node.cores.begin(), node.cores.end(),
                  [](const TopologyCore& a, const TopologyCore& b) { return a.cpus.front() < b.cpus.front(); });
    }

    void read_places(NodeTopology& node)
    {
        for (hwloc_obj_t pu : objects(HWLOC_OBJ_PU)) {
            if (!std::binary_search(allowed_.begin(), allowed_.end(), static_cast<int>(pu->os_index)))
                continue;
            PuPlace place;
            place.cpu = static_cast<int>(pu->os_index);
            place.pu = static_cast<int>(pu->logical_index);
            for (hwloc_obj_t above = pu->parent; above != nullptr; above = above->parent) {
                int index = static_cast<int>(above->logical_index);
                switch (above->type) {
                case HWLOC_OBJ_PACKAGE: place.package = index; break;
                case HWLOC_OBJ_L3CACHE: place.l3 = index; break;
                case HWLOC_OBJ_L2CACHE: place.l2 = index; break;
                case HWLOC_OBJ_L1CACHE: place.l1 = index; break;
                case HWLOC_OBJ_CORE: place.core = index; break;
                default: break;
                }
                // NUMA nodes hang beside the objects they serve, as memory children.
                for (hwloc_obj_t memory = above->memory_first_child; memory != nullptr && place.numa < 0;
                     memory = memory->next_sibling)
                    if (memory->type == HWLOC_OBJ_NUMANODE)
                        place.numa = static_cast<int>(memory->logical_index);
            }
            node.places.push_back(place);
        }
        std::sort(node.places.begin(), node.places.end(),
                  [](const PuPlace& a, const PuPlace& b) { return a.cpu < b.cpu; });
    }

    void read_devices(NodeTopology& node)
    {
        // Every name a backend gave a GPU's PCI device; the first backend in gpu_backends wins.
        struct Found {
            GpuVendor vendor;
            int backend;
            int index;
            std::map<int, bool> tiles;
            hwloc_obj_t pci;
        };
        std::map<std::string, Found> gpus;   // by PCI bus id
        std::map<std::string, TopologyNic> nics;
        for (hwloc_obj_t osdev : objects(HWLOC_OBJ_OS_DEVICE)) {
            hwloc_obj_t pci = pci_ancestor(osdev);
            if (pci == nullptr)
                continue;
            std::string bus = pci_bus_id(pci);
            auto type = osdev->attr->osdev.type;
            if (type == HWLOC_OBJ_OSDEV_OPENFABRICS || type == HWLOC_OBJ_OSDEV_NETWORK) {
                std::string_view name = osdev->name == nullptr ? "" : osdev->name;
                auto& nic = nics[bus];
                nic.pci_bus = bus;
                nic.near_cpus = near_cpus(pci);
                // Verbs devices (mlx5_0) are OpenFabrics; Slingshot's cxi0 a Network device beside its hsn0.
                if (type == HWLOC_OBJ_OSDEV_OPENFABRICS || name.starts_with("cxi"))
                    nic.device = name;
                else if (nic.interface.empty())
                    nic.interface = name;
                continue;
            }
            for (int backend = 0; backend < static_cast<int>(std::size(gpu_backends)); ++backend) {
                const GpuName& named = gpu_backends[backend];
                if (!has_prefix_then_digit(osdev->name, named.prefix))
                    continue;
                std::string_view digits = std::string_view(osdev->name).substr(named.prefix.size());
                int index = std::atoi(std::string(digits).c_str());
                std::size_t dot = digits.find('.');
                auto [entry, added] = gpus.try_emplace(bus, Found{named.vendor, backend, index, {}, pci});
                if (dot != std::string_view::npos) {   // a subdevice: ze0.1
                    entry->second.tiles[std::atoi(std::string(digits.substr(dot + 1)).c_str())] = true;
                } else if (!added && backend < entry->second.backend) {
                    entry->second.backend = backend;
                    entry->second.index = index;
                }
                break;
            }
        }
        // GPUs no backend named: numbered per vendor in PCI order, as NVML and nvidia-smi do.
        std::map<GpuVendor, int> unnamed;
        for (hwloc_obj_t pci : objects(HWLOC_OBJ_PCI_DEVICE)) {
            auto vendor = pci_gpu_vendor(pci);
            if (!vendor || gpus.contains(pci_bus_id(pci)))
                continue;
            gpus.emplace(pci_bus_id(pci), Found{*vendor, -1, unnamed[*vendor]++, {}, pci});
        }
        for (auto& [bus, found] : gpus) {
            TopologyGpu gpu{found.vendor, found.index, -1, bus, near_cpus(found.pci)};
            for (const auto& [tile, present] : found.tiles) {
                TopologyGpu part = gpu;
                part.tile = tile;
                node.tiles.push_back(std::move(part));
            }
            node.gpus.push_back(std::move(gpu));
        }
        auto by_ordinal = [](const TopologyGpu& a, const TopologyGpu& b) {
            return std::tie(a.vendor, a.index, a.tile) < std::tie(b.vendor, b.index, b.tile);
        };
        std::sort(node.gpus.begin(), node.gpus.end(), by_ordinal);
        std::sort(node.tiles.begin(), node.tiles.end(), by_ordinal);
        number_flat_devices(node);
        for (auto& [bus, nic] : nics) {
            // hwloc 2.9.0 shows a Slingshot NIC as its hsnN interface only; a plain Ethernet port is no fabric NIC.
            if (nic.device.empty() && nic.interface.starts_with("hsn"))
                nic.device = nic.interface;
            if (!nic.device.empty())
                node.nics.push_back(std::move(nic));
        }
        std::sort(node.nics.begin(), node.nics.end(),
                  [](const TopologyNic& a, const TopologyNic& b) { return a.device < b.device; });
    }

    const Hwloc& hwloc_;
    hwloc_topology_t topology_;
    CpuList allowed_;
};

Result<NodeTopology> read_node_topology(const std::string& xml_file, bool with_devices)
{
    auto hwloc = hwloc_functions(with_devices);
    if (!hwloc)
        return hwloc.error();
    const Hwloc& h = **hwloc;
    hwloc_topology_t raw = nullptr;
    if (h.topology_init(&raw) != 0)
        return make_error("hwloc cannot start: {}", std::strerror(errno));
    std::unique_ptr<hwloc_topology, decltype(h.topology_destroy)> topology(raw, h.topology_destroy);
    if (!xml_file.empty() && h.topology_set_xml(raw, xml_file.c_str()) != 0)
        return make_error("--topology {}: {}", xml_file, std::strerror(errno));
    h.topology_set_io_types_filter(raw, with_devices ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT : HWLOC_TYPE_FILTER_KEEP_NONE);
    if (h.topology_load(raw) != 0)
        return make_error("{}: hwloc cannot read it: {}", xml_file.empty() ? "this node's topology" : xml_file,
                          std::strerror(errno));
    NodeTopology node;
    node.source = xml_file.empty() ? "this machine" : xml_file;
    node.foreign = !xml_file.empty();
    // A foreign node's CPUs are all its own; this one's are those the daemon may use (its cgroup and affinity).
    hwloc_obj_t root = h.get_obj_by_depth(raw, 0, 0);
    CpuList allowed = xml_file.empty() ? allowed_cpus() : bitmap_list(h, root->cpuset);
    TopologyReader(h, raw, std::move(allowed)).read(node);
    if (node.cores.empty())
        return make_error("{}: the topology has no CPUs {}", node.source,
                          xml_file.empty() ? "this process may use" : "");
    return node;
}

} // namespace

Result<NodeTopology> load_node_topology(const std::string& xml_file, bool with_devices)
{
    // A daemon plans its ranks and its PMIx server's locality from one read.
    static std::map<std::pair<std::string, bool>, Result<NodeTopology>> loaded;
    auto key = std::pair(xml_file, with_devices);
    if (auto found = loaded.find(key); found != loaded.end())
        return found->second;
    auto topology = read_node_topology(xml_file, with_devices);
    loaded.emplace(key, topology);
    return topology;
}

} // namespace canopy
