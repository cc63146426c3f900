/* The interposer's path logic: absolute spellings, the prefixes, the cache's mirror names, paths changed here. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "stage/index_format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PMAX CANOPY_STAGE_PATH_MAX
#define MAX_PREFIXES 32
#define MAX_DIRTY 64

/* Makes path absolute (against dirfd, or the cwd for AT_FDCWD) and normalized into out (PMAX bytes), as the
 * index spells its keys; *trailing tells whether it ended in "/". Returns the length, or -1. */
long absolute_path(int dirfd, const char* path, char* out, int* trailing);

/* The path descriptor fd was opened by, from /proc/self/fd, into out (PMAX bytes): its length, or -1. */
long fd_path(int fd, char* out);

/* Whether path[0..len) is prefix[0..plen) or lies below it ("/" holds everything; /a/bc is not under /a/b). */
int path_under(const char* path, size_t len, const char* prefix, size_t plen);

/* The directories a mode looks after; the strings belong to whoever added them. */
struct prefix_list {
    const char* path[MAX_PREFIXES];
    size_t len[MAX_PREFIXES];
    int count;
};

/* Adds an absolute prefix; a relative one, or one past MAX_PREFIXES, is left out. */
void prefix_list_add(struct prefix_list* l, const char* path, size_t len);
/* Adds "A:B:..." and drops each one's trailing "/"; text is split in place and must outlive the list. */
void prefix_list_parse(struct prefix_list* l, char* text);
int prefix_list_holds(const struct prefix_list* l, const char* path, size_t len);

/* The node cache and its two mirrors: <cache>/root holds the copies, <cache>/dirs the directory skeletons. */
struct cache_dir {
    char path[PMAX];
    size_t len;
    char root[PMAX];
    size_t root_len;
    char dirs[PMAX];
    size_t dirs_len;
};

/* 0, or -1 when path is not absolute or too long. */
int cache_dir_set(struct cache_dir* c, const char* path);

/* A path in a mirror stands for the original path: <cache>/root/X and <cache>/dirs/X are /X. This is what
 * $ORIGIN and /proc/self/maps names expand to once a file was opened from the cache. Rewrites path[0..len)
 * in place and returns its new length; *aliased tells whether it was a mirror's. */
long cache_dir_unalias(const struct cache_dir* c, char* path, long len, int* aliased);

/* The paths this process changed (and their directories), as hashes; past MAX_DIRTY it counts everything as
 * changed. Adding and reading are safe from any thread. */
struct dirty_set {
    uint64_t hashes[MAX_DIRTY];
    int count;
    int overflow;
};

void dirty_set_add(struct dirty_set* d, const char* path, size_t len);
/* Whether path, or another name in its directory, may have changed. */
int dirty_set_holds(const struct dirty_set* d, const char* path, size_t len);

#ifdef __cplusplus
}
#endif
