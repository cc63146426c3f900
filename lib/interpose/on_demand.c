/* On demand: one question to the node's canopyd per lookup the index cannot answer, unless the board has it. */
#include "interpose/on_demand.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "interpose/counters.h"
#include "interpose/raw_io.h"

void on_demand_start(struct on_demand* o, const struct cache_dir* cache, const char* socket_path,
                     const char* timeout)
{
    o->timeout = 120;
    if (timeout && *timeout) {
        long t = 0;
        for (const char* c = timeout; *c >= '0' && *c <= '9' && t < 1000000; ++c)
            t = t * 10 + (*c - '0');
        if (t > 0)
            o->timeout = t;
    }
    if (!socket_path || socket_path[0] != '/')
        return;
    copy_str(o->socket_path, sizeof o->socket_path, socket_path);
    o->cache = cache;
    uint64_t size = 0;
    const void* board = map_file_in(cache->path, cache->len, "/" CANOPY_STAGE_BOARD_NAME, &size);
    if (board && canopy_stage_board_open(&o->board, board, size) != 0)
        syscall(SYS_munmap, board, (size_t)size);
}

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
static int ask(const struct on_demand* o, int fd, int kind, const char* path, size_t len,
               struct canopy_stage_fetch_reply* r, char* text)
{
    struct timeval tv = {o->timeout, 0};
    syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, o->socket_path, sizeof addr.sun_path);
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
static int board_answer(const struct canopy_stage_board_view* board, int kind, const char* path, size_t len,
                        struct canopy_stage_fetch_reply* r, char* text)
{
    if (!board->base)
        return -1;
    const struct canopy_stage_board_record* b = canopy_stage_board_find(board, path, len);
    if (!b)
        return -1;
    const struct canopy_stage_path_facts* f = &b->facts;
    int found = f->stat_errno == 0 && f->open_errno == 0;
    if (kind == CANOPY_STAGE_FETCH_OPEN && found &&
        ((S_ISREG(f->stat.mode) && !(f->flags & CANOPY_STAGE_CONTENT)) ||
         (S_ISDIR(f->stat.mode) && !(f->flags & CANOPY_STAGE_LISTED))))
        return -1;
    const char* t = NULL;
    uint32_t n = 0;
    if (kind == CANOPY_STAGE_FETCH_OPEN && (f->flags & (CANOPY_STAGE_CONTENT | CANOPY_STAGE_LISTED))) {
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
    r->facts = *f;
    r->text_len = n;
    if (text) {
        memcpy(text, t ? t : "", n);
        text[n] = '\0';
    }
    return 0;
}

/* A name its directory's listing lacks, told from the board without asking: the directory's record is listed and
 * its skeleton (<cache>/dirs<mirror>, a whole listing) has no such entry. The daemon infers the same answer
 * (FetchCache::known_failure), but a question costs a round trip through a busy daemon, and a module search asks
 * this for most of the names it tries. 0 with *r filled, or -1 when the board cannot tell. */
static int listing_answer(const struct on_demand* o, const char* path, size_t len, struct canopy_stage_fetch_reply* r)
{
    size_t slash = len;
    while (slash > 0 && path[slash - 1] != '/')
        --slash;
    if (slash <= 1 || slash == len)
        return -1;
    const char* name = path + slash;
    size_t name_len = len - slash;
    if ((name_len == 1 && name[0] == '.') || (name_len == 2 && name[0] == '.' && name[1] == '.'))
        return -1;
    const struct canopy_stage_board_record* dir = canopy_stage_board_find(&o->board, path, slash - 1);
    if (!dir)
        return -1;
    const struct canopy_stage_path_facts* f = &dir->facts;
    int failure = f->stat_errno != 0 ? f->stat_errno : !S_ISDIR(f->stat.mode) ? ENOTDIR : 0;
    if (!failure) {
        if (!(f->flags & CANOPY_STAGE_LISTED))
            return -1;
        char entry[PMAX];
        size_t n = o->cache->dirs_len + dir->mirror_len + 1 + name_len;
        if (n >= sizeof entry)
            return -1;
        char* p = entry;
        memcpy(p, o->cache->dirs, o->cache->dirs_len);
        p += o->cache->dirs_len;
        memcpy(p, canopy_stage_board_mirror(dir), dir->mirror_len);
        p += dir->mirror_len;
        *p++ = '/';
        memcpy(p, name, name_len);
        p[name_len] = '\0';
        struct stat st;
        if (syscall(SYS_newfstatat, AT_FDCWD, entry, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
            return -1;
        failure = ENOENT;
    }
    memset(r, 0, sizeof *r);
    r->magic = CANOPY_STAGE_FETCH_MAGIC;
    r->facts.lstat_errno = r->facts.stat_errno = failure;
    return 0;
}

int on_demand_fetch(struct on_demand* o, int kind, const char* path, size_t len, struct canopy_stage_fetch_reply* r,
                    char* text)
{
    if (!o->socket_path[0] || len >= PMAX)
        return -1;
    if (board_answer(&o->board, kind, path, len, r, text) == 0) {
        COUNT(board_hits);
        return 0;
    }
    int saved = errno;
    int listed = o->board.base ? listing_answer(o, path, len, r) : -1;
    errno = saved;
    if (listed == 0) {
        COUNT(listing_misses);
        if (text)
            text[0] = '\0';
        return 0;
    }
    if (__atomic_load_n(&o->dead, __ATOMIC_RELAXED))
        return -1;
    struct timespec asked, answered;
    clock_gettime(CLOCK_MONOTONIC, &asked);
    int fd = (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? 1 : ask(o, fd, kind, path, len, r, text);
    if (fd >= 0)
        raw_close(fd);
    clock_gettime(CLOCK_MONOTONIC, &answered);
    COUNT_ADD(fetch_wait_us, (unsigned long)((answered.tv_sec - asked.tv_sec) * 1000000L +
                                             (answered.tv_nsec - asked.tv_nsec) / 1000));
    if (rc < 0) /* one timeout per process at most, not one per lookup */
        __atomic_store_n(&o->dead, 1, __ATOMIC_RELAXED);
    if (rc == 0)
        COUNT(fetched);
    else
        COUNT(fetch_failed);
    errno = saved;
    return rc == 0 ? 0 : -1;
}
