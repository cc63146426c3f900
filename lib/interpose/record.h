/* Record mode: every call goes to the real filesystem, and each lookup under a prefix is appended to a file. */
#pragma once

#include "interpose/paths.h"

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

/* Appends "OP<TAB>RESULT<TAB>PATH" when path (against dirfd) lies under a prefix; RESULT is errno when the
 * call failed, else 0. lib/stage/index.cpp (read_records) reads these lines. errno is preserved. */
void record_lookup(const struct record_state* r, char op, int dirfd, const char* path, int failed);

#ifdef __cplusplus
}
#endif
