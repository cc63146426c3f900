/* canopy's interposer: LD_PRELOAD libc wrappers and an LD_AUDIT loader hook that answer lookups under the
 * staged prefixes from the node cache, or record them (see docs/staging.md). */
#define _GNU_SOURCE
/* We define stat and stat64, open and open64, ... as separate symbols: no redirection of one to the other. */
#undef _FILE_OFFSET_BITS
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "stage/board_format.h"
#include "stage/fetch_protocol.h"
#include "stage/index_format.h"

#define EXPORT __attribute__((visibility("default")))
#define PMAX CANOPY_STAGE_PATH_MAX
#define MAX_PREFIXES 32
#define MAX_DIRTY 64

/* Environment:
 *   CANOPY_STAGE_CACHE=DIR      serve from the node cache DIR (DIR/index, DIR/root, DIR/dirs)
 *   CANOPY_STAGE_RECORD=FILE    record mode: pass everything through, append lookups under the prefixes
 *   CANOPY_STAGE_PREFIXES=A:B   the prefixes to record (serving takes them from the index)
 *   CANOPY_STAGE_SOCKET=PATH    on demand: ask the node's canopyd about paths under a prefix the index lacks
 *   CANOPY_STAGE_FETCH_TIMEOUT=S   how long one such question may take before the real filesystem answers (120)
 *   CANOPY_STAGE_STATS=FILE     append one line of counters at exit
 *   CANOPY_STAGE_DISABLE=1      pass everything through */

enum { MODE_OFF = 0, MODE_SERVE = 1, MODE_RECORD = 2 };
enum { STATE_NEW = 0, STATE_INIT = 1, STATE_READY = 2 };

static struct {
    int state;
    int mode;
    int audit; /* this copy was loaded by LD_AUDIT (its own namespace, its own libc) */
    struct canopy_stage_view view;
    char cache[PMAX];
    size_t cache_len;
    char root_alias[PMAX]; /* <cache>/root */
    size_t root_alias_len;
    char dirs_alias[PMAX]; /* <cache>/dirs */
    size_t dirs_alias_len;
    dev_t cache_dev;
    char socket_path[sizeof(((struct sockaddr_un*)0)->sun_path)]; /* on demand; empty: off */
    struct canopy_stage_board_view board; /* answers the daemon already gave this node; base NULL: none */
    long fetch_timeout;
    int fetch_dead; /* the daemon did not answer once (gone, or hung): ask no more, use the real filesystem */
    char record[PMAX];
    char stats[PMAX];
    char prefix_text[PMAX];
    const char* prefixes[MAX_PREFIXES];
    size_t prefix_lens[MAX_PREFIXES];
    int prefix_count;
    uint64_t dirty[MAX_DIRTY];
    int dirty_count;
    int dirty_overflow;
} g;

/* Counters for tests and the stats dump. */
static struct {
    unsigned long served_meta, served_errno, served_open, served_dir, passed, outside, writes;
    unsigned long loader_redirect, loader_fail, loader_pass;
    unsigned long fetched, fetch_failed, board_hits;
} stats;
#define COUNT(field) __atomic_fetch_add(&stats.field, 1, __ATOMIC_RELAXED)

/* ---------- real functions ---------- */

#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__)
DECLARE_REAL(int, open, const char*, int, ...);
DECLARE_REAL(int, open64, const char*, int, ...);
DECLARE_REAL(int, openat, int, const char*, int, ...);
DECLARE_REAL(int, openat64, int, const char*, int, ...);
DECLARE_REAL(int, __open_2, const char*, int);
DECLARE_REAL(int, __open64_2, const char*, int);
DECLARE_REAL(int, __openat_2, int, const char*, int);
DECLARE_REAL(int, __openat64_2, int, const char*, int);
DECLARE_REAL(FILE*, fopen, const char*, const char*);
DECLARE_REAL(FILE*, fopen64, const char*, const char*);
DECLARE_REAL(int, stat, const char*, struct stat*);
DECLARE_REAL(int, stat64, const char*, struct stat64*);
DECLARE_REAL(int, lstat, const char*, struct stat*);
DECLARE_REAL(int, lstat64, const char*, struct stat64*);
DECLARE_REAL(int, fstatat, int, const char*, struct stat*, int);
DECLARE_REAL(int, fstatat64, int, const char*, struct stat64*, int);
DECLARE_REAL(int, fstat, int, struct stat*);
DECLARE_REAL(int, fstat64, int, struct stat64*);
DECLARE_REAL(int, statx, int, const char*, int, unsigned, struct statx*);
DECLARE_REAL(int, __xstat, int, const char*, struct stat*);
DECLARE_REAL(int, __xstat64, int, const char*, struct stat64*);
DECLARE_REAL(int, __lxstat, int, const char*, struct stat*);
DECLARE_REAL(int, __lxstat64, int, const char*, struct stat64*);
DECLARE_REAL(int, __fxstat, int, int, struct stat*);
DECLARE_REAL(int, __fxstat64, int, int, struct stat64*);
DECLARE_REAL(int, __fxstatat, int, int, const char*, struct stat*, int);
DECLARE_REAL(int, __fxstatat64, int, int, const char*, struct stat64*, int);
DECLARE_REAL(int, access, const char*, int);
DECLARE_REAL(int, faccessat, int, const char*, int, int);
DECLARE_REAL(ssize_t, readlink, const char*, char*, size_t);
DECLARE_REAL(ssize_t, readlinkat, int, const char*, char*, size_t);
DECLARE_REAL(DIR*, opendir, const char*);
DECLARE_REAL(char*, realpath, const char*, char*);
DECLARE_REAL(int, mkdir, const char*, mode_t);
DECLARE_REAL(int, mkdirat, int, const char*, mode_t);
DECLARE_REAL(int, unlink, const char*);
DECLARE_REAL(int, unlinkat, int, const char*, int);
DECLARE_REAL(int, rmdir, const char*);
DECLARE_REAL(int, rename, const char*, const char*);
DECLARE_REAL(int, renameat, int, const char*, int, const char*);
DECLARE_REAL(int, renameat2, int, const char*, int, const char*, unsigned);

static void* next_symbol(const char* name)
{
    return dlsym(RTLD_NEXT, name);
}

