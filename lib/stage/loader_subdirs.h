/* The subdirectories glibc's loader tries below each LD_LIBRARY_PATH directory, for the interposer (which answers a
 * bare library name when the cache knows none of them exists) and the root's read-ahead (which reads them ahead
 * so that the cache does). C, shared. */
#pragma once

#if defined(__x86_64__)
/* The first component of every subdirectory glibc's loader tries below a search directory on x86-64 (glibc-hwcaps
 * levels, and the legacy tls, platform and hwcap ones); the interposer adds AT_PLATFORM at run time. */
static const char* const canopy_loader_subdirs[] = {"glibc-hwcaps", "tls", "x86_64", "haswell", "xeon_phi"};
#define CANOPY_LOADER_SUBDIRS_KNOWN 1
#else
#define CANOPY_LOADER_SUBDIRS_KNOWN 0
#endif
