/* The interposer's path logic: absolute spellings, the prefixes, the cache's mirror names, paths changed here. */
#include "interpose/paths.h"

#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/raw_io.h"

long fd_path(int fd, char* out)
{
    char link[32];
    char* p = put_s(link, "/proc/self/fd/");
    p = put_u(p, (unsigned long)(unsigned)fd);
    *p = '\0';
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, out, PMAX - 1);
    if (n <= 0)
        return -1;
    out[n] = '\0';
    return n;
}

long absolute_path(int dirfd, const char* path, char* out, int* trailing)
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
        base = fd_path(dirfd, out);
        if (base < 0 || out[0] != '/')
            return -1;
    }
    size_t rel = strlen(path);
    if ((size_t)base + 1 + rel + 1 > PMAX)
        return -1;
    out[base] = '/';
    memcpy(out + base + 1, path, rel + 1);
    return canopy_stage_normalize(out, out, trailing);
}

int path_under(const char* path, size_t len, const char* prefix, size_t plen)
{
    if (plen == 1 && prefix[0] == '/')
        return 1;
    return len >= plen && memcmp(path, prefix, plen) == 0 && (len == plen || path[plen] == '/');
}

void prefix_list_add(struct prefix_list* l, const char* path, size_t len)
{
    if (l->count >= MAX_PREFIXES || len == 0 || path[0] != '/')
        return;
    l->path[l->count] = path;
    l->len[l->count++] = len;
}

void prefix_list_parse(struct prefix_list* l, char* text)
{
    char* p = text;
    while (*p && l->count < MAX_PREFIXES) {
        char* start = p;
        while (*p && *p != ':')
            ++p;
        if (*p)
            *p++ = '\0';
        size_t len = strlen(start);
        while (len > 1 && start[len - 1] == '/')
            start[--len] = '\0';
        prefix_list_add(l, start, len);
    }
}

int prefix_list_holds(const struct prefix_list* l, const char* path, size_t len)
{
    for (int i = 0; i < l->count; ++i)
        if (path_under(path, len, l->path[i], l->len[i]))
            return 1;
    return 0;
}

/* out := c->path followed by name; its length. */
static size_t join(const struct cache_dir* c, const char* name, char* out)
{
    size_t n = strlen(name);
    memcpy(out, c->path, c->len);
    memcpy(out + c->len, name, n + 1);
    return c->len + n;
}

int cache_dir_set(struct cache_dir* c, const char* path)
{
    if (path[0] != '/')
        return -1;
    size_t n = copy_str(c->path, sizeof c->path, path);
    while (n != (size_t)-1 && n > 1 && c->path[n - 1] == '/')
        c->path[--n] = '\0';
    if (n == (size_t)-1 || n + sizeof "/root" >= PMAX)
        return -1;
    c->len = n;
    c->root_len = join(c, "/root", c->root);
    c->dirs_len = join(c, "/dirs", c->dirs);
    return 0;
}

long cache_dir_unalias(const struct cache_dir* c, char* path, long len, int* aliased)
{
    *aliased = 0;
    size_t cut = 0;
    if (path_under(path, (size_t)len, c->root, c->root_len))
        cut = c->root_len;
    else if (path_under(path, (size_t)len, c->dirs, c->dirs_len))
        cut = c->dirs_len;
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

/* The hash of path's directory ("/" for a top-level name). */
static uint64_t parent_hash(const char* path, size_t len)
{
    while (len > 1 && path[len - 1] != '/')
        --len;
    if (len > 1)
        --len;
    return canopy_stage_hash(path, len);
}

void dirty_set_add(struct dirty_set* d, const char* path, size_t len)
{
    uint64_t hashes[2] = {canopy_stage_hash(path, len), parent_hash(path, len)};
    for (int k = 0; k < 2; ++k) {
        int slot = __atomic_fetch_add(&d->count, 1, __ATOMIC_ACQ_REL);
        if (slot >= MAX_DIRTY) {
            __atomic_store_n(&d->overflow, 1, __ATOMIC_RELEASE);
            return;
        }
        __atomic_store_n(&d->hashes[slot], hashes[k], __ATOMIC_RELEASE);
    }
}

int dirty_set_holds(const struct dirty_set* d, const char* path, size_t len)
{
    int n = __atomic_load_n(&d->count, __ATOMIC_ACQUIRE);
    if (n == 0)
        return 0;
    if (__atomic_load_n(&d->overflow, __ATOMIC_ACQUIRE))
        return 1;
    uint64_t self = canopy_stage_hash(path, len), parent = parent_hash(path, len);
    for (int i = 0; i < n && i < MAX_DIRTY; ++i) {
        uint64_t h = __atomic_load_n(&d->hashes[i], __ATOMIC_ACQUIRE);
        if (h == self || h == parent)
            return 1;
    }
    return 0;
}