/* Resolved once in the constructor; a wrapper called earlier (another library's constructor) resolves its own. */
#define ENSURE(name)                                                                                               \
    do {                                                                                                           \
        if (__builtin_expect(!real_##name, 0))                                                                     \
            __atomic_store_n((void**)&real_##name, next_symbol(#name), __ATOMIC_RELEASE);                          \
    } while (0)

static void resolve_all(void)
{
    ENSURE(open); ENSURE(open64); ENSURE(openat); ENSURE(openat64);
    ENSURE(__open_2); ENSURE(__open64_2); ENSURE(__openat_2); ENSURE(__openat64_2);
    ENSURE(fopen); ENSURE(fopen64);
    ENSURE(stat); ENSURE(stat64); ENSURE(lstat); ENSURE(lstat64); ENSURE(fstatat); ENSURE(fstatat64);
    ENSURE(fstat); ENSURE(fstat64); ENSURE(statx);
    ENSURE(__xstat); ENSURE(__xstat64); ENSURE(__lxstat); ENSURE(__lxstat64);
    ENSURE(__fxstat); ENSURE(__fxstat64); ENSURE(__fxstatat); ENSURE(__fxstatat64);
    ENSURE(access); ENSURE(faccessat); ENSURE(readlink); ENSURE(readlinkat); ENSURE(opendir); ENSURE(realpath);
    ENSURE(mkdir); ENSURE(mkdirat); ENSURE(unlink); ENSURE(unlinkat); ENSURE(rmdir);
    ENSURE(rename); ENSURE(renameat); ENSURE(renameat2);
}

/* ---------- small helpers (no malloc, no stdio) ---------- */

static size_t copy_str(char* dst, size_t cap, const char* src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return (size_t)-1;
    memcpy(dst, src, n + 1);
    return n;
}

static int raw_open(const char* path, int flags, int mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static void raw_close(int fd)
{
    syscall(SYS_close, fd);
}

static void write_all(int fd, const char* buf, size_t n)
{
    while (n > 0) {
        long w = syscall(SYS_write, fd, buf, n);
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

static char* put_u(char* p, unsigned long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char* put_s(char* p, const char* s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

/* ---------- initialization ---------- */

static void parse_prefixes(const char* text)
{
    if (copy_str(g.prefix_text, sizeof g.prefix_text, text) == (size_t)-1)
        return;
    char* p = g.prefix_text;
    while (*p && g.prefix_count < MAX_PREFIXES) {
        char* start = p;
        while (*p && *p != ':')
            ++p;
        if (*p)
            *p++ = '\0';
        size_t len = strlen(start);
        while (len > 1 && start[len - 1] == '/')
            start[--len] = '\0';
        if (len > 0 && start[0] == '/') {
            g.prefixes[g.prefix_count] = start;
            g.prefix_lens[g.prefix_count++] = len;
        }
    }
}

/* Maps <cache><name> ("/index") read-only: its base and size, or NULL. */
static const void* map_cache_file(const char* name, size_t name_size, uint64_t* size)
{
    char path[PMAX];
    if (g.cache_len + name_size > sizeof path)
        return NULL;
    memcpy(path, g.cache, g.cache_len);
    memcpy(path + g.cache_len, name, name_size);
    int fd = raw_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || st.st_size <= 0) {
        raw_close(fd);
        return NULL;
    }
    void* base = (void*)syscall(SYS_mmap, NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    raw_close(fd);
    if (base == MAP_FAILED || (uintptr_t)base > (uintptr_t)-4096)
        return NULL;
    *size = (uint64_t)st.st_size;
    return base;
}

static int map_index(void)
{
    uint64_t size = 0;
    const void* base = map_cache_file("/index", sizeof "/index", &size);
    if (!base)
        return -1;
    if (canopy_stage_view_open(&g.view, base, size) != 0) {
        syscall(SYS_munmap, base, (size_t)size);
        return -1;
    }
    const struct canopy_stage_view* v = &g.view;
    for (uint32_t i = 0; i < v->header->prefix_count && g.prefix_count < MAX_PREFIXES; ++i) {
        const char* p = canopy_stage_string(v, v->prefixes[i].off, v->prefixes[i].len);
        if (p && p[0] == '/') {
            g.prefixes[g.prefix_count] = p;
            g.prefix_lens[g.prefix_count++] = v->prefixes[i].len;
        }
    }
    struct stat cs;
    if (syscall(SYS_stat, g.cache, &cs) == 0)
        g.cache_dev = cs.st_dev;
    return 0;
}

static void init_once(void)
{
    int expected = STATE_NEW;
    if (!__atomic_compare_exchange_n(&g.state, &expected, STATE_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread initializes: until it is done, calls pass through (correct, only unstaged) */
    const char* disable = getenv("CANOPY_STAGE_DISABLE");
    const char* cache = getenv("CANOPY_STAGE_CACHE");
    const char* record = getenv("CANOPY_STAGE_RECORD");
    const char* stats_file = getenv("CANOPY_STAGE_STATS");
    if (stats_file)
        copy_str(g.stats, sizeof g.stats, stats_file);
    if (disable && *disable && strcmp(disable, "0") != 0) {
        g.mode = MODE_OFF;
    } else if (record && *record) {
        const char* prefixes = getenv("CANOPY_STAGE_PREFIXES");
        if (copy_str(g.record, sizeof g.record, record) != (size_t)-1 && prefixes) {
            parse_prefixes(prefixes);
            g.mode = g.prefix_count ? MODE_RECORD : MODE_OFF;
        }
    } else if (cache && cache[0] == '/') {
        size_t n = copy_str(g.cache, sizeof g.cache, cache);
        while (n != (size_t)-1 && n > 1 && g.cache[n - 1] == '/')
            g.cache[--n] = '\0';
        if (n != (size_t)-1 && n + 6 < PMAX) {
            g.cache_len = n;
            memcpy(g.root_alias, g.cache, n);
            memcpy(g.root_alias + n, "/root", 6);
            g.root_alias_len = n + 5;
            memcpy(g.dirs_alias, g.cache, n);
            memcpy(g.dirs_alias + n, "/dirs", 6);
            g.dirs_alias_len = n + 5;
            if (map_index() == 0)
                g.mode = MODE_SERVE;
            const char* socket_path = getenv("CANOPY_STAGE_SOCKET");
            if (g.mode == MODE_SERVE && socket_path && socket_path[0] == '/') {
                copy_str(g.socket_path, sizeof g.socket_path, socket_path);
                uint64_t size = 0;
                const void* board = map_cache_file("/" CANOPY_STAGE_BOARD_NAME, sizeof "/" CANOPY_STAGE_BOARD_NAME,
                                                   &size);
                if (board && canopy_stage_board_open(&g.board, board, size) != 0)
                    syscall(SYS_munmap, board, (size_t)size);
            }
            const char* timeout = getenv("CANOPY_STAGE_FETCH_TIMEOUT");
            g.fetch_timeout = 120;
            if (timeout && *timeout) {
                long t = 0;
                for (const char* c = timeout; *c >= '0' && *c <= '9' && t < 1000000; ++c)
                    t = t * 10 + (*c - '0');
                if (t > 0)
                    g.fetch_timeout = t;
            }
        }
    }
    __atomic_store_n(&g.state, STATE_READY, __ATOMIC_RELEASE);
}

static inline int mode(void)
{
    int s = __atomic_load_n(&g.state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(s != STATE_READY, 0)) {
        init_once();
        if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != STATE_READY)
            return MODE_OFF;
    }
    return g.mode;
}

/* ---------- paths ---------- */

/* Makes path absolute (against dirfd or the cwd) and normalized into out. Returns length, or -1. */
static long absolutize(int dirfd, const char* path, char* out, int* trailing)
{
    if (!path || !*path)
        return -1;
    if (path[0] == '/')
        return canopy_stage_normalize(path, out, trailing);
    long base;
    if (dirfd == AT_FDCWD) {
        base = syscall(SYS_getcwd, out, PMAX);
        if (base <= 0)
            return -1;
        base = (long)strlen(out);
    } else {
        char link[32];
        char* p = put_s(link, "/proc/self/fd/");
        p = put_u(p, (unsigned long)(unsigned)dirfd);
        *p = '\0';
        base = syscall(SYS_readlinkat, AT_FDCWD, link, out, PMAX - 1);
        if (base <= 0 || out[0] != '/')
            return -1;
        out[base] = '\0';
    }
    size_t rel = strlen(path);
    if ((size_t)base + 1 + rel + 1 > PMAX)
        return -1;
    out[base] = '/';
    memcpy(out + base + 1, path, rel + 1);
    return canopy_stage_normalize(out, out, trailing);
}

static int under(const char* path, size_t len, const char* prefix, size_t plen)
{
    if (plen == 1 && prefix[0] == '/')
        return 1;
    return len >= plen && memcmp(path, prefix, plen) == 0 && (len == plen || path[plen] == '/');
}

/* A path in the node cache's mirrors stands for the original path: <cache>/root/X and <cache>/dirs/X are /X.
 * This is what $ORIGIN and /proc/self/maps names expand to once a file was opened from the cache. */
static long unalias(char* path, long len, int* aliased)
{
    *aliased = 0;
    if (g.mode != MODE_SERVE)
        return len;
    size_t cut = 0;
    if (under(path, (size_t)len, g.root_alias, g.root_alias_len))
        cut = g.root_alias_len;
    else if (under(path, (size_t)len, g.dirs_alias, g.dirs_alias_len))
        cut = g.dirs_alias_len;
    if (!cut)
        return len;
    *aliased = 1;
    if ((size_t)len == cut) {
        path[0] = '/';
        path[1] = '\0';
        return 1;
    }
    memmove(path, path + cut, (size_t)len - cut + 1);
    return len - (long)cut;
}

static int under_prefixes(const char* path, size_t len)
{
    for (int i = 0; i < g.prefix_count; ++i)
        if (under(path, len, g.prefixes[i], g.prefix_lens[i]))
            return 1;
    return 0;
}

static uint64_t parent_hash(const char* path, size_t len)
{
    while (len > 1 && path[len - 1] != '/')
        --len;
    if (len > 1)
        --len;
    return canopy_stage_hash(path, len);
}

/* This process changed something under a prefix: from now on it looks up that path and its directory's
 * other names on the real filesystem, so it sees its own writes. */
static void mark_dirty(int dirfd, const char* path)
{
    if (g.mode != MODE_SERVE)
        return;
    char buf[PMAX];
    int trailing;
    long len = absolutize(dirfd, path, buf, &trailing);
    if (len < 0)
        return;
    int aliased;
    len = unalias(buf, len, &aliased);
    if (!under_prefixes(buf, (size_t)len))
        return;
    COUNT(writes);
    uint64_t hashes[2] = {canopy_stage_hash(buf, (size_t)len), parent_hash(buf, (size_t)len)};
    for (int k = 0; k < 2; ++k) {
        int slot = __atomic_fetch_add(&g.dirty_count, 1, __ATOMIC_ACQ_REL);
        if (slot >= MAX_DIRTY) {
            __atomic_store_n(&g.dirty_overflow, 1, __ATOMIC_RELEASE);
            return;
        }
        __atomic_store_n(&g.dirty[slot], hashes[k], __ATOMIC_RELEASE);
    }
}

static int is_dirty(const char* path, size_t len)
{
    int n = __atomic_load_n(&g.dirty_count, __ATOMIC_ACQUIRE);
    if (n == 0)
        return 0;
    if (__atomic_load_n(&g.dirty_overflow, __ATOMIC_ACQUIRE))
        return 1;
    uint64_t self = canopy_stage_hash(path, len), parent = parent_hash(path, len);
    for (int i = 0; i < n && i < MAX_DIRTY; ++i) {
        uint64_t d = __atomic_load_n(&g.dirty[i], __ATOMIC_ACQUIRE);
        if (d == self || d == parent)
            return 1;
    }
    return 0;
}

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

/* ---------- on demand: one question to the node's canopyd per lookup the index cannot answer ---------- */

static int io_all(int fd, int nr, void* buf, size_t n)
{
    char* p = (char*)buf;
    while (n > 0) {
        long done = syscall(nr, fd, p, n);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            return -1;
        p += done;
        n -= (size_t)done;
    }
    return 0;
}

/* One question on a fresh socket: 0 answered, 1 the daemon said it has no answer, -1 no reply at all. */
static int ask(int fd, int kind, const char* path, size_t len, struct canopy_stage_fetch_reply* r, char* text)
{
    struct timeval tv = {g.fetch_timeout, 0};
    syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, g.socket_path, sizeof addr.sun_path);
    if (syscall(SYS_connect, fd, &addr, sizeof addr) != 0)
        return -1;
    struct canopy_stage_fetch_request req = {CANOPY_STAGE_FETCH_MAGIC, (uint32_t)kind, text != NULL, (uint32_t)len};
    if (io_all(fd, SYS_write, &req, sizeof req) != 0 || io_all(fd, SYS_write, (void*)path, len) != 0)
        return -1;
    if (io_all(fd, SYS_read, r, sizeof *r) != 0 || r->magic != CANOPY_STAGE_FETCH_MAGIC)
        return -1;
    if (r->status != 0 || r->text_len >= PMAX)
        return 1;
    if (r->text_len > 0 && (!text || io_all(fd, SYS_read, text, r->text_len) != 0))
        return -1;
    if (text)
        text[r->text_len] = '\0';
    return 0;
}

/* The reply the daemon would give, read from the node's answer board: 0, or -1 when the board cannot tell (no
 * answer yet, or only metadata where an open needs the copy). Same fields and text as daemon/stage_fetcher.cpp. */
static int board_answer(int kind, const char* path, size_t len, struct canopy_stage_fetch_reply* r, char* text)
{
    if (!g.board.base)
        return -1;
    const struct canopy_stage_board_record* b = canopy_stage_board_find(&g.board, path, len);
    if (!b)
        return -1;
    int found = b->stat_errno == 0 && b->open_errno == 0;
    if (kind == CANOPY_STAGE_FETCH_OPEN && found &&
        ((S_ISREG(b->stat.mode) && !(b->flags & CANOPY_STAGE_FETCH_CONTENT)) ||
         (S_ISDIR(b->stat.mode) && !(b->flags & CANOPY_STAGE_FETCH_LISTED))))
        return -1;
    const char* t = NULL;
    uint32_t n = 0;
    if (kind == CANOPY_STAGE_FETCH_OPEN && (b->flags & (CANOPY_STAGE_FETCH_CONTENT | CANOPY_STAGE_FETCH_LISTED))) {
        t = canopy_stage_board_mirror(b);
        n = b->mirror_len;
    } else if (kind == CANOPY_STAGE_FETCH_METADATA && text) {
        t = canopy_stage_board_link(b);
        n = b->link_len;
    }
    if (n > 0 && !text)
        return -1;
    memset(r, 0, sizeof *r);
    r->magic = CANOPY_STAGE_FETCH_MAGIC;
    r->lstat_errno = b->lstat_errno;
    r->stat_errno = b->stat_errno;
    r->open_errno = b->open_errno;
    r->flags = b->flags;
    r->lstat = b->lstat;
    r->stat = b->stat;
    r->text_len = n;
    if (text) {
        memcpy(text, t ? t : "", n);
        text[n] = '\0';
    }
    return 0;
}

/* Asks about path[0..len). text (PMAX bytes, or NULL) receives the reply's text, NUL-terminated. Returns 0
 * with *r filled, or -1: no answer (no daemon, timeout, the tree could not tell), the caller falls back to the
 * real filesystem. One connection per question: no descriptor is held between calls, so fork, threads and
 * programs that close "all other fds" need no care. errno is preserved. */
static int fetch(int kind, const char* path, size_t len, struct canopy_stage_fetch_reply* r, char* text)
{
    if (!g.socket_path[0] || len >= PMAX)
        return -1;
    if (board_answer(kind, path, len, r, text) == 0) {
        COUNT(board_hits);
        return 0;
    }
    if (__atomic_load_n(&g.fetch_dead, __ATOMIC_RELAXED))
        return -1;
    int saved = errno;
    int fd = (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? 1 : ask(fd, kind, path, len, r, text);
    if (fd >= 0)
        raw_close(fd);
    if (rc < 0) /* one timeout per process at most, not one per lookup */
        __atomic_store_n(&g.fetch_dead, 1, __ATOMIC_RELAXED);
    if (rc == 0)
        COUNT(fetched);
    else
        COUNT(fetch_failed);
    errno = saved;
    return rc == 0 ? 0 : -1;
}

/* Turns d into an on-demand answer for its path; 0, or -1 when there is none. */
static int decide_on_demand(struct decision* d, int kind, int follow, char* text)
{
    struct canopy_stage_fetch_reply* r = &d->reply;
    if (fetch(kind, d->path, (size_t)d->len, r, text) != 0)
        return -1;
    int follows = follow || d->trailing;
    int err = follows ? r->stat_errno : r->lstat_errno;
    if (!err && d->trailing && !S_ISDIR(r->stat.mode))
        err = ENOTDIR;
    d->fetched = 1;
    d->handled = 1;
    d->answer.outcome = err ? CANOPY_STAGE_ERROR : CANOPY_STAGE_FOUND;
    d->answer.errno_value = err;
    d->answer.follow = follows;
    d->answer.entry = NULL;
    return 0;
}

/* The stat view a FOUND decision stands for. */
static const struct canopy_stage_stat* decision_stat(const struct decision* d)
{
    if (!d->fetched)
        return canopy_stage_answer_stat(&g.view, &d->answer);
    if (d->answer.outcome != CANOPY_STAGE_FOUND)
        return NULL;
    return d->answer.follow ? &d->reply.stat : &d->reply.lstat;
}

/* kind: what to ask the node's canopyd when the index cannot answer (CANOPY_STAGE_FETCH_*); text: where its
 * reply's text goes (PMAX bytes), or NULL when the caller needs none. */
static __attribute__((noinline)) void decide(int dirfd, const char* path, int follow, int kind, char* text,
                                             struct decision* d)
{
    d->handled = 0;
    d->aliased = 0;
    d->fetched = 0;
    int trailing = 0;
    d->len = absolutize(dirfd, path, d->path, &trailing);
    d->trailing = trailing;
    if (d->len < 0)
        return;
    d->len = unalias(d->path, d->len, &d->aliased);
    if (!under_prefixes(d->path, (size_t)d->len)) {
        COUNT(outside);
        return;
    }
    if (is_dirty(d->path, (size_t)d->len)) {
        COUNT(passed);
        return;
    }
    canopy_stage_lookup(&g.view, d->path, (size_t)d->len, follow, trailing, &d->answer);
    if (d->answer.outcome == CANOPY_STAGE_UNKNOWN) {
        if (decide_on_demand(d, kind, follow, text) != 0)
            COUNT(passed);
        return;
    }
    d->handled = 1;
}

/* <cache>/root<mirror> or <cache>/dirs<mirror> into out; 0 or -1. */
static int cache_path(const struct canopy_stage_entry* e, const char* alias, size_t alias_len, char* out)
{
    const char* mirror = canopy_stage_string(&g.view, e->mirror_off, e->mirror_len);
    if (!mirror || alias_len + e->mirror_len + 1 > PMAX)
        return -1;
    memcpy(out, alias, alias_len);
    memcpy(out + alias_len, mirror, (size_t)e->mirror_len + 1);
    return 0;
}

/* ---------- recording ---------- */

static void record(char op, int dirfd, const char* path, int result)
{
    char abs[PMAX];
    int trailing;
    int saved = errno;
    long len = absolutize(dirfd, path, abs, &trailing);
    if (len < 0 || !under_prefixes(abs, (size_t)len)) {
        errno = saved;
        return;
    }
    char line[2 * PMAX + 32];
    char* p = line;
    *p++ = op;
    *p++ = '\t';
    p = put_u(p, (unsigned long)(result < 0 ? 0 : result));
    *p++ = '\t';
    for (long i = 0; i < len; ++i) {
        char c = abs[i];
        if (c == '\\' || c == '\n' || c == '\t') {
            *p++ = '\\';
            c = c == '\n' ? 'n' : c == '\t' ? 't' : '\\';
        }
        *p++ = c;
    }
    *p++ = '\n';
    /* One open/write/close per line: O_APPEND keeps concurrent writers' lines whole, and no descriptor is
     * held that a program closing "all other fds" could reuse under us. */
    int fd = raw_open(g.record, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        write_all(fd, line, (size_t)(p - line));
        raw_close(fd);
    }
    errno = saved;
}

/* ---------- stat ---------- */

static void fill_stat(const struct canopy_stage_stat* s, struct stat* st)
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

static void fill_statx(const struct canopy_stage_stat* s, struct statx* sx)
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

/* 1: answered (rc in *rc); 0: pass through (with d->path if d->aliased). */
static int stat_lookup(int dirfd, const char* path, int follow, struct stat* st, struct statx* sx,
                       struct decision* d, int* rc)
{
    decide(dirfd, path, follow, CANOPY_STAGE_FETCH_METADATA, NULL, d);
    if (!d->handled)
        return 0;
    if (d->answer.outcome == CANOPY_STAGE_ERROR) {
        COUNT(served_errno);
        errno = d->answer.errno_value;
        *rc = -1;
        return 1;
    }
    const struct canopy_stage_stat* s = decision_stat(d);
    if (!s) {
        COUNT(passed);
        return 0;
    }
    COUNT(served_meta);
    if (st)
        fill_stat(s, st);
    if (sx)
        fill_statx(s, sx);
    *rc = 0;
    return 1;
}

/* fstat of a descriptor opened from the cache reports the original file, so fstat agrees with stat. */
static void patch_fd_stat(int fd, struct stat* st, struct statx* sx)
{
    if (g.mode != MODE_SERVE)
        return;
    dev_t dev = st ? st->st_dev : makedev(sx->stx_dev_major, sx->stx_dev_minor);
    if (dev != g.cache_dev)
        return;
    char link[32];
    char path[PMAX];
    char* p = put_s(link, "/proc/self/fd/");
    p = put_u(p, (unsigned long)(unsigned)fd);
    *p = '\0';
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, path, PMAX - 1);
    if (n <= 0)
        return;
    path[n] = '\0';
    int aliased;
    n = unalias(path, n, &aliased);
    if (!aliased)
        return;
    const struct canopy_stage_entry* e = canopy_stage_find(&g.view, path, (size_t)n);
    const struct canopy_stage_stat* s = e && e->stat_errno == 0 ? canopy_stage_stat_at(&g.view, e->stat_stat) : NULL;
    struct canopy_stage_fetch_reply r;
    if (!s && !e && fetch(CANOPY_STAGE_FETCH_METADATA, path, (size_t)n, &r, NULL) == 0 && r.stat_errno == 0)
        s = &r.stat; /* fetched on demand: the node's canopyd has it cached since the open */
    if (!s)
        return;
    if (st)
        fill_stat(s, st);
    if (sx)
        fill_statx(s, sx);
}

#define STAT_WRAPPER(name, type, follow)                                                                           \
    EXPORT int name(const char* path, type* st)                                                                    \
    {                                                                                                              \
        ENSURE(name);                                                                                              \
        int m = mode();                                                                                            \
        if (m == MODE_SERVE) {                                                                                     \
            struct decision d;                                                                                     \
            int rc;                                                                                                \
            if (stat_lookup(AT_FDCWD, path, follow, (struct stat*)st, NULL, &d, &rc))                              \
                return rc;                                                                                         \
            return real_##name(d.aliased ? d.path : path, st);                                                     \
        }                                                                                                          \
        int rc = real_##name(path, st);                                                                            \
        if (m == MODE_RECORD)                                                                                      \
            record(follow ? 'S' : 'L', AT_FDCWD, path, rc < 0 ? errno : 0);                                        \
        return rc;                                                                                                 \
    }

STAT_WRAPPER(stat, struct stat, 1)
STAT_WRAPPER(stat64, struct stat64, 1)
STAT_WRAPPER(lstat, struct stat, 0)
STAT_WRAPPER(lstat64, struct stat64, 0)

#define XSTAT_WRAPPER(name, type, follow)                                                                          \
    EXPORT int name(int ver, const char* path, type* st)                                                           \
    {                                                                                                              \
        ENSURE(name);                                                                                              \
        int m = mode();                                                                                            \
        if (m == MODE_SERVE) {                                                                                     \
            struct decision d;                                                                                     \
            int rc;                                                                                                \
            if (stat_lookup(AT_FDCWD, path, follow, (struct stat*)st, NULL, &d, &rc))                              \
                return rc;                                                                                         \
            return real_##name(ver, d.aliased ? d.path : path, st);                                                \
        }                                                                                                          \
        int rc = real_##name(ver, path, st);                                                                       \
        if (m == MODE_RECORD)                                                                                      \
            record(follow ? 'S' : 'L', AT_FDCWD, path, rc < 0 ? errno : 0);                                        \
        return rc;                                                                                                 \
    }

XSTAT_WRAPPER(__xstat, struct stat, 1)
XSTAT_WRAPPER(__xstat64, struct stat64, 1)
XSTAT_WRAPPER(__lxstat, struct stat, 0)
XSTAT_WRAPPER(__lxstat64, struct stat64, 0)

#define FSTATAT_WRAPPER(name, type)                                                                                \
    EXPORT int name(int dirfd, const char* path, type* st, int flags)                                              \
    {                                                                                                              \
        ENSURE(name);                                                                                              \
        int m = mode();                                                                                            \
        int follow = !(flags & AT_SYMLINK_NOFOLLOW);                                                               \
        if (path && !*path && (flags & AT_EMPTY_PATH)) {                                                           \
            int rc = real_##name(dirfd, path, st, flags);                                                          \
            if (rc == 0)                                                                                           \
                patch_fd_stat(dirfd, (struct stat*)st, NULL);                                                      \
            return rc;                                                                                             \
        }                                                                                                          \
        if (m == MODE_SERVE) {                                                                                     \
            struct decision d;                                                                                     \
            int rc;                                                                                                \
            if (stat_lookup(dirfd, path, follow, (struct stat*)st, NULL, &d, &rc))                                 \
                return rc;                                                                                         \
            if (d.aliased)                                                                                         \
                return real_##name(AT_FDCWD, d.path, st, flags);                                                   \
            return real_##name(dirfd, path, st, flags);                                                            \
        }                                                                                                          \
        int rc = real_##name(dirfd, path, st, flags);                                                              \
        if (m == MODE_RECORD)                                                                                      \
            record(follow ? 'S' : 'L', dirfd, path, rc < 0 ? errno : 0);                                           \
        return rc;                                                                                                 \
    }

FSTATAT_WRAPPER(fstatat, struct stat)
FSTATAT_WRAPPER(fstatat64, struct stat64)

EXPORT int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags)
{
    ENSURE(__fxstatat);
    int m = mode();
    if (m == MODE_SERVE && path && *path) {
        struct decision d;
        int rc;
        if (stat_lookup(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), st, NULL, &d, &rc))
            return rc;
        if (d.aliased)
            return real___fxstatat(ver, AT_FDCWD, d.path, st, flags);
    }
    int rc = real___fxstatat(ver, dirfd, path, st, flags);
    if (m == MODE_RECORD && path && *path)
        record(flags & AT_SYMLINK_NOFOLLOW ? 'L' : 'S', dirfd, path, rc < 0 ? errno : 0);
    return rc;
}

EXPORT int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags)
{
    return __fxstatat(ver, dirfd, path, (struct stat*)st, flags);
}

EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* sx)
{
    ENSURE(statx);
    int m = mode();
    if (path && !*path && (flags & AT_EMPTY_PATH)) {
        int rc = real_statx(dirfd, path, flags, mask, sx);
        if (rc == 0)
            patch_fd_stat(dirfd, NULL, sx);
        return rc;
    }
    if (m == MODE_SERVE) {
        struct decision d;
        int rc;
        if (stat_lookup(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), NULL, sx, &d, &rc))
            return rc;
        if (d.aliased)
            return real_statx(AT_FDCWD, d.path, flags, mask, sx);
        return real_statx(dirfd, path, flags, mask, sx);
    }
    int rc = real_statx(dirfd, path, flags, mask, sx);
    if (m == MODE_RECORD)
        record(flags & AT_SYMLINK_NOFOLLOW ? 'L' : 'S', dirfd, path, rc < 0 ? errno : 0);
    return rc;
}

EXPORT int fstat(int fd, struct stat* st)
{
    ENSURE(fstat);
    int rc = real_fstat(fd, st);
    if (rc == 0 && mode() == MODE_SERVE)
        patch_fd_stat(fd, st, NULL);
    return rc;
}

EXPORT int fstat64(int fd, struct stat64* st)
{
    ENSURE(fstat64);
    int rc = real_fstat64(fd, st);
    if (rc == 0 && mode() == MODE_SERVE)
        patch_fd_stat(fd, (struct stat*)st, NULL);
    return rc;
}

EXPORT int __fxstat(int ver, int fd, struct stat* st)
{
    ENSURE(__fxstat);
    int rc = real___fxstat(ver, fd, st);
    if (rc == 0 && mode() == MODE_SERVE)
        patch_fd_stat(fd, st, NULL);
    return rc;
}

EXPORT int __fxstat64(int ver, int fd, struct stat64* st)
{
    ENSURE(__fxstat64);
    int rc = real___fxstat64(ver, fd, st);
    if (rc == 0 && mode() == MODE_SERVE)
        patch_fd_stat(fd, (struct stat*)st, NULL);
    return rc;
}

/* ---------- access ---------- */

static int permitted(const struct canopy_stage_stat* s, int amode)
{
    if (amode == F_OK)
        return 1;
    uid_t uid = getuid();
    if (uid == 0)
        return !(amode & X_OK) || S_ISDIR(s->mode) || (s->mode & 0111);
    unsigned bits;
    if (uid == s->uid) {
        bits = (s->mode >> 6) & 7;
    } else {
        int member = getgid() == s->gid;
        gid_t groups[64];
        int n = member ? 0 : getgroups(64, groups);
        for (int i = 0; i < n && !member; ++i)
            member = groups[i] == s->gid;
        bits = member ? (s->mode >> 3) & 7 : s->mode & 7;
    }
    return ((amode & R_OK) ? (bits & 4) != 0 : 1) && ((amode & X_OK) ? (bits & 1) != 0 : 1);
}

/* 1: answered; 0: pass through. W_OK always asks the real filesystem (it may be mounted read-only). */
static int access_lookup(int dirfd, const char* path, int amode, int flags, struct decision* d, int* rc)
{
    if (amode & W_OK)
        return d->aliased = 0, d->handled = 0, 0;
    decide(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), CANOPY_STAGE_FETCH_METADATA, NULL, d);
    if (!d->handled)
        return 0;
    if (d->answer.outcome == CANOPY_STAGE_ERROR) {
        COUNT(served_errno);
        errno = d->answer.errno_value;
        *rc = -1;
        return 1;
    }
    const struct canopy_stage_stat* s = decision_stat(d);
    if (!s || (flags & AT_EACCESS)) {
        COUNT(passed);
        return 0;
    }
    COUNT(served_meta);
    if (permitted(s, amode)) {
        *rc = 0;
    } else {
        errno = EACCES;
        *rc = -1;
    }
    return 1;
}

EXPORT int access(const char* path, int amode)
{
    ENSURE(access);
    int m = mode();
    if (m == MODE_SERVE) {
        struct decision d;
        int rc;
        if (access_lookup(AT_FDCWD, path, amode, 0, &d, &rc))
            return rc;
        return real_access(d.aliased ? d.path : path, amode);
    }
    int rc = real_access(path, amode);
    if (m == MODE_RECORD)
        record('A', AT_FDCWD, path, rc < 0 ? errno : 0);
    return rc;
}

EXPORT int faccessat(int dirfd, const char* path, int amode, int flags)
{
    ENSURE(faccessat);
    int m = mode();
    if (m == MODE_SERVE) {
        struct decision d;
        int rc;
        if (access_lookup(dirfd, path, amode, flags, &d, &rc))
            return rc;
        if (d.aliased)
            return real_faccessat(AT_FDCWD, d.path, amode, flags);
        return real_faccessat(dirfd, path, amode, flags);
    }
    int rc = real_faccessat(dirfd, path, amode, flags);
    if (m == MODE_RECORD)
        record('A', dirfd, path, rc < 0 ? errno : 0);
    return rc;
}

/* ---------- readlink ---------- */

static int readlink_lookup(int dirfd, const char* path, char* buf, size_t size, struct decision* d, ssize_t* rc)
{
    char text[PMAX];
    decide(dirfd, path, 0, CANOPY_STAGE_FETCH_METADATA, text, d);
    if (!d->handled)
        return 0;
    if (d->answer.outcome == CANOPY_STAGE_ERROR) {
        COUNT(served_errno);
        errno = d->answer.errno_value;
        *rc = -1;
        return 1;
    }
    const struct canopy_stage_stat* s = decision_stat(d);
    if (!s) {
        COUNT(passed);
        return 0;
    }
    COUNT(served_meta);
    if (!S_ISLNK(s->mode)) {
        errno = EINVAL;
        *rc = -1;
        return 1;
    }
    const struct canopy_stage_entry* e = d->answer.entry;
    const char* target = d->fetched ? text : canopy_stage_string(&g.view, e->link_off, e->link_len);
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

EXPORT ssize_t readlink(const char* path, char* buf, size_t size)
{
    ENSURE(readlink);
    int m = mode();
    if (m == MODE_SERVE) {
        struct decision d;
        ssize_t rc;
        if (readlink_lookup(AT_FDCWD, path, buf, size, &d, &rc))
            return rc;
        return real_readlink(d.aliased ? d.path : path, buf, size);
    }
    ssize_t rc = real_readlink(path, buf, size);
    if (m == MODE_RECORD)
        record('R', AT_FDCWD, path, rc < 0 ? errno : 0);
    return rc;
}

EXPORT ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t size)
{
    ENSURE(readlinkat);
    int m = mode();
    if (m == MODE_SERVE) {
        struct decision d;
        ssize_t rc;
        if (readlink_lookup(dirfd, path, buf, size, &d, &rc))
            return rc;
        if (d.aliased)
            return real_readlinkat(AT_FDCWD, d.path, buf, size);
        return real_readlinkat(dirfd, path, buf, size);
    }
    ssize_t rc = real_readlinkat(dirfd, path, buf, size);
    if (m == MODE_RECORD)
        record('R', dirfd, path, rc < 0 ? errno : 0);
    return rc;
}

/* ---------- open ---------- */

enum { WANT_FILE = 1, WANT_DIR = 2 };

/* The mirror path in target (from the reply's text) becomes <alias><mirror>; 0 or -1. */
static int mirror_target(const char* alias, size_t alias_len, size_t mirror_len, char* target)
{
    if (mirror_len == 0 || target[0] != '/' || alias_len + mirror_len + 1 > PMAX)
        return -1;
    memmove(target + alias_len, target, mirror_len + 1);
    memcpy(target, alias, alias_len);
    return 0;
}

/* What settles an open before its copy or listing matters, from the index and on demand alike: -1 an error
 * answer (errno set), 0 pass through (no stat view), 1 go on with *s, the stat view of what is opened. */
static int open_prelude(struct decision* d, const struct canopy_stage_stat** s)
{
    if (d->answer.outcome == CANOPY_STAGE_ERROR) {
        COUNT(served_errno);
        errno = d->answer.errno_value;
        return -1;
    }
    *s = decision_stat(d);
    if (!*s) {
        COUNT(passed);
        return 0;
    }
    if (S_ISLNK((*s)->mode)) { /* O_NOFOLLOW on a symlink */
        COUNT(served_errno);
        errno = ELOOP;
        return -1;
    }
    return 1;
}

/* An open answered on demand: the copy or the skeleton the node's canopyd made, or an error. */
static int open_fetched(int want, struct decision* d, char* target)
{
    const struct canopy_stage_stat* s;
    int settled = open_prelude(d, &s);
    if (settled <= 0)
        return settled;
    const struct canopy_stage_fetch_reply* r = &d->reply;
    if (r->open_errno && (S_ISDIR(s->mode) || S_ISREG(s->mode))) {
        COUNT(served_errno);
        errno = r->open_errno;
        return -1;
    }
    if (S_ISDIR(s->mode)) {
        if ((r->flags & CANOPY_STAGE_FETCH_LISTED) &&
            mirror_target(g.dirs_alias, g.dirs_alias_len, r->text_len, target) == 0) {
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
    if (S_ISREG(s->mode) && (r->flags & CANOPY_STAGE_FETCH_CONTENT) &&
        mirror_target(g.root_alias, g.root_alias_len, r->text_len, target) == 0) {
        COUNT(served_open);
        return 1;
    }
    COUNT(passed);
    return 0;
}

/* Decides an open for reading. Returns: -1 answered with an error (errno set), 0 pass through (d->path if
 * aliased), 1 open `target` instead (a cache copy or a directory skeleton). */
static int open_lookup(int dirfd, const char* path, int follow, int want, struct decision* d, char* target)
{
    decide(dirfd, path, follow, CANOPY_STAGE_FETCH_OPEN, target, d);
    if (!d->handled)
        return 0;
    if (d->fetched)
        return open_fetched(want, d, target);
    const struct canopy_stage_stat* s;
    int settled = open_prelude(d, &s);
    if (settled <= 0)
        return settled;
    const struct canopy_stage_entry* e = d->answer.entry;
    if (S_ISDIR(s->mode)) {
        if ((e->flags & CANOPY_STAGE_LISTED) && cache_path(e, g.dirs_alias, g.dirs_alias_len, target) == 0) {
            COUNT(served_dir);
            return 1;
        }
    } else if (want == WANT_DIR) {
        COUNT(served_errno);
        errno = ENOTDIR;
        return -1;
    } else if (S_ISREG(s->mode) && (e->flags & CANOPY_STAGE_CONTENT) &&
               cache_path(e, g.root_alias, g.root_alias_len, target) == 0) {
        COUNT(served_open);
        return 1;
    }
    /* The index knows the path but holds no copy or listing (a manifest that only saw a stat): on demand. */
    if ((S_ISDIR(s->mode) || S_ISREG(s->mode)) && decide_on_demand(d, CANOPY_STAGE_FETCH_OPEN, follow, target) == 0)
        return open_fetched(want, d, target);
    COUNT(passed);
    return 0;
}

static int is_write_open(int flags)
{
    return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0 || (flags & O_PATH) == O_PATH;
}

/* Every open variant lands here; `pass` performs the real call with the caller's or the unaliased path. */
#define OPEN_BODY(pass_orig, pass_alias, dirfd, path, flags)                                                       \
    int m = mode();                                                                                                \
    if (m == MODE_SERVE) {                                                                                         \
        if (is_write_open(flags)) {                                                                                \
            if (!((flags) & O_PATH))                                                                               \
                mark_dirty(dirfd, path);                                                                           \
            return pass_orig;                                                                                      \
        }                                                                                                          \
        struct decision d;                                                                                         \
        char target[PMAX];                                                                                         \
        int r = open_lookup(dirfd, path, !((flags) & O_NOFOLLOW), ((flags) & O_DIRECTORY) ? WANT_DIR : WANT_FILE,  \
                            &d, target);                                                                           \
        if (r < 0)                                                                                                 \
            return -1;                                                                                             \
        if (r > 0) {                                                                                               \
            int fd = (int)syscall(SYS_openat, AT_FDCWD, target, (flags) & ~O_NOFOLLOW, 0);                         \
            if (fd >= 0)                                                                                           \
                return fd;                                                                                         \
            /* not there (yet): the real file is still right */                                                    \
        }                                                                                                          \
        if (d.aliased) {                                                                                           \
            const char* path_alias = d.path;                                                                       \
            (void)path_alias;                                                                                      \
            return pass_alias;                                                                                     \
        }                                                                                                          \
        return pass_orig;                                                                                          \
    }                                                                                                              \
    int rc = pass_orig;                                                                                            \
    if (m == MODE_RECORD)                                                                                          \
        record(is_write_open(flags) ? 'W' : ((flags) & O_DIRECTORY) ? 'D' : 'O', dirfd, path, rc < 0 ? errno : 0); \
    return rc;

static mode_t open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

EXPORT int open(const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t md = open_mode(flags, ap);
    va_end(ap);
    ENSURE(open);
    OPEN_BODY(real_open(path, flags, md), real_open(path_alias, flags, md), AT_FDCWD, path, flags)
}

EXPORT int open64(const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t md = open_mode(flags, ap);
    va_end(ap);
    ENSURE(open64);
    OPEN_BODY(real_open64(path, flags, md), real_open64(path_alias, flags, md), AT_FDCWD, path, flags)
}

EXPORT int openat(int dirfd, const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t md = open_mode(flags, ap);
    va_end(ap);
    ENSURE(openat);
    OPEN_BODY(real_openat(dirfd, path, flags, md), real_openat(AT_FDCWD, path_alias, flags, md), dirfd, path, flags)
}

EXPORT int openat64(int dirfd, const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t md = open_mode(flags, ap);
    va_end(ap);
    ENSURE(openat64);
    OPEN_BODY(real_openat64(dirfd, path, flags, md), real_openat64(AT_FDCWD, path_alias, flags, md), dirfd, path,
              flags)
}

/* _FORTIFY_SOURCE variants (Python calls __open64_2): same decision, the real one keeps its checks. */
EXPORT int __open_2(const char* path, int flags)
{
    ENSURE(__open_2);
    OPEN_BODY(real___open_2(path, flags), real___open_2(path_alias, flags), AT_FDCWD, path, flags)
}

EXPORT int __open64_2(const char* path, int flags)
{
    ENSURE(__open64_2);
    OPEN_BODY(real___open64_2(path, flags), real___open64_2(path_alias, flags), AT_FDCWD, path, flags)
}

EXPORT int __openat_2(int dirfd, const char* path, int flags)
{
    ENSURE(__openat_2);
    OPEN_BODY(real___openat_2(dirfd, path, flags), real___openat_2(AT_FDCWD, path_alias, flags), dirfd, path, flags)
}

EXPORT int __openat64_2(int dirfd, const char* path, int flags)
{
    ENSURE(__openat64_2);
    OPEN_BODY(real___openat64_2(dirfd, path, flags), real___openat64_2(AT_FDCWD, path_alias, flags), dirfd, path,
              flags)
}

static int fopen_writes(const char* fmode)
{
    return fmode && (strchr(fmode, 'w') || strchr(fmode, 'a') || strchr(fmode, '+'));
}

#define FOPEN_BODY(real)                                                                                           \
    int m = mode();                                                                                                \
    if (m == MODE_SERVE) {                                                                                         \
        if (fopen_writes(fmode)) {                                                                                 \
            mark_dirty(AT_FDCWD, path);                                                                            \
            return real(path, fmode);                                                                              \
        }                                                                                                          \
        struct decision d;                                                                                         \
        char target[PMAX];                                                                                         \
        int r = open_lookup(AT_FDCWD, path, 1, WANT_FILE, &d, target);                                             \
        if (r < 0)                                                                                                 \
            return NULL;                                                                                           \
        if (r > 0) {                                                                                               \
            FILE* f = real(target, fmode);                                                                         \
            if (f)                                                                                                 \
                return f;                                                                                          \
        }                                                                                                          \
        return real(d.aliased ? d.path : path, fmode);                                                             \
    }                                                                                                              \
    FILE* f = real(path, fmode);                                                                                   \
    if (m == MODE_RECORD)                                                                                          \
        record(fopen_writes(fmode) ? 'W' : 'O', AT_FDCWD, path, f ? 0 : errno);                                    \
    return f;

EXPORT FILE* fopen(const char* path, const char* fmode)
{
    ENSURE(fopen);
    FOPEN_BODY(real_fopen)
}

EXPORT FILE* fopen64(const char* path, const char* fmode)
{
    ENSURE(fopen64);
    FOPEN_BODY(real_fopen64)
}

EXPORT DIR* opendir(const char* path)
{
    ENSURE(opendir);
    int m = mode();
    if (m == MODE_SERVE) {
        struct decision d;
        char target[PMAX];
        int r = open_lookup(AT_FDCWD, path, 1, WANT_DIR, &d, target);
        if (r < 0)
            return NULL;
        if (r > 0) {
            DIR* dir = real_opendir(target);
            if (dir)
                return dir;
        }
        return real_opendir(d.aliased ? d.path : path);
    }
    DIR* dir = real_opendir(path);
    if (m == MODE_RECORD)
        record('D', AT_FDCWD, path, dir ? 0 : errno);
    return dir;
}

/* realpath from the index: the walk ends on the canonical entry, whose key is the answer. glibc's realpath
 * calls its internal lstat and readlink, which no wrapper sees, so it is wrapped as a whole. */
EXPORT char* realpath(const char* path, char* resolved)
{
    ENSURE(realpath);
    int m = mode();
    if (m == MODE_RECORD && path) {
        char* out = real_realpath(path, resolved);
        record('S', AT_FDCWD, path, out ? 0 : errno);
        return out;
    }
    if (m == MODE_SERVE && path) {
        struct decision d;
        char text[PMAX];
        decide(AT_FDCWD, path, 1, CANOPY_STAGE_FETCH_OPEN, text, &d);
        if (d.handled && d.fetched) {
            /* On demand: the canonical path of a file or directory is the mirror its open brought. */
            if (d.answer.outcome == CANOPY_STAGE_ERROR) {
                COUNT(served_errno);
                errno = d.answer.errno_value;
                return NULL;
            }
            if ((d.reply.flags & (CANOPY_STAGE_FETCH_CONTENT | CANOPY_STAGE_FETCH_LISTED)) && text[0] == '/' &&
                d.reply.text_len < PATH_MAX) {
                char* out = resolved ? resolved : malloc(PATH_MAX);
                if (!out) {
                    errno = ENOMEM;
                    return NULL;
                }
                COUNT(served_meta);
                memcpy(out, text, (size_t)d.reply.text_len + 1);
                return out;
            }
            COUNT(passed);
        } else if (d.handled) {
            struct canopy_stage_answer a;
            canopy_stage_resolve(&g.view, d.path, 1, 0, &a);
            if (a.outcome == CANOPY_STAGE_ERROR) {
                COUNT(served_errno);
                errno = a.errno_value;
                return NULL;
            }
            const char* key = a.outcome == CANOPY_STAGE_FOUND
                                  ? canopy_stage_string(&g.view, a.entry->path_off, a.entry->path_len)
                                  : NULL;
            if (key && a.entry->path_len < PATH_MAX) {
                char* out = resolved ? resolved : malloc(PATH_MAX);
                if (!out) {
                    errno = ENOMEM;
                    return NULL;
                }
                COUNT(served_meta);
                memcpy(out, key, (size_t)a.entry->path_len + 1);
                return out;
            }
            COUNT(passed);
        }
        if (d.aliased)
            return real_realpath(d.path, resolved);
    }
    return real_realpath(path, resolved);
}

/* ---------- changes under a prefix: done on the real filesystem, remembered by this process ---------- */

#define CHANGE_WRAPPER(ret, name, params, args, mark)                                                              \
    EXPORT ret name params                                                                                         \
    {                                                                                                              \
        ENSURE(name);                                                                                              \
        int m = mode();                                                                                            \
        if (m == MODE_SERVE) {                                                                                     \
            mark;                                                                                                  \
        }                                                                                                          \
        ret rc = real_##name args;                                                                                 \
        return rc;                                                                                                 \
    }

CHANGE_WRAPPER(int, mkdir, (const char* path, mode_t md), (path, md), mark_dirty(AT_FDCWD, path))
CHANGE_WRAPPER(int, mkdirat, (int dirfd, const char* path, mode_t md), (dirfd, path, md), mark_dirty(dirfd, path))
CHANGE_WRAPPER(int, unlink, (const char* path), (path), mark_dirty(AT_FDCWD, path))
CHANGE_WRAPPER(int, unlinkat, (int dirfd, const char* path, int flags), (dirfd, path, flags), mark_dirty(dirfd, path))
CHANGE_WRAPPER(int, rmdir, (const char* path), (path), mark_dirty(AT_FDCWD, path))
CHANGE_WRAPPER(int, rename, (const char* a, const char* b), (a, b), (mark_dirty(AT_FDCWD, a), mark_dirty(AT_FDCWD, b)))
CHANGE_WRAPPER(int, renameat, (int da, const char* a, int db, const char* b), (da, a, db, b),
               (mark_dirty(da, a), mark_dirty(db, b)))
CHANGE_WRAPPER(int, renameat2, (int da, const char* a, int db, const char* b, unsigned flags), (da, a, db, b, flags),
               (mark_dirty(da, a), mark_dirty(db, b)))

/* ---------- the loader: LD_AUDIT ---------- */

EXPORT unsigned int la_version(unsigned int version)
{
    g.audit = 1;
    /* Answer with the version we were built for, never more than the loader offers (0 would unload us). */
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

EXPORT char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag)
{
    (void)cookie;
    (void)flag;
    /* The loader holds its lock around searches, so one buffer is enough; it copies the name it keeps. */
    static char result[PMAX];
    if (!name || name[0] != '/')
        return (char*)name;
    int m = mode();
    if (m == MODE_RECORD) {
        record('X', AT_FDCWD, name, 0);
        return (char*)name;
    }
    if (m != MODE_SERVE)
        return (char*)name;
    struct decision d;
    int r = open_lookup(AT_FDCWD, name, 1, WANT_FILE, &d, result);
    if (r < 0) {
        COUNT(loader_fail);
        return NULL; /* known missing: the loader tries its next directory without touching the filesystem */
    }
    if (r > 0 && syscall(SYS_faccessat, AT_FDCWD, result, F_OK) == 0) {
        COUNT(loader_redirect);
        return result;
    }
    COUNT(loader_pass);
    if (d.aliased && copy_str(result, sizeof result, d.path) != (size_t)-1)
        return result;
    return (char*)name;
}

/* ---------- life cycle ---------- */

__attribute__((constructor)) static void interpose_init(void)
{
    resolve_all();
    mode();
}

__attribute__((destructor)) static void interpose_fini(void)
{
    if (!g.stats[0])
        return;
    char line[512];
    char* p = line;
    p = put_s(p, g.audit ? "audit" : "preload");
    p = put_s(p, " pid=");
    p = put_u(p, (unsigned long)getpid());
    p = put_s(p, " mode=");
    p = put_s(p, g.mode == MODE_SERVE ? "serve" : g.mode == MODE_RECORD ? "record" : "off");
#define FIELD(name)                                                                                                \
    p = put_s(p, " " #name "=");                                                                                   \
    p = put_u(p, __atomic_load_n(&stats.name, __ATOMIC_RELAXED));
    FIELD(served_meta)
    FIELD(served_errno)
    FIELD(served_open)
    FIELD(served_dir)
    FIELD(passed)
    FIELD(outside)
    FIELD(writes)
    FIELD(loader_redirect)
    FIELD(loader_fail)
    FIELD(loader_pass)
    FIELD(fetched)
    FIELD(fetch_failed)
    FIELD(board_hits)
#undef FIELD
    *p++ = '\n';
    int fd = raw_open(g.stats, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        write_all(fd, line, (size_t)(p - line));
        raw_close(fd);
    }
}
