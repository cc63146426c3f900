/* The interposer's life cycle, shared by the wrappers and the loader hooks: the mode, each mode's state, and the
 * real functions behind the wrappers. */
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "interpose/record.h"
#include "interpose/serve.h"

/* Only the wrappers and the la_* hooks are exported: nothing else may shadow a symbol of the program. */
#define EXPORT __attribute__((visibility("default")))

enum interpose_mode { MODE_OFF = 0, MODE_SERVE = 1, MODE_RECORD = 2 };

extern struct serve_state serving;    /* MODE_SERVE */
extern struct record_state recording; /* MODE_RECORD */

/* The mode; the first call reads the environment (until that is done, other threads' calls pass through). */
int current_mode(void);

/* This copy was loaded by LD_AUDIT (its own namespace, its own libc): the stats line says so. */
void note_audit_namespace(void);

/* For each wrapped function, the pointer to the real one, and the wrapper's declaration, which exports it. */
#define SYMBOL(ret, name, params)                                                                                  \
    extern ret(*real_##name) params;                                                                               \
    EXPORT ret name params;
#include "interpose/symbols.def"
#undef SYMBOL

/* Resolves *real to the next definition of name unless that was done (by the constructor, normally; a wrapper
 * called earlier, from another library's constructor, resolves its own), then returns current_mode(). */
int enter(void** real, const char* name);

/* The prologue of every wrapper: `int m = ENTER(stat);` */
#define ENTER(name) enter((void**)&real_##name, #name)
