/* The stage index blob: its binary layout, and lookups over it that allocate nothing (C, shared with the interposer). */
#pragma once

/*
 * One flat, position-independent blob: every reference is an offset from the blob's start, so it can be
 * written to a file, sent down the tree, and mmapped read-only by every rank with no parsing. Native byte
 * order (x86_64/aarch64 are little-endian); `endian` detects a blob from a machine of the other order.
 *
 *   header | buckets (u32[bucket_count]) | entries | stat records | dirents | prefixes | strings
 *
 * Keys are absolute paths, as the program spelled them, after canopy_stage_normalize ("//" and "/./"
 * collapsed, a trailing "/" dropped; ".." kept, because "a/link/.." is not "a" when link is a symlink).
 * Every entry holds two views: lstat (the path itself) and stat (symlinks followed). Strings are
 * NUL-terminated so the interposer can hand them to the kernel directly.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CANOPY_STAGE_MAGIC "CNPYSTG\n"
#define CANOPY_STAGE_VERSION 1u
#define CANOPY_STAGE_ENDIAN 0x01020304u
#define CANOPY_STAGE_NONE 0xffffffffu
/* Longest path the interposer handles; longer ones pass through to the real filesystem. */
#define CANOPY_STAGE_PATH_MAX 4096
/* Symlinks followed in one lookup before ELOOP, as Linux. */
#define CANOPY_STAGE_MAX_LINKS 40

enum canopy_stage_flags {
    CANOPY_STAGE_REQUESTED = 1u, /* the program looked this path up (not only an ancestor or a link target) */
    CANOPY_STAGE_READ = 2u,      /* the program read its content (recording), or the builder was asked to stage it */
    CANOPY_STAGE_CONTENT = 4u,   /* a copy of the content is in the node cache at <cache>/root<mirror> */
    CANOPY_STAGE_LISTED = 8u,    /* followed view is a directory whose complete listing is in the index */
};

struct canopy_stage_header {
    char magic[8];
    uint32_t version;
    uint32_t endian;
    uint64_t total_size;
    uint64_t checksum; /* FNV-1a 64 of bytes [header_size, total_size) */
    int64_t built_sec; /* when the root built it (wall clock) */
    uint32_t header_size;
    uint32_t entry_count;
    uint32_t bucket_count; /* a power of two; bucket = entry index + 1, 0 = empty */
    uint32_t stat_count;
    uint32_t dirent_count;
    uint32_t prefix_count;
    uint64_t buckets_off;
    uint64_t entries_off;
    uint64_t stats_off;
    uint64_t dirents_off;
    uint64_t prefixes_off;
    uint64_t strings_off;
    uint64_t strings_size;
};

/* The struct stat fields the interposer reports. */
struct canopy_stage_stat {
    uint64_t dev;
    uint64_t ino;
    uint64_t nlink;
    uint64_t rdev;
    uint32_t mode;
    uint32_t uid;
    uint32_t gid;
    uint32_t pad;
    int64_t size;
    int64_t blksize;
    int64_t blocks;
    int64_t atime_sec;
    int64_t atime_nsec;
    int64_t mtime_sec;
    int64_t mtime_nsec;
    int64_t ctime_sec;
    int64_t ctime_nsec;
};

struct canopy_stage_entry {
    uint64_t hash;
    uint32_t path_off; /* into strings */
    uint32_t path_len;
    int32_t lstat_errno; /* 0: lstat_stat is valid; else what lstat fails with (ENOENT, ENOTDIR, EACCES, ...) */
    uint32_t lstat_stat;
    int32_t stat_errno; /* the followed view; equals the lstat view unless the path is a symlink */
    uint32_t stat_stat;
    uint32_t link_off; /* symlink target (lstat view is a symlink), else NONE */
    uint32_t link_len;
    uint32_t dirents_first; /* LISTED: the sorted listing of the followed directory */
    uint32_t dirents_count;
    uint32_t mirror_off; /* canonical path of the followed object: the copy is <cache>/root<mirror>, */
    uint32_t mirror_len; /* a listed directory's skeleton is <cache>/dirs<mirror>; NONE if neither */
    uint32_t flags;
    uint32_t pad;
};

/* One name in a directory listing; a listing is sorted by name (bytewise) for binary search. */
struct canopy_stage_dirent {
    uint64_t ino;
    uint32_t name_off;
    uint32_t name_len;
    uint32_t link_off; /* DT_LNK: the symlink's target, so the node cache can recreate it; else NONE */
    uint32_t link_len;
    uint8_t type;      /* DT_* */
    uint8_t pad[7];
};

