/* Serve mode: lookups under the staged prefixes answered from the node cache's index, or on demand. */
#include "interpose/serve.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "interpose/counters.h"
#include "interpose/raw_io.h"

int serve_start(struct serve_state* s, const char* cache, const char* socket_path, const char* timeout)
{
    if (cache_dir_set(&s->cache, cache) != 0)
        return -1;
    uint64_t size = 0;
    const void* base = map_file_in(s->cache.path, s->cache.len, "/index", &size);
    if (!base)
        return -1;
    if (canopy_stage_view_open(&s->index, base, size) != 0) {
        syscall(SYS_munmap, base, (size_t)size);
        return -1;
    }
    const struct canopy_stage_view* v = &s->index;
    for (uint32_t i = 0; i < v->header->prefix_count; ++i) {
        const char* p = canopy_stage_string(v, v->prefixes[i].off, v->prefixes[i].len);
        if (p)
            prefix_list_add(&s->prefixes, p, v->prefixes[i].len);
    }
    struct stat cs;
    if (syscall(SYS_stat, s->cache.path, &cs) == 0)
        s->cache_dev = cs.st_dev;
    on_demand_start(&s->on_demand, &s->cache, socket_path, timeout);
    return 0;
}

/* ---------- deciding ---------- */

/* The path a call names, absolute, normalized and unaliased, into out (PMAX bytes): its length, or -1. */
static long original_path(const struct serve_state* s, int dirfd, const char* path, char* out, int* trailing,
                          int* aliased)
{
    *aliased = 0;
    long len = absolute_path(dirfd, path, out, trailing);
    return len < 0 ? len : cache_dir_unalias(&s->cache, out, len, aliased);
}

/* Turns d into an on-demand answer for its path; 0, or -1 when there is none. */
static int decide_on_demand(struct serve_state* s, struct decision* d, int kind, int follow, char* text)
{
    if (on_demand_fetch(&s->on_demand, kind, d->path, (size_t)d->len, &d->reply, text) != 0)
        return -1;
    const struct canopy_stage_path_facts* f = &d->reply.facts;
    int follows = follow || d->trailing;
    int err = follows ? f->stat_errno : f->lstat_errno;
    if (!err && d->trailing && !S_ISDIR(f->stat.mode))
        err = ENOTDIR;
    d->fetched = 1;
    d->handled = 1;
    d->answer.outcome = err ? CANOPY_STAGE_ERROR : CANOPY_STAGE_FOUND;
    d->answer.errno_value = err;
    d->answer.follow = follows;
    d->answer.entry = NULL;
    return 0;
}

void decide(struct serve_state* s, int dirfd, const char* path, int follow, int kind, char* text,
            struct decision* d)
{
    d->handled = 0;
    d->fetched = 0;
    d->trailing = 0;
    d->len = original_path(s, dirfd, path, d->path, &d->trailing, &d->aliased);
    if (d->len < 0)
        return;
    if (!prefix_list_holds(&s->prefixes, d->path, (size_t)d->len)) {
        COUNT(outside);
        return;
    }
    if (dirty_set_holds(&s->dirty, d->path, (size_t)d->len)) {
        COUNT(passed);
        return;
    }
    canopy_stage_lookup(&s->index, d->path, (size_t)d->len, follow, d->trailing, &d->answer);
    if (d->answer.outcome == CANOPY_STAGE_UNKNOWN) {
        if (decide_on_demand(s, d, kind, follow, text) != 0)
            COUNT(passed);
        return;
    }
    d->handled = 1;
}

const struct canopy_stage_stat* decision_stat(const struct serve_state* s, const struct decision* d)
{
    if (!d->fetched)
        return canopy_stage_answer_stat(&s->index, &d->answer);
    if (d->answer.outcome != CANOPY_STAGE_FOUND)
        return NULL;
    return d->answer.follow ? &d->reply.facts.stat : &d->reply.facts.lstat;
}

/* The call fails as the answer says, without touching the filesystem; returns -1 for the caller's result. */
static int fail_as_answered(const struct decision* d)
{
    COUNT(served_errno);
    errno = d->answer.errno_value;
    return -1;
}

/* What settles a handled decision before the call's kind matters, from the index and on demand alike: -1 it
 * fails as answered (errno set), 0 pass through (there is no stat view), 1 go on with *found, its stat view. */
static int settle(const struct serve_state* s, const struct decision* d, const struct canopy_stage_stat** found)
{
    if (d->answer.outcome == CANOPY_STAGE_ERROR)
        return fail_as_answered(d);
    *found = decision_stat(s, d);
    if (!*found) {
        COUNT(passed);
        return 0;
    }
    return 1;
}

