/* The facts about one path, one struct wherever they travel: the index's builder and entries, the fetch cache,
 * the tree's stage-fetch-reply, the ranks' socket reply and the node's answer board (C, shared). */
#pragma once

#include <stdint.h>

#include "stage/index_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fixed size and layout: it is part of the socket reply (fetch_protocol.h) and the board (board_format.h), whose
 * magic numbers change with it. */
struct canopy_stage_path_facts {
    int32_t lstat_errno; /* 0: lstat is valid; else what lstat fails with (ENOENT, ENOTDIR, EACCES, ...) */
    int32_t stat_errno;  /* the followed view; equals the lstat view unless the path is a symlink */
    int32_t open_errno;  /* on demand: opening the regular file or directory at the root failed with this, else 0 */
    uint32_t flags;      /* canopy_stage_flags: CONTENT (a copy is in the node cache at <cache>/root<mirror>) and
                          * LISTED (the listing is known; a skeleton at <cache>/dirs<mirror>); an index entry's
                          * also REQUESTED and READ */
    struct canopy_stage_stat lstat;
    struct canopy_stage_stat stat; /* symlinks followed */
};

/* A change of size here changes the socket reply and the board: bump their magic numbers with it. */
#ifdef __cplusplus
static_assert(sizeof(struct canopy_stage_path_facts) == 256, "the facts are part of two fixed layouts");
#else
_Static_assert(sizeof(struct canopy_stage_path_facts) == 256, "the facts are part of two fixed layouts");
#endif

#ifdef __cplusplus
}
#endif
