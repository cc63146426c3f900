/* Serve mode: lookups under the staged prefixes answered from the node cache's index, or on demand. */
#pragma once

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "interpose/on_demand.h"
#include "interpose/paths.h"
#include "stage/index_format.h"
#include "stage/permission.h"

#ifdef __cplusplus
extern "C" {
#endif

struct serve_state {
    struct canopy_stage_view index;
    struct prefix_list prefixes; /* the index's */
    struct cache_dir cache;
    dev_t cache_dev; /* tells a descriptor opened from the cache */
    struct dirty_set dirty;
    struct on_demand on_demand;
};

/* Maps <cache>/index; 0, or -1 when there is no index to serve from (then nothing is served). socket_path and
 * timeout start on demand (on_demand.h). */
int serve_start(struct serve_state* s, const char* cache, const char* socket_path, const char* timeout);

/* A lookup, decided. */
struct decision {
    int handled;  /* 0: pass the call through unchanged (or with `path` if aliased) */
    int aliased;  /* the caller's path named the cache mirror; `path` holds the original */
    int fetched;  /* answered on demand by the node's canopyd: `reply` holds it, `answer.entry` is NULL */
    int trailing; /* the path ended in "/": it must be a directory */
    struct canopy_stage_answer answer;
    struct canopy_stage_fetch_reply reply;
    char path[PMAX]; /* absolute, normalized, unaliased */
    long len;
};

/* Decides a lookup of path (against dirfd). kind: what to ask the node's canopyd when the index cannot answer
 * (CANOPY_STAGE_FETCH_*); text: where its reply's text goes (PMAX bytes), or NULL when the caller needs none. */
void decide(struct serve_state* s, int dirfd, const char* path, int follow, int kind, char* text,
            struct decision* d);

/* The stat view a FOUND decision stands for, or NULL. */
const struct canopy_stage_stat* decision_stat(const struct serve_state* s, const struct decision* d);

/* The path and dirfd a call that was not answered passes through with: the original path when the caller's
 * named the cache mirror. */
static inline const char* pass_path(const struct decision* d, const char* path)
{
    return d->aliased ? d->path : path;
}
static inline int pass_dirfd(const struct decision* d, int dirfd)
{
    return d->aliased ? AT_FDCWD : dirfd;
}

/* The lookups. Each returns 1 when it answered (the call's result in *rc, errno set on failure), or 0: pass
 * the call through, with pass_path(d) and pass_dirfd(d). */
int serve_stat(struct serve_state* s, int dirfd, const char* path, int follow, struct stat* st, struct statx* sx,
               struct decision* d, int* rc);
/* W_OK always asks the real filesystem (it may be mounted read-only); so does AT_EACCESS. */
int serve_access(struct serve_state* s, int dirfd, const char* path, int amode, int flags, struct decision* d,
                 int* rc);
int serve_readlink(struct serve_state* s, int dirfd, const char* path, char* buf, size_t size, struct decision* d,
                   ssize_t* rc);
/* open(2) and its variants: a write open marks the path changed and passes; a read open may get the cache
 * copy or the directory's skeleton (*fd), or fail with the answer's errno (*fd = -1). */
int serve_open(struct serve_state* s, int dirfd, const char* path, int flags, struct decision* d, int* fd);
/* realpath(3): the canonical path the index or the node's canopyd knows, in resolved or malloc'ed. */
int serve_realpath(struct serve_state* s, const char* path, char* resolved, struct decision* d, char** out);

/* What an open for reading wants; open_lookup fails an open of a non-directory with O_DIRECTORY. */
enum { WANT_FILE = 1, WANT_DIR = 2 };

/* Decides an open for reading. Returns: -1 answered with an error (errno set), 0 pass through, 1 open
 * `target` (PMAX bytes) instead: a cache copy or a directory skeleton. */
int open_lookup(struct serve_state* s, int dirfd, const char* path, int follow, int want, struct decision* d,
                char* target);

static inline int is_write_open(int flags)
{
    return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0 || (flags & O_PATH) == O_PATH;
}

/* This process changed something at path: from now on it looks up that path and its directory's other names
 * on the real filesystem, so it sees its own writes. */
void serve_changed(struct serve_state* s, int dirfd, const char* path);

/* fstat of a descriptor opened from the cache reports the original file, so fstat agrees with stat: patches
 * the real call's result in st or sx. */
void serve_fd_stat(struct serve_state* s, int fd, struct stat* st, struct statx* sx);

void fill_stat(const struct canopy_stage_stat* s, struct stat* st);
void fill_statx(const struct canopy_stage_stat* s, struct statx* sx);

#ifdef __cplusplus
}
#endif
