/* Record mode: every call goes to the real filesystem, and each lookup under a prefix is appended to a file. */
#pragma once

#include "interpose/paths.h"
#include "stage/record_format.h"

#ifdef __cplusplus
extern "C" {
#endif

struct record_state {
    char file[PMAX];        /* CANOPY_STAGE_RECORD */
    char prefix_text[PMAX]; /* CANOPY_STAGE_PREFIXES, split in place into `prefixes` */
    struct prefix_list prefixes;
};

/* 0 when there is something to record: a file and at least one absolute prefix. */
int record_start(struct record_state* r, const char* file, const char* prefixes);

/* Appends the line for a lookup of path (against dirfd) when it lies under a prefix (record_format.h); failed:
 * the call returned its error value, and errno tells which. errno is preserved. */
void record_lookup(const struct record_state* r, enum canopy_stage_record_op op, int dirfd, const char* path,
                   int failed);

#ifdef __cplusplus
}
#endif