struct canopy_stage_string_ref {
    uint32_t off;
    uint32_t len;
};

/* A checked view over a blob; filled by canopy_stage_view_open, then used read-only from any thread. */
struct canopy_stage_view {
    const unsigned char* base;
    uint64_t size;
    const struct canopy_stage_header* header;
    const uint32_t* buckets;
    const struct canopy_stage_entry* entries;
    const struct canopy_stage_stat* stats;
    const struct canopy_stage_dirent* dirents;
    const struct canopy_stage_string_ref* prefixes;
    const char* strings;
    uint64_t strings_size;
};

static inline uint64_t canopy_stage_hash(const char* s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static inline int canopy_stage_section_ok(uint64_t off, uint64_t count, uint64_t item, uint64_t size)
{
    return off <= size && count <= (size - off) / (item ? item : 1) && off % 8 == 0;
}

/* Checks the header and section bounds (not the checksum: that costs a pass over the blob; the root and
 * the node cache verify it once, the ranks trust the file they were told to map). Returns 0 or -1. */
static inline int canopy_stage_view_open(struct canopy_stage_view* v, const void* base, uint64_t size)
{
    const struct canopy_stage_header* h = (const struct canopy_stage_header*)base;
    memset(v, 0, sizeof *v);
    if (size < sizeof *h || memcmp(h->magic, CANOPY_STAGE_MAGIC, 8) != 0 || h->version != CANOPY_STAGE_VERSION ||
        h->endian != CANOPY_STAGE_ENDIAN || h->total_size != size || h->header_size < sizeof *h ||
        h->header_size > size)
        return -1;
    if (h->bucket_count == 0 || (h->bucket_count & (h->bucket_count - 1)) != 0 ||
        h->bucket_count < h->entry_count)
        return -1;
    if (!canopy_stage_section_ok(h->buckets_off, h->bucket_count, 4, size) ||
        !canopy_stage_section_ok(h->entries_off, h->entry_count, sizeof(struct canopy_stage_entry), size) ||
        !canopy_stage_section_ok(h->stats_off, h->stat_count, sizeof(struct canopy_stage_stat), size) ||
        !canopy_stage_section_ok(h->dirents_off, h->dirent_count, sizeof(struct canopy_stage_dirent), size) ||
        !canopy_stage_section_ok(h->prefixes_off, h->prefix_count, sizeof(struct canopy_stage_string_ref), size) ||
        h->strings_off > size || h->strings_size > size - h->strings_off)
        return -1;
    v->base = (const unsigned char*)base;
    v->size = size;
    v->header = h;
    v->buckets = (const uint32_t*)(v->base + h->buckets_off);
    v->entries = (const struct canopy_stage_entry*)(v->base + h->entries_off);
    v->stats = (const struct canopy_stage_stat*)(v->base + h->stats_off);
    v->dirents = (const struct canopy_stage_dirent*)(v->base + h->dirents_off);
    v->prefixes = (const struct canopy_stage_string_ref*)(v->base + h->prefixes_off);
    v->strings = (const char*)(v->base + h->strings_off);
    v->strings_size = h->strings_size;
    return 0;
}

/* A NUL-terminated string of the blob, or NULL when the reference is out of bounds. */
static inline const char* canopy_stage_string(const struct canopy_stage_view* v, uint32_t off, uint32_t len)
{
    if (off == CANOPY_STAGE_NONE || (uint64_t)off + len >= v->strings_size || v->strings[off + len] != '\0')
        return NULL;
    return v->strings + off;
}

static inline const struct canopy_stage_stat* canopy_stage_stat_at(const struct canopy_stage_view* v, uint32_t i)
{
    return i < v->header->stat_count ? &v->stats[i] : NULL;
}

/* Normalizes an absolute path into out (size >= CANOPY_STAGE_PATH_MAX; may be the same buffer as in):
 * collapses "//" and "/./", drops a trailing "/" or "/.". Returns the length, or -1 if the path is not absolute or too long. *trailing_slash
 * tells whether the input ended in "/" (the kernel then requires a directory). */
static inline long canopy_stage_normalize(const char* in, char* out, int* trailing_slash)
{
    size_t n = 0;
    *trailing_slash = 0;
    if (in[0] != '/')
        return -1;
    const char* p = in;
    while (*p) {
        while (*p == '/')
            ++p;
        if (!*p) {
            *trailing_slash = 1;
            break;
        }
        const char* start = p;
        while (*p && *p != '/')
            ++p;
        size_t len = (size_t)(p - start);
        if (len == 1 && start[0] == '.') {
            if (!*p)
                *trailing_slash = 1;
            continue;
        }
        if (n + 1 + len + 1 > CANOPY_STAGE_PATH_MAX)
            return -1;
        out[n++] = '/';
        memmove(out + n, start, len); /* out may be in: the output never overtakes the input */
        n += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    if (n == 1)
        *trailing_slash = 0;
    return (long)n;
}

/* The entry whose key is exactly path[0..len), or NULL. */
static inline const struct canopy_stage_entry* canopy_stage_find(const struct canopy_stage_view* v, const char* path,
                                                                 size_t len)
{
    if (!v->header)
        return NULL;
    uint64_t h = canopy_stage_hash(path, len);
    uint32_t mask = v->header->bucket_count - 1;
    for (uint32_t i = (uint32_t)h & mask, probes = 0; probes <= mask; i = (i + 1) & mask, ++probes) {
        uint32_t b = v->buckets[i];
        if (b == 0 || b > v->header->entry_count)
            return NULL;
        const struct canopy_stage_entry* e = &v->entries[b - 1];
        if (e->hash == h && e->path_len == len) {
            const char* key = canopy_stage_string(v, e->path_off, e->path_len);
            if (key && memcmp(key, path, len) == 0)
                return e;
        }
    }
    return NULL;
}

/* Whether the listed directory of e holds name[0..len). */
static inline int canopy_stage_listing_has(const struct canopy_stage_view* v, const struct canopy_stage_entry* e,
                                           const char* name, size_t len)
{
    if (!(e->flags & CANOPY_STAGE_LISTED) || (uint64_t)e->dirents_first + e->dirents_count > v->header->dirent_count)
        return 1; /* unknown: say yes so nobody infers a miss */
    uint32_t lo = e->dirents_first, hi = e->dirents_first + e->dirents_count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const struct canopy_stage_dirent* d = &v->dirents[mid];
        const char* s = canopy_stage_string(v, d->name_off, d->name_len);
        if (!s)
            return 1;
        size_t m = d->name_len < len ? d->name_len : len;
        int c = memcmp(s, name, m);
        if (c == 0)
            c = d->name_len < len ? -1 : (d->name_len > len ? 1 : 0);
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* What a lookup concluded. */
enum canopy_stage_outcome {
    CANOPY_STAGE_UNKNOWN = 0, /* the index cannot answer: ask the real filesystem */
    CANOPY_STAGE_FOUND = 1,   /* entry answers; use its stat view if following, else its lstat view */
    CANOPY_STAGE_ERROR = 2,   /* the lookup fails with errno_value, known without touching the filesystem */
};

struct canopy_stage_answer {
    int outcome;
    int errno_value;
    int follow; /* which view of entry applies: 1 stat, 0 lstat */
    const struct canopy_stage_entry* entry;
};

static inline int canopy_stage_entry_is_dir(const struct canopy_stage_view* v, const struct canopy_stage_entry* e)
{
    const struct canopy_stage_stat* s = e->stat_errno == 0 ? canopy_stage_stat_at(v, e->stat_stat) : NULL;
    return s && S_ISDIR(s->mode);
}

/* Walks path (normalized, absolute) component by component through the index, as the kernel would through
 * the filesystem: follows symlinks, applies "..", and infers ENOENT from a complete parent listing. Used when
 * the literal key is absent (another spelling of a path the index knows, e.g. $ORIGIN/../lib) or ends in
 * "/". Needs 2 * CANOPY_STAGE_PATH_MAX bytes of stack. */
static inline void canopy_stage_resolve(const struct canopy_stage_view* v, const char* path, int follow,
                                        int must_be_dir, struct canopy_stage_answer* out)
{
    char done[CANOPY_STAGE_PATH_MAX];
    char rest[CANOPY_STAGE_PATH_MAX];
    size_t dlen = 0, rlen = strlen(path), rpos = 0;
    int links = 0;
    const struct canopy_stage_entry* cur = canopy_stage_find(v, "/", 1);
    const struct canopy_stage_entry* last = cur;
    out->outcome = CANOPY_STAGE_UNKNOWN;
    out->errno_value = 0;
    out->follow = follow;
    out->entry = NULL;
    if (rlen >= sizeof rest)
        return;
    memcpy(rest, path, rlen + 1);
    done[0] = '\0';
    for (;;) {
        while (rpos < rlen && rest[rpos] == '/')
            ++rpos;
        if (rpos >= rlen)
            break;
        size_t start = rpos;
        while (rpos < rlen && rest[rpos] != '/')
            ++rpos;
        size_t len = rpos - start;
        size_t after = rpos;
        while (after < rlen && rest[after] == '/')
            ++after;
        int more = after < rlen;
        if (len == 1 && rest[start] == '.')
            continue;
        if (len == 2 && rest[start] == '.' && rest[start + 1] == '.') {
            while (dlen > 0 && done[dlen - 1] != '/')
                --dlen;
            if (dlen > 0)
                --dlen;
            done[dlen] = '\0';
            cur = canopy_stage_find(v, dlen ? done : "/", dlen ? dlen : 1);
            last = cur;
            if (!cur)
                return;
            continue;
        }
        if (dlen + 1 + len >= sizeof done)
            return;
        done[dlen] = '/';
        memcpy(done + dlen + 1, rest + start, len);
        done[dlen + 1 + len] = '\0';
        const struct canopy_stage_entry* e = canopy_stage_find(v, done, dlen + 1 + len);
        if (!e) {
            if (cur && canopy_stage_entry_is_dir(v, cur) && !canopy_stage_listing_has(v, cur, rest + start, len)) {
                out->outcome = CANOPY_STAGE_ERROR;
                out->errno_value = ENOENT;
            }
            return;
        }
        if (e->lstat_errno != 0) {
            out->outcome = CANOPY_STAGE_ERROR;
            out->errno_value = e->lstat_errno;
            return;
        }
        const struct canopy_stage_stat* ls = canopy_stage_stat_at(v, e->lstat_stat);
        if (!ls)
            return;
        if (S_ISLNK(ls->mode) && (more || follow || must_be_dir)) {
            const char* target = canopy_stage_string(v, e->link_off, e->link_len);
            if (!target)
                return;
            if (++links > CANOPY_STAGE_MAX_LINKS) {
                out->outcome = CANOPY_STAGE_ERROR;
                out->errno_value = ELOOP;
                return;
            }
            /* rest := target + "/" + what is left after this component */
            size_t tail = rlen - rpos;
            if ((size_t)e->link_len + 1 + tail >= sizeof rest)
                return;
            memmove(rest + e->link_len + 1, rest + rpos, tail + 1);
            memcpy(rest, target, e->link_len);
            rest[e->link_len] = '/';
            rlen = e->link_len + 1 + tail;
            rpos = 0;
            done[dlen] = '\0';
            if (target[0] == '/') {
                dlen = 0;
                done[0] = '\0';
                cur = canopy_stage_find(v, "/", 1);
            }
            continue;
        }
        if (more && !S_ISDIR(ls->mode)) {
            out->outcome = CANOPY_STAGE_ERROR;
            out->errno_value = ENOTDIR;
            return;
        }
        dlen += 1 + len;
        cur = e;
        last = e;
    }
    if (!last)
        return;
    if (must_be_dir && !canopy_stage_entry_is_dir(v, last)) {
        out->outcome = CANOPY_STAGE_ERROR;
        out->errno_value = ENOTDIR;
        return;
    }
    out->outcome = CANOPY_STAGE_FOUND;
    out->entry = last;
    /* Symlinks on the way were followed by the walk, so the final entry's own (lstat) view is the answer
     * unless it is a symlink we were told not to follow: either way its lstat view. */
    out->follow = 0;
}

/* Answers a lookup of an absolute, normalized path: the literal key first (one hash probe), else a walk. */
static inline void canopy_stage_lookup(const struct canopy_stage_view* v, const char* path, size_t len, int follow,
                                       int trailing_slash, struct canopy_stage_answer* out)
{
    if (!trailing_slash) {
        const struct canopy_stage_entry* e = canopy_stage_find(v, path, len);
        if (e) {
            int err = follow ? e->stat_errno : e->lstat_errno;
            out->entry = e;
            out->follow = follow;
            out->outcome = err ? CANOPY_STAGE_ERROR : CANOPY_STAGE_FOUND;
            out->errno_value = err;
            return;
        }
    }
    canopy_stage_resolve(v, path, follow, trailing_slash, out);
}

/* The stat record an answer refers to (FOUND only). */
static inline const struct canopy_stage_stat* canopy_stage_answer_stat(const struct canopy_stage_view* v,
                                                                       const struct canopy_stage_answer* a)
{
    if (a->outcome != CANOPY_STAGE_FOUND || !a->entry)
        return NULL;
    return canopy_stage_stat_at(v, a->follow ? a->entry->stat_stat : a->entry->lstat_stat);
}

#ifdef __cplusplus
}
#endif
