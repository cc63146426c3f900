/* Prints the GPU, co-processor and NIC OS devices of hwloc XML files as canopy's loader sees them. */

/*
 * Not built by meson; it documents how the files in this folder load.
 *   gcc -O2 -Wall -Wextra -o /tmp/show_devices tests/topologies/show_devices.c -lhwloc
 *   /tmp/show_devices tests/topologies/polaris.xml tests/topologies/frontier.xml
 *
 * One line per OS device:
 *   <name> type=<osdev type> subtype=<subtype> pci=<busid> near=<non-I/O ancestor>
 *     cpuset=<list> nodeset=<list> parent=<osdev, for Level Zero subdevices>
 *     infos: <name>=<value> ...
 */

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>

static const char *osdev_type_name(hwloc_obj_osdev_type_t type)
{
	switch (type) {
	case HWLOC_OBJ_OSDEV_GPU: return "GPU";
	case HWLOC_OBJ_OSDEV_COPROC: return "CoProc";
	case HWLOC_OBJ_OSDEV_OPENFABRICS: return "OpenFabrics";
	case HWLOC_OBJ_OSDEV_NETWORK: return "Network";
	case HWLOC_OBJ_OSDEV_BLOCK: return "Block";
	case HWLOC_OBJ_OSDEV_DMA: return "DMA";
	}
	return "?";
}

static int is_reported(hwloc_obj_osdev_type_t type)
{
	return type == HWLOC_OBJ_OSDEV_GPU || type == HWLOC_OBJ_OSDEV_COPROC
	    || type == HWLOC_OBJ_OSDEV_OPENFABRICS || type == HWLOC_OBJ_OSDEV_NETWORK;
}

/* The PCI device above an OS device; a Level Zero tile sits under its root device first. */
static hwloc_obj_t pci_device_of(hwloc_obj_t obj)
{
	while (obj && obj->type != HWLOC_OBJ_PCI_DEVICE)
		obj = obj->parent;
	return obj;
}

static void print_osdev(hwloc_topology_t topology, hwloc_obj_t osdev)
{
	hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topology, osdev);
	hwloc_obj_t pci = pci_device_of(osdev);
	char *cpuset = NULL, *nodeset = NULL;
	char near_type[64] = "none";

	if (near) {
		hwloc_obj_type_snprintf(near_type, sizeof near_type, near, 0);
		hwloc_bitmap_list_asprintf(&cpuset, near->cpuset);
		hwloc_bitmap_list_asprintf(&nodeset, near->nodeset);
	}

	printf("%-10s type=%-7s subtype=%-9s", osdev->name,
	       osdev_type_name(osdev->attr->osdev.type), osdev->subtype ? osdev->subtype : "-");
	if (pci)
		printf(" pci=%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
		       pci->attr->pcidev.dev, pci->attr->pcidev.func);
	printf(" near=%s#%u cpuset=%s nodeset=%s", near_type, near ? near->logical_index : 0,
	       cpuset ? cpuset : "-", nodeset ? nodeset : "-");
	if (osdev->parent && osdev->parent->type == HWLOC_OBJ_OS_DEVICE)
		printf(" parent=%s", osdev->parent->name);
	printf("\n");

	if (osdev->infos_count) {
		printf("           infos:");
		for (unsigned i = 0; i < osdev->infos_count; i++)
			printf(" %s=%s", osdev->infos[i].name, osdev->infos[i].value);
		printf("\n");
	}
	free(cpuset);
	free(nodeset);
}

static int show_file(const char *path)
{
	hwloc_topology_t topology;
	hwloc_obj_t osdev = NULL;

	if (hwloc_topology_init(&topology) < 0) {
		perror("hwloc_topology_init");
		return -1;
	}
	/* I/O objects are dropped at load time unless the filter keeps them; canopy's loader keeps all. */
	hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_ALL);
	if (hwloc_topology_set_xml(topology, path) < 0 || hwloc_topology_load(topology) < 0) {
		fprintf(stderr, "%s: cannot load as hwloc XML\n", path);
		hwloc_topology_destroy(topology);
		return -1;
	}

	printf("== %s\n", path);
	while ((osdev = hwloc_get_next_osdev(topology, osdev)) != NULL)
		if (is_reported(osdev->attr->osdev.type))
			print_osdev(topology, osdev);

	hwloc_topology_destroy(topology);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s TOPOLOGY.xml...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++)
		if (show_file(argv[i]) < 0)
			failed = 1;
	return failed;
}
