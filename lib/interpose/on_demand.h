/* On demand: what the index cannot answer, the node's canopyd is asked, or its answer board read. */
#pragma once

#include <stddef.h>
#include <sys/un.h>

#include "interpose/paths.h"
#include "stage/board_format.h"
#include "stage/fetch_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

struct on_demand {
    char socket_path[sizeof(((struct sockaddr_un*)0)->sun_path)]; /* empty: off */
    struct canopy_stage_board_view board; /* answers the daemon already gave this node; base NULL: none */
    const struct cache_dir* cache;        /* where the board's listings have their skeletons */
    long timeout;                         /* seconds one question may take */
    int dead; /* the daemon did not answer once (gone, or hung): ask no more, use the real filesystem */
};

/* socket_path (NULL or relative: off) is CANOPY_STAGE_SOCKET, timeout (NULL: 120 s) CANOPY_STAGE_FETCH_TIMEOUT;
 * the board is <cache>/answers. */
void on_demand_start(struct on_demand* o, const struct cache_dir* cache, const char* socket_path,
                     const char* timeout);

/* Asks about path[0..len) (absolute, normalized). text (PMAX bytes, or NULL) receives the reply's text,
 * NUL-terminated. Returns 0 with *r filled, or -1: no answer (no daemon, timeout, the tree could not tell),
 * the caller falls back to the real filesystem. One connection per question: no descriptor is held between
 * calls, so fork, threads and programs that close "all other fds" need no care. errno is preserved. */
int on_demand_fetch(struct on_demand* o, int kind, const char* path, size_t len, struct canopy_stage_fetch_reply* r,
                    char* text);

#ifdef __cplusplus
}
#endif