/* decide and settle a metadata lookup (stat, access, readlink). */
static int decide_metadata(struct serve_state* s, int dirfd, const char* path, int follow, char* text,
                           struct decision* d, const struct canopy_stage_stat** found)
{
    decide(s, dirfd, path, follow, CANOPY_STAGE_FETCH_METADATA, text, d);
    return d->handled ? settle(s, d, found) : 0;
}

/* ---------- metadata ---------- */

void fill_stat(const struct canopy_stage_stat* s, struct stat* st)
{
    memset(st, 0, sizeof *st);
    st->st_dev = (dev_t)s->dev;
    st->st_ino = (ino_t)s->ino;
    st->st_nlink = (nlink_t)s->nlink;
    st->st_mode = s->mode;
    st->st_uid = s->uid;
    st->st_gid = s->gid;
    st->st_rdev = (dev_t)s->rdev;
    st->st_size = s->size;
    st->st_blksize = s->blksize;
    st->st_blocks = s->blocks;
    st->st_atim.tv_sec = s->atime_sec;
    st->st_atim.tv_nsec = s->atime_nsec;
    st->st_mtim.tv_sec = s->mtime_sec;
    st->st_mtim.tv_nsec = s->mtime_nsec;
    st->st_ctim.tv_sec = s->ctime_sec;
    st->st_ctim.tv_nsec = s->ctime_nsec;
}

void fill_statx(const struct canopy_stage_stat* s, struct statx* sx)
{
    memset(sx, 0, sizeof *sx);
    sx->stx_mask = STATX_BASIC_STATS;
    sx->stx_blksize = (uint32_t)s->blksize;
    sx->stx_nlink = (uint32_t)s->nlink;
    sx->stx_uid = s->uid;
    sx->stx_gid = s->gid;
    sx->stx_mode = (uint16_t)s->mode;
    sx->stx_ino = s->ino;
    sx->stx_size = (uint64_t)s->size;
    sx->stx_blocks = (uint64_t)s->blocks;
    sx->stx_atime.tv_sec = s->atime_sec;
    sx->stx_atime.tv_nsec = (uint32_t)s->atime_nsec;
    sx->stx_mtime.tv_sec = s->mtime_sec;
    sx->stx_mtime.tv_nsec = (uint32_t)s->mtime_nsec;
    sx->stx_ctime.tv_sec = s->ctime_sec;
    sx->stx_ctime.tv_nsec = (uint32_t)s->ctime_nsec;
    sx->stx_rdev_major = major(s->rdev);
    sx->stx_rdev_minor = minor(s->rdev);
    sx->stx_dev_major = major(s->dev);
    sx->stx_dev_minor = minor(s->dev);
}

int serve_stat(struct serve_state* s, int dirfd, const char* path, int follow, struct stat* st, struct statx* sx,
               struct decision* d, int* rc)
{
    const struct canopy_stage_stat* found;
    int settled = decide_metadata(s, dirfd, path, follow, NULL, d, &found);
    if (settled <= 0) {
        *rc = -1; /* read only when the call failed as answered */
        return settled < 0;
    }
    COUNT(served_meta);
    if (st)
        fill_stat(found, st);
    if (sx)
        fill_statx(found, sx);
    *rc = 0;
    return 1;
}

void serve_fd_stat(struct serve_state* s, int fd, struct stat* st, struct statx* sx)
{
    dev_t dev = st ? st->st_dev : makedev(sx->stx_dev_major, sx->stx_dev_minor);
    if (dev != s->cache_dev)
        return;
    char path[PMAX];
    long n = fd_path(fd, path);
    if (n < 0)
        return;
    int aliased;
    n = cache_dir_unalias(&s->cache, path, n, &aliased);
    if (!aliased)
        return;
    const struct canopy_stage_entry* e = canopy_stage_find(&s->index, path, (size_t)n);
    const struct canopy_stage_stat* found =
        e && e->stat_errno == 0 ? canopy_stage_stat_at(&s->index, e->stat_stat) : NULL;
    struct canopy_stage_fetch_reply r;
    if (!found && !e && on_demand_fetch(&s->on_demand, CANOPY_STAGE_FETCH_METADATA, path, (size_t)n, &r, NULL) == 0 &&
        r.facts.stat_errno == 0)
        found = &r.facts.stat; /* fetched on demand: the node's canopyd has it cached since the open */
    if (!found)
        return;
    if (st)
        fill_stat(found, st);
    if (sx)
        fill_statx(found, sx);
}

