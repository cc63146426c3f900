/* The canopy release this header belongs to, for applications that check it at build time. */
#ifndef CANOPY_VERSION_H
#define CANOPY_VERSION_H

#define CANOPY_VERSION_MAJOR 0
#define CANOPY_VERSION_MINOR 1
#define CANOPY_VERSION_PATCH 0

#endif
