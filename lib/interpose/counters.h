/* The interposer's counters: what it answered and how, for tests and the CANOPY_STAGE_STATS line. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* Each counter once, in the order of the stats line. */
#define INTERPOSE_COUNTERS(X)                                                                                      \
    X(served_meta)     /* stat, access, readlink, realpath answered from the index or on demand */                 \
    X(served_errno)    /* a call failed with the answer's errno, no filesystem touched */                          \
    X(served_open)     /* a file opened from its cache copy */                                                     \
    X(served_dir)      /* a directory opened from its skeleton */                                                  \
    X(passed)          /* under a prefix, but the real filesystem answered */                                      \
    X(outside)         /* not under any prefix */                                                                  \
    X(writes)          /* changes under a prefix: later lookups there go to the real filesystem */                 \
    X(loader_redirect) /* the loader's probe led to the cache copy */                                              \
    X(loader_fail)     /* the loader's probe answered "not there" */                                               \
    X(loader_pass)     /* the loader's probe went to the real filesystem */                                        \
    X(loader_named)    /* a bare library name answered from the cache before the loader searched for it */         \
    X(fetched)         /* answered on demand by the node's canopyd */                                              \
    X(fetch_failed)    /* the node's canopyd gave no answer */                                                     \
    X(fetch_wait_us)   /* microseconds spent waiting for the node's canopyd: the first job's price per process */  \
    X(board_hits)      /* answered on demand from the node's answer board, without asking */                     \
    X(listing_misses)  /* a name its directory's listing on the board lacks: missing, without asking */

struct interpose_counters {
#define COUNTER_FIELD(name) unsigned long name;
    INTERPOSE_COUNTERS(COUNTER_FIELD)
#undef COUNTER_FIELD
};

extern struct interpose_counters counters;

#define COUNT(name) __atomic_fetch_add(&counters.name, 1, __ATOMIC_RELAXED)
#define COUNT_ADD(name, amount) __atomic_fetch_add(&counters.name, (amount), __ATOMIC_RELAXED)

/* Writes " name=value" for every counter at p; returns the end. */
char* put_counters(char* p);

#ifdef __cplusplus
}
#endif