int serve_access(struct serve_state* s, int dirfd, const char* path, int amode, int flags, struct decision* d,
                 int* rc)
{
    if (amode & W_OK) {
        d->aliased = 0;
        return 0;
    }
    const struct canopy_stage_stat* found;
    int settled = decide_metadata(s, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), NULL, d, &found);
    if (settled <= 0) {
        *rc = -1; /* read only when the call failed as answered */
        return settled < 0;
    }
    if (flags & AT_EACCESS) {
        COUNT(passed);
        return 0;
    }
    COUNT(served_meta);
    gid_t groups[64];
    struct canopy_stage_caller who = {getuid(), getgid(), groups, 0};
    if (amode != F_OK)
        who.group_count = getgroups(64, groups);
    if (canopy_stage_permitted(found, amode, &who)) {
        *rc = 0;
    } else {
        errno = EACCES;
        *rc = -1;
    }
    return 1;
}

int serve_readlink(struct serve_state* s, int dirfd, const char* path, char* buf, size_t size, struct decision* d,
                   ssize_t* rc)
{
    char text[PMAX];
    const struct canopy_stage_stat* found;
    int settled = decide_metadata(s, dirfd, path, 0, text, d, &found);
    if (settled <= 0) {
        *rc = -1; /* read only when the call failed as answered */
        return settled < 0;
    }
    COUNT(served_meta);
    if (!S_ISLNK(found->mode)) {
        errno = EINVAL;
        *rc = -1;
        return 1;
    }
    const struct canopy_stage_entry* e = d->answer.entry;
    const char* target = d->fetched ? text : canopy_stage_string(&s->index, e->link_off, e->link_len);
    size_t link_len = d->fetched ? d->reply.text_len : (e ? e->link_len : 0);
    if (!target) {
        errno = EIO;
        *rc = -1;
        return 1;
    }
    size_t n = link_len < size ? link_len : size;
    memcpy(buf, target, n);
    *rc = (ssize_t)n;
    return 1;
}

/* ---------- opens ---------- */

/* <alias><mirror> into out, the mirror from the index entry; 0 or -1. */
static int index_target(const struct serve_state* s, const struct canopy_stage_entry* e, const char* alias,
                        size_t alias_len, char* out)
{
    const char* mirror = canopy_stage_string(&s->index, e->mirror_off, e->mirror_len);
    if (!mirror || alias_len + e->mirror_len + 1 > PMAX)
        return -1;
    memcpy(out, alias, alias_len);
    memcpy(out + alias_len, mirror, (size_t)e->mirror_len + 1);
    return 0;
}

/* The mirror path in target (from the reply's text) becomes <alias><mirror>; 0 or -1. */
static int fetched_target(const char* alias, size_t alias_len, size_t mirror_len, char* target)
{
    if (mirror_len == 0 || target[0] != '/' || alias_len + mirror_len + 1 > PMAX)
        return -1;
    memmove(target + alias_len, target, mirror_len + 1);
    memcpy(target, alias, alias_len);
    return 0;
}

/* settle for an open: what is opened cannot be a symlink. */
static int open_prelude(const struct serve_state* s, const struct decision* d, const struct canopy_stage_stat** found)
{
    int settled = settle(s, d, found);
    if (settled <= 0)
        return settled;
    if (S_ISLNK((*found)->mode)) { /* O_NOFOLLOW on a symlink */
        COUNT(served_errno);
        errno = ELOOP;
        return -1;
    }
    return 1;
}

/* An open answered on demand: the copy or the skeleton the node's canopyd made, or an error. */
static int open_fetched(const struct serve_state* s, int want, const struct decision* d, char* target)
{
    const struct canopy_stage_stat* found;
    int settled = open_prelude(s, d, &found);
    if (settled <= 0)
        return settled;
    const struct canopy_stage_fetch_reply* r = &d->reply;
    if (r->facts.open_errno && (S_ISDIR(found->mode) || S_ISREG(found->mode))) {
        COUNT(served_errno);
        errno = r->facts.open_errno;
        return -1;
    }
    if (S_ISDIR(found->mode)) {
        if ((r->facts.flags & CANOPY_STAGE_LISTED) &&
            fetched_target(s->cache.dirs, s->cache.dirs_len, r->text_len, target) == 0) {
            COUNT(served_dir);
            return 1;
        }
        COUNT(passed);
        return 0;
    }
    if (want == WANT_DIR) {
        COUNT(served_errno);
        errno = ENOTDIR;
        return -1;
    }
    if (S_ISREG(found->mode) && (r->facts.flags & CANOPY_STAGE_CONTENT) &&
        fetched_target(s->cache.root, s->cache.root_len, r->text_len, target) == 0) {
        COUNT(served_open);
        return 1;
    }
    COUNT(passed);
    return 0;
}

