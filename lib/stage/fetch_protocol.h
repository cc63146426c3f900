/* On-demand staging between a rank's interposer and its node's canopyd: the unix-socket request and reply (C). */
#pragma once

/*
 * One connection per lookup: the rank connects to CANOPY_STAGE_SOCKET, writes a request (header + path bytes),
 * reads a reply (header + text bytes) and closes. Native byte order: both ends run on the same node.
 *
 * The daemon answers from its cache, or asks its parent (up to the root, which reads the real filesystem).
 * A reply with status != 0 means "no answer" (parent lost, root could not read): the rank falls back to the
 * real filesystem, which is correct, only unstaged.
 */

#include <stdint.h>

#include "stage/path_facts.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CANOPY_STAGE_FETCH_MAGIC 0x32465343u /* "CSF2" */

enum canopy_stage_fetch_kind {
    CANOPY_STAGE_FETCH_METADATA = 1, /* stat, lstat, access, readlink: the two views and the symlink target */
    CANOPY_STAGE_FETCH_OPEN = 2,     /* an open for reading: also the content of a file, the listing of a directory */
};

struct canopy_stage_fetch_request {
    uint32_t magic;
    uint32_t kind;
    uint32_t want_text; /* METADATA: 1 sends the symlink target; OPEN always sends the mirror path */
    uint32_t path_len;  /* bytes of the absolute, normalized path that follow (no NUL) */
};

struct canopy_stage_fetch_reply {
    uint32_t magic;
    int32_t status;    /* 0: answered; else no answer (errno-like), fall back to the real filesystem */
    uint32_t text_len; /* bytes that follow (no NUL), < CANOPY_STAGE_PATH_MAX: the symlink target for METADATA,
                        * the mirror (canonical path) for OPEN when the facts say CONTENT or LISTED */
    uint32_t pad;
    struct canopy_stage_path_facts facts;
};

#ifdef __cplusplus
}
#endif