int open_lookup(struct serve_state* s, int dirfd, const char* path, int follow, int want, struct decision* d,
                char* target)
{
    decide(s, dirfd, path, follow, CANOPY_STAGE_FETCH_OPEN, target, d);
    if (!d->handled)
        return 0;
    if (d->fetched)
        return open_fetched(s, want, d, target);
    const struct canopy_stage_stat* found;
    int settled = open_prelude(s, d, &found);
    if (settled <= 0)
        return settled;
    const struct canopy_stage_entry* e = d->answer.entry;
    if (S_ISDIR(found->mode)) {
        if ((e->flags & CANOPY_STAGE_LISTED) && index_target(s, e, s->cache.dirs, s->cache.dirs_len, target) == 0) {
            COUNT(served_dir);
            return 1;
        }
    } else if (want == WANT_DIR) {
        COUNT(served_errno);
        errno = ENOTDIR;
        return -1;
    } else if (S_ISREG(found->mode) && (e->flags & CANOPY_STAGE_CONTENT) &&
               index_target(s, e, s->cache.root, s->cache.root_len, target) == 0) {
        COUNT(served_open);
        return 1;
    }
    /* The index knows the path but holds no copy or listing (a manifest that only saw a stat): on demand. */
    if ((S_ISDIR(found->mode) || S_ISREG(found->mode)) &&
        decide_on_demand(s, d, CANOPY_STAGE_FETCH_OPEN, follow, target) == 0)
        return open_fetched(s, want, d, target);
    COUNT(passed);
    return 0;
}

int serve_open(struct serve_state* s, int dirfd, const char* path, int flags, struct decision* d, int* fd)
{
    if (is_write_open(flags)) {
        d->aliased = 0;
        if (!(flags & O_PATH))
            serve_changed(s, dirfd, path);
        return 0;
    }
    char target[PMAX];
    int r = open_lookup(s, dirfd, path, !(flags & O_NOFOLLOW), (flags & O_DIRECTORY) ? WANT_DIR : WANT_FILE, d,
                        target);
    if (r < 0) {
        *fd = -1;
        return 1;
    }
    if (r > 0) {
        *fd = (int)syscall(SYS_openat, AT_FDCWD, target, flags & ~O_NOFOLLOW, 0);
        if (*fd >= 0)
            return 1;
        /* not there (yet): the real file is still right */
    }
    return 0;
}

/* realpath's answer: canonical[0..len] copied into resolved, or into PATH_MAX bytes of malloc. */
static int realpath_answer(const char* canonical, size_t len, char* resolved, char** out)
{
    *out = resolved ? resolved : malloc(PATH_MAX);
    if (!*out) {
        errno = ENOMEM;
        return 1;
    }
    COUNT(served_meta);
    memcpy(*out, canonical, len + 1);
    return 1;
}

/* The walk through the index ends on the canonical entry, whose key is the answer; on demand, the canonical path
 * of a file or directory is the mirror its open brought. */
int serve_realpath(struct serve_state* s, const char* path, char* resolved, struct decision* d, char** out)
{
    char text[PMAX];
    decide(s, AT_FDCWD, path, 1, CANOPY_STAGE_FETCH_OPEN, text, d);
    if (!d->handled)
        return 0;
    *out = NULL;
    if (d->fetched) {
        if (d->answer.outcome == CANOPY_STAGE_ERROR) {
            fail_as_answered(d);
            return 1;
        }
        if ((d->reply.facts.flags & (CANOPY_STAGE_CONTENT | CANOPY_STAGE_LISTED)) && text[0] == '/' &&
            d->reply.text_len < PATH_MAX)
            return realpath_answer(text, d->reply.text_len, resolved, out);
        COUNT(passed);
        return 0;
    }
    struct canopy_stage_answer a;
    canopy_stage_resolve(&s->index, d->path, 1, 0, &a);
    if (a.outcome == CANOPY_STAGE_ERROR) {
        COUNT(served_errno);
        errno = a.errno_value;
        return 1;
    }
    const char* key =
        a.outcome == CANOPY_STAGE_FOUND ? canopy_stage_string(&s->index, a.entry->path_off, a.entry->path_len) : NULL;
    if (key && a.entry->path_len < PATH_MAX)
        return realpath_answer(key, a.entry->path_len, resolved, out);
    COUNT(passed);
    return 0;
}

/* ---------- changes ---------- */

void serve_changed(struct serve_state* s, int dirfd, const char* path)
{
    char buf[PMAX];
    int trailing, aliased;
    long len = original_path(s, dirfd, path, buf, &trailing, &aliased);
    if (len < 0 || !prefix_list_holds(&s->prefixes, buf, (size_t)len))
        return;
    COUNT(writes);
    dirty_set_add(&s->dirty, buf, (size_t)len);
}
