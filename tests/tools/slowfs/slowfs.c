// slowfs: a passthrough FUSE filesystem that counts every operation and can add latency to metadata ops,
// standing in for a loaded shared (Lustre-like) filesystem in canopy's staging tests and benchmarks.
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE

#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: slowfs SOURCE_DIR MOUNTPOINT [options] [fuse options]\n"
    "\n"
    "Mounts SOURCE_DIR at MOUNTPOINT. Every operation is passed through to SOURCE_DIR (reads and writes)\n"
    "and counted by type; inode numbers, modes, sizes, mtimes and symlink targets are those of SOURCE_DIR.\n"
    "\n"
    "options:\n"
    "  --delay-ms F      add F milliseconds (a float, e.g. 0.5) to every metadata operation: lookup,\n"
    "                    getattr, setattr, readlink, open, create, opendir, readdir, access, statfs,\n"
    "                    the xattr ops and the namespace ops (mkdir, unlink, rename, ...). Not to read,\n"
    "                    write, flush, release, releasedir, fsync or forget. Default 0.\n"
    "  --stats FILE      write the counters as JSON to FILE on SIGUSR1 and at unmount\n"
    "  --cache SECONDS   let the kernel cache entries, attributes and misses for SECONDS. Default 0: no\n"
    "                    caching, so every stat, path walk and open reaches slowfs, as every one reaches\n"
    "                    a Lustre metadata server.\n"
    "  --no-data-cache   drop a file's cached pages at every open, so all its reads reach slowfs again.\n"
    "                    By default pages stay cached (as on a Lustre client) until the file's size or\n"
    "                    mtime is seen to change.\n"
    "  --threads N       at most N threads serving requests (default 128); delayed requests sleep in\n"
    "                    parallel, so concurrent clients each see the delay as latency\n"
    "  -f                stay in the foreground (otherwise slowfs returns once the mount is up)\n"
    "  -o OPT[,OPT...]   FUSE mount options, e.g. -o allow_other\n"
    "  -h, --help        this text\n"
    "\n"
    "counters:\n"
    "  MOUNTPOINT/.slowfs-stats is a virtual read-only file (not listed in the directory, and its own\n"
    "  operations are not counted) holding\n"
    "    {\"ops\": {\"lookup\": n, \"getattr\": n, ...}, \"total\": n, \"metadata\": n, \"misses\": n,\n"
    "     \"bytes_read\": n, \"bytes_written\": n, \"delay_ms\": F}\n"
    "  total counts every operation except forget (kernel bookkeeping that a server never pays for),\n"
    "  metadata counts the delayed ones, misses the lookups answered ENOENT.\n"
    "  Reset the counters by opening it for writing (`: > MOUNTPOINT/.slowfs-stats`) or with SIGUSR2.\n"
    "  A file named .slowfs-stats at the top of SOURCE_DIR is hidden by it.\n"
    "\n"
    "unmount with `fusermount3 -u MOUNTPOINT` (or umount, or SIGTERM/SIGINT to slowfs); slowfs then exits 0.\n";

enum op {
    OP_LOOKUP, OP_FORGET, OP_GETATTR, OP_SETATTR, OP_READLINK, OP_MKNOD, OP_MKDIR, OP_UNLINK, OP_RMDIR,
    OP_SYMLINK, OP_RENAME, OP_LINK, OP_OPEN, OP_READ, OP_WRITE, OP_FLUSH, OP_RELEASE, OP_FSYNC, OP_OPENDIR,
    OP_READDIR, OP_RELEASEDIR, OP_FSYNCDIR, OP_STATFS, OP_SETXATTR, OP_GETXATTR, OP_LISTXATTR,
    OP_REMOVEXATTR, OP_ACCESS, OP_CREATE, OP_COUNT
};

static const struct {
    const char *name;
    bool metadata;  // gets the --delay-ms latency, as it would cost a metadata server round trip
} op_info[OP_COUNT] = {
    [OP_LOOKUP] = {"lookup", true},       [OP_FORGET] = {"forget", false},
    [OP_GETATTR] = {"getattr", true},     [OP_SETATTR] = {"setattr", true},
    [OP_READLINK] = {"readlink", true},   [OP_MKNOD] = {"mknod", true},
    [OP_MKDIR] = {"mkdir", true},         [OP_UNLINK] = {"unlink", true},
    [OP_RMDIR] = {"rmdir", true},         [OP_SYMLINK] = {"symlink", true},
    [OP_RENAME] = {"rename", true},       [OP_LINK] = {"link", true},
    [OP_OPEN] = {"open", true},           [OP_READ] = {"read", false},
    [OP_WRITE] = {"write", false},        [OP_FLUSH] = {"flush", false},
    [OP_RELEASE] = {"release", false},    [OP_FSYNC] = {"fsync", false},
    [OP_OPENDIR] = {"opendir", true},     [OP_READDIR] = {"readdir", true},
    [OP_RELEASEDIR] = {"releasedir", false}, [OP_FSYNCDIR] = {"fsyncdir", false},
    [OP_STATFS] = {"statfs", true},       [OP_SETXATTR] = {"setxattr", true},
    [OP_GETXATTR] = {"getxattr", true},   [OP_LISTXATTR] = {"listxattr", true},
    [OP_REMOVEXATTR] = {"removexattr", true}, [OP_ACCESS] = {"access", true},
    [OP_CREATE] = {"create", true},
};

// Counters, bumped from many FUSE worker threads at once.
static uint64_t op_counts[OP_COUNT];
static uint64_t miss_count, bytes_read, bytes_written;

static double delay_ms;
static double cache_seconds;
static bool data_cache = true;
static const char *stats_path;
static char *source_abs;  // absolute path of SOURCE_DIR (slowfs may chdir("/") when it daemonizes)
static int source_fd = -1;

static void count_add(uint64_t *counter, uint64_t n) { __atomic_fetch_add(counter, n, __ATOMIC_RELAXED); }
static uint64_t count_get(uint64_t *counter) { return __atomic_load_n(counter, __ATOMIC_RELAXED); }

static void reset_counters(void) {
    for (int i = 0; i < OP_COUNT; i++) __atomic_store_n(&op_counts[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&miss_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bytes_read, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bytes_written, 0, __ATOMIC_RELAXED);
}

static void sleep_ms(double ms) {
    struct timespec left = {(time_t)(ms / 1000.0), (long)((ms - 1000.0 * (time_t)(ms / 1000.0)) * 1e6)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &left, &left) == EINTR) {
    }
}

// Called first by every handler for a real (not .slowfs-stats) request: counts it, then pays the delay.
static void account(enum op op) {
    count_add(&op_counts[op], 1);
    if (op_info[op].metadata && delay_ms > 0) sleep_ms(delay_ms);
}

// Writes the counters as JSON into buf; returns the length (always < size for size >= 2048).
static size_t format_stats(char *buf, size_t size) {
    size_t len = 0;
    uint64_t total = 0, metadata = 0;
    len += (size_t)snprintf(buf + len, size - len, "{\"ops\": {");
    for (int i = 0; i < OP_COUNT; i++) {
        uint64_t n = count_get(&op_counts[i]);
        if (i != OP_FORGET) total += n;
        if (op_info[i].metadata) metadata += n;
        len += (size_t)snprintf(buf + len, size - len, "%s\"%s\": %" PRIu64, i ? ", " : "", op_info[i].name, n);
    }
    len += (size_t)snprintf(buf + len, size - len,
                            "}, \"total\": %" PRIu64 ", \"metadata\": %" PRIu64 ", \"misses\": %" PRIu64
                            ", \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64 ", \"delay_ms\": %g}\n",
                            total, metadata, count_get(&miss_count), count_get(&bytes_read),
                            count_get(&bytes_written), delay_ms);
    return len < size ? len : size - 1;
}

static void write_stats_file(void) {
    if (!stats_path) return;
    char buf[4096], tmp[PATH_MAX];
    size_t len = format_stats(buf, sizeof buf);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", stats_path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0 || rename(tmp, stats_path) != 0)
        fprintf(stderr, "slowfs: cannot write the stats file %s: %s; check --stats\n", stats_path, strerror(errno));
}

// ---- nodes: what a FUSE node id stands for ------------------------------------------------------------
// A node is named by its parent and name, so it costs no file descriptor (a torch environment has tens of
// thousands of files, more than RLIMIT_NOFILE allows to keep open). Nodes are found by (st_dev, st_ino)
// so that hard links and repeated lookups give the kernel one node id per inode.

struct node {
    struct node *parent;  // holds a reference on the parent
    char *name;
    dev_t dev;
    ino_t ino;
    uint64_t nlookup;  // references the kernel holds (lookups not yet forgotten)
    uint64_t refs;     // nlookup + number of child nodes naming this one as parent
    int shared_fd;     // one read-only descriptor for all read-only opens of the file (see open_readonly)
    uint64_t shared_users;
    bool hashed;
    struct node *hash_next;
};

static struct node root_node = {.name = "", .nlookup = 1, .refs = 1};
static struct node stats_node = {.parent = &root_node, .name = ".slowfs-stats"};
static const char stats_name[] = ".slowfs-stats";
static pthread_rwlock_t tree_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct node **buckets;
static size_t bucket_count, node_count;

static size_t hash_of(dev_t dev, ino_t ino) {
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev;
    return (size_t)(h ^ (h >> 29)) & (bucket_count - 1);
}

static void hash_insert(struct node *n) {
    if (node_count + 1 > bucket_count) {
        size_t old_count = bucket_count;
        struct node **old = buckets;
        bucket_count = old_count ? old_count * 2 : 1024;
        buckets = calloc(bucket_count, sizeof *buckets);
        if (!buckets) abort();
        for (size_t i = 0; i < old_count; i++) {
            for (struct node *m = old[i], *next; m; m = next) {
                next = m->hash_next;
                size_t b = hash_of(m->dev, m->ino);
                m->hash_next = buckets[b];
                buckets[b] = m;
            }
        }
        free(old);
    }
    size_t b = hash_of(n->dev, n->ino);
    n->hash_next = buckets[b];
    buckets[b] = n;
    n->hashed = true;
    node_count++;
}

static void hash_remove(struct node *n) {
    if (!n->hashed) return;
    for (struct node **p = &buckets[hash_of(n->dev, n->ino)]; *p; p = &(*p)->hash_next) {
        if (*p == n) {
            *p = n->hash_next;
            break;
        }
    }
    n->hashed = false;
    node_count--;
}

static struct node *hash_find(dev_t dev, ino_t ino) {
    if (!bucket_count) return NULL;
    for (struct node *n = buckets[hash_of(dev, ino)]; n; n = n->hash_next)
        if (n->dev == dev && n->ino == ino) return n;
    return NULL;
}

// Drops `count` references; frees nodes (and then their parents) that nothing refers to. Write lock held.
static void node_unref(struct node *n, uint64_t count) {
    while (n && n != &root_node) {
        n->refs -= count;
        if (n->refs) return;
        struct node *parent = n->parent;
        hash_remove(n);
        free(n->name);
        free(n);
        n = parent;
        count = 1;
    }
}

// Renames a node to (parent, name). Write lock held.
static int node_move(struct node *n, struct node *parent, const char *name) {
    if (n->parent == parent && strcmp(n->name, name) == 0) return 0;
    char *copy = strdup(name);
    if (!copy) return ENOMEM;
    free(n->name);
    n->name = copy;
    parent->refs++;
    struct node *old_parent = n->parent;
    n->parent = parent;
    node_unref(old_parent, 1);
    return 0;
}

static struct node *node_of(fuse_ino_t ino) {
    return ino == FUSE_ROOT_ID ? &root_node : (struct node *)(uintptr_t)ino;
}

static fuse_ino_t id_of(struct node *n) { return n == &root_node ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n; }

static bool is_stats(fuse_ino_t ino) { return ino == (fuse_ino_t)(uintptr_t)&stats_node; }

static const uint64_t shared_flag = 1ull << 32;  // in fi->fh: the descriptor is the node's shared one

static int fd_of(struct fuse_file_info *fi) { return (int)(fi->fh & ~shared_flag); }

// Path of a node relative to SOURCE_DIR ("." for the root), optionally with "/name" appended.
static int node_path(fuse_ino_t ino, const char *name, char *buf, size_t size) {
    const char *parts[PATH_MAX / 2];
    size_t depth = 0;
    pthread_rwlock_rdlock(&tree_lock);
    if (name) parts[depth++] = name;
    for (struct node *n = node_of(ino); n != &root_node && depth < PATH_MAX / 2; n = n->parent)
        parts[depth++] = n->name;
    size_t len = 0;
    int err = 0;
    if (depth == 0) {
        buf[len++] = '.';
    }
    for (size_t i = depth; i-- > 0 && !err;) {
        size_t part_len = strlen(parts[i]);
        if (len + part_len + 2 > size) {
            err = ENAMETOOLONG;
            break;
        }
        memcpy(buf + len, parts[i], part_len);
        len += part_len;
        if (i) buf[len++] = '/';
    }
    pthread_rwlock_unlock(&tree_lock);
    buf[len] = '\0';
    return err;
}

// ---- the virtual counters file ---------------------------------------------------------------------------

struct stats_snapshot {
    size_t len;
    char text[4096];
};

static void stats_attr(struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = 0xFFFFFFFFFFFFFF01ull;  // not a real inode of SOURCE_DIR in practice
    st->st_mode = S_IFREG | 0644;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_blksize = 4096;
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

static void stats_open(fuse_req_t req, struct fuse_file_info *fi) {
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) reset_counters();
    struct stats_snapshot *s = malloc(sizeof *s);
    if (!s) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    s->len = format_stats(s->text, sizeof s->text);
    fi->fh = (uint64_t)(uintptr_t)s;
    fi->direct_io = 1;  // its size is unknown to the kernel (0): let reads reach us
    fi->nonseekable = 0;
    fuse_reply_open(req, fi);
}

// ---- entry replies ---------------------------------------------------------------------------------------

static void fill_entry(struct fuse_entry_param *e, struct node *n, const struct stat *st) {
    memset(e, 0, sizeof *e);
    e->ino = id_of(n);
    e->attr = *st;
    e->attr_timeout = cache_seconds;
    e->entry_timeout = cache_seconds;
}

// Looks up parent/name in SOURCE_DIR and takes a kernel reference on its node; errno value on failure.
static int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e) {
    char path[PATH_MAX];
    int err = node_path(parent, name, path, sizeof path);
    if (err) return err;
    struct stat st;
    if (fstatat(source_fd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
    pthread_rwlock_wrlock(&tree_lock);
    struct node *p = node_of(parent);
    struct node *n = hash_find(st.st_dev, st.st_ino);
    if (!n) {
        n = calloc(1, sizeof *n);
        char *copy = strdup(name);
        if (!n || !copy) {
            free(n);
            free(copy);
            pthread_rwlock_unlock(&tree_lock);
            return ENOMEM;
        }
        n->name = copy;
        n->parent = p;
        p->refs++;
        n->dev = st.st_dev;
        n->ino = st.st_ino;
        hash_insert(n);
    } else if ((err = node_move(n, p, name)) != 0) {  // the name it was last seen under: a hard link or a rename
        pthread_rwlock_unlock(&tree_lock);
        return err;
    }
    n->nlookup++;
    n->refs++;
    pthread_rwlock_unlock(&tree_lock);
    fill_entry(e, n, &st);
    return 0;
}

static void reply_new_entry(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    int err = do_lookup(parent, name, &e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

// ---- operations ------------------------------------------------------------------------------------------

static void sfs_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    // Kept pages are dropped when a getattr or lookup shows a new size or mtime (a file changed in SOURCE_DIR).
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    if (cache_seconds <= 0) conn->want &= ~(unsigned)FUSE_CAP_CACHE_SYMLINKS;
}

static void sfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    if (parent == FUSE_ROOT_ID && strcmp(name, stats_name) == 0) {
        memset(&e, 0, sizeof e);
        e.ino = (fuse_ino_t)(uintptr_t)&stats_node;
        stats_attr(&e.attr);
        fuse_reply_entry(req, &e);
        return;
    }
    account(OP_LOOKUP);
    int err = do_lookup(parent, name, &e);
    if (err == ENOENT) {
        count_add(&miss_count, 1);
        if (cache_seconds > 0) {  // a negative entry the kernel may cache
            memset(&e, 0, sizeof e);
            e.entry_timeout = cache_seconds;
            fuse_reply_entry(req, &e);
            return;
        }
    }
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup) {
    if (is_stats(ino) || ino == FUSE_ROOT_ID) return;
    struct node *n = node_of(ino);
    n->nlookup -= nlookup;
    if (n->nlookup == 0) hash_remove(n);  // a later lookup of the inode gets a new node id
    node_unref(n, nlookup);
}

static void sfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    count_add(&op_counts[OP_FORGET], 1);
    pthread_rwlock_wrlock(&tree_lock);
    forget_one(ino, nlookup);
    pthread_rwlock_unlock(&tree_lock);
    fuse_reply_none(req);
}

static void sfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    count_add(&op_counts[OP_FORGET], count);
    pthread_rwlock_wrlock(&tree_lock);
    for (size_t i = 0; i < count; i++) forget_one(forgets[i].ino, forgets[i].nlookup);
    pthread_rwlock_unlock(&tree_lock);
    fuse_reply_none(req);
}

static void sfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct stat st;
    if (is_stats(ino)) {
        stats_attr(&st);
        fuse_reply_attr(req, &st, 0);
        return;
    }
    account(OP_GETATTR);
    int rc;
    if (fi) {
        rc = fstat(fd_of(fi), &st);
    } else {
        char path[PATH_MAX];
        int err = node_path(ino, NULL, path, sizeof path);
        if (err) {
            fuse_reply_err(req, err);
            return;
        }
        rc = fstatat(source_fd, path, &st, AT_SYMLINK_NOFOLLOW);
    }
    if (rc != 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_attr(req, &st, cache_seconds);
}

static void sfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi) {
    if (is_stats(ino)) {  // truncating it (": > .slowfs-stats") is a reset, done at open
        struct stat st;
        stats_attr(&st);
        fuse_reply_attr(req, &st, 0);
        return;
    }
    account(OP_SETATTR);
    char path[PATH_MAX];
    int err = node_path(ino, NULL, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    int fd = fi ? fd_of(fi) : -1;
    int rc = 0;
    if (valid & FUSE_SET_ATTR_MODE)
        rc = fd >= 0 ? fchmod(fd, attr->st_mode) : fchmodat(source_fd, path, attr->st_mode, 0);
    if (rc == 0 && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
        uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
        gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
        rc = fd >= 0 ? fchown(fd, uid, gid) : fchownat(source_fd, path, uid, gid, AT_SYMLINK_NOFOLLOW);
    }
    if (rc == 0 && (valid & FUSE_SET_ATTR_SIZE)) {
        if (fd >= 0) {
            rc = ftruncate(fd, attr->st_size);
        } else {
            int wfd = openat(source_fd, path, O_WRONLY | O_CLOEXEC);
            rc = wfd < 0 ? -1 : ftruncate(wfd, attr->st_size);
            if (wfd >= 0) {
                int saved = errno;
                close(wfd);
                errno = saved;
            }
        }
    }
    if (rc == 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
        if (valid & FUSE_SET_ATTR_ATIME_NOW)
            tv[0].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_ATIME)
            tv[0] = attr->st_atim;
        if (valid & FUSE_SET_ATTR_MTIME_NOW)
            tv[1].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_MTIME)
            tv[1] = attr->st_mtim;
        rc = fd >= 0 ? futimens(fd, tv) : utimensat(source_fd, path, tv, AT_SYMLINK_NOFOLLOW);
    }
    if (rc != 0) {
        fuse_reply_err(req, errno);
        return;
    }
    struct stat st;
    rc = fd >= 0 ? fstat(fd, &st) : fstatat(source_fd, path, &st, AT_SYMLINK_NOFOLLOW);
    if (rc != 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_attr(req, &st, cache_seconds);
}

static void sfs_readlink(fuse_req_t req, fuse_ino_t ino) {
    account(OP_READLINK);
    char path[PATH_MAX], target[PATH_MAX + 1];
    int err = node_path(ino, NULL, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    ssize_t len = readlinkat(source_fd, path, target, sizeof target);
    if (len < 0) {
        fuse_reply_err(req, errno);
    } else if ((size_t)len == sizeof target) {
        fuse_reply_err(req, ENAMETOOLONG);
    } else {
        target[len] = '\0';
        fuse_reply_readlink(req, target);
    }
}

// mknod, mkdir, symlink and link: make the entry in SOURCE_DIR, then answer as a lookup would.
static void make_entry(fuse_req_t req, enum op op, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
                       const char *link_target, fuse_ino_t link_from) {
    account(op);
    char path[PATH_MAX], from[PATH_MAX];
    int err = node_path(parent, name, path, sizeof path);
    if (!err && op == OP_LINK) err = node_path(link_from, NULL, from, sizeof from);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    int rc;
    switch (op) {
    case OP_MKDIR: rc = mkdirat(source_fd, path, mode); break;
    case OP_SYMLINK: rc = symlinkat(link_target, source_fd, path); break;
    case OP_LINK: rc = linkat(source_fd, from, source_fd, path, 0); break;
    default: rc = mknodat(source_fd, path, mode, rdev); break;
    }
    if (rc != 0)
        fuse_reply_err(req, errno);
    else
        reply_new_entry(req, parent, name);
}

static void sfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
    make_entry(req, OP_MKNOD, parent, name, mode, rdev, NULL, 0);
}

static void sfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    make_entry(req, OP_MKDIR, parent, name, mode, 0, NULL, 0);
}

static void sfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
    make_entry(req, OP_SYMLINK, parent, name, 0, 0, link, 0);
}

static void sfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
    make_entry(req, OP_LINK, newparent, newname, 0, 0, NULL, ino);
}

static void remove_entry(fuse_req_t req, enum op op, fuse_ino_t parent, const char *name) {
    account(op);
    char path[PATH_MAX];
    int err = node_path(parent, name, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    fuse_reply_err(req, unlinkat(source_fd, path, op == OP_RMDIR ? AT_REMOVEDIR : 0) == 0 ? 0 : errno);
}

static void sfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_entry(req, OP_UNLINK, parent, name);
}

static void sfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_entry(req, OP_RMDIR, parent, name);
}

// After a rename, the node of whatever now sits at parent/name takes that name.
static void rename_node_at(fuse_ino_t parent, const char *name, const char *path) {
    struct stat st;
    if (fstatat(source_fd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    pthread_rwlock_wrlock(&tree_lock);
    struct node *n = hash_find(st.st_dev, st.st_ino);
    if (n) node_move(n, node_of(parent), name);
    pthread_rwlock_unlock(&tree_lock);
}

static void sfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                       const char *newname, unsigned int flags) {
    account(OP_RENAME);
    char from[PATH_MAX], to[PATH_MAX];
    int err = node_path(parent, name, from, sizeof from);
    if (!err) err = node_path(newparent, newname, to, sizeof to);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    if (renameat2(source_fd, from, source_fd, to, flags) != 0) {
        fuse_reply_err(req, errno);
        return;
    }
    rename_node_at(newparent, newname, to);
    if (flags & RENAME_EXCHANGE) rename_node_at(parent, name, from);
    fuse_reply_err(req, 0);
}

// Read-only opens of one file share a descriptor: every process that maps a .so keeps it open, and 64 ranks
// mapping 400 libraries each would pass RLIMIT_NOFILE if each open held its own descriptor.
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static int open_readonly(fuse_ino_t ino, const char *path) {
    struct node *n = node_of(ino);
    pthread_mutex_lock(&shared_lock);
    if (n->shared_users == 0) {
        n->shared_fd = openat(source_fd, path, O_RDONLY | O_CLOEXEC);
        if (n->shared_fd < 0) {
            int err = errno;
            pthread_mutex_unlock(&shared_lock);
            return -err;
        }
    }
    n->shared_users++;
    int fd = n->shared_fd;
    pthread_mutex_unlock(&shared_lock);
    return fd;
}

static void close_file(fuse_ino_t ino, uint64_t fh) {
    if (!(fh & shared_flag)) {
        close((int)fh);
        return;
    }
    struct node *n = node_of(ino);
    pthread_mutex_lock(&shared_lock);
    if (--n->shared_users == 0) close(n->shared_fd);
    pthread_mutex_unlock(&shared_lock);
}

static void sfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (is_stats(ino)) {
        stats_open(req, fi);
        return;
    }
    account(OP_OPEN);
    char path[PATH_MAX];
    int err = node_path(ino, NULL, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    bool shared = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & (O_DIRECT | O_TRUNC | O_DIRECTORY));
    int fd = shared ? open_readonly(ino, path)
                    : openat(source_fd, path, (fi->flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL)) | O_CLOEXEC);
    if (fd < 0) {
        fuse_reply_err(req, shared ? -fd : errno);
        return;
    }
    fi->fh = (uint64_t)fd | (shared ? shared_flag : 0);
    fi->keep_cache = data_cache;
    if (fuse_reply_open(req, fi) != 0) close_file(ino, fi->fh);  // the opener was interrupted
}

static void sfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    account(OP_CREATE);
    char path[PATH_MAX];
    int err = node_path(parent, name, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    int fd = openat(source_fd, path, (fi->flags & ~O_NOFOLLOW) | O_CREAT | O_CLOEXEC, mode);
    if (fd < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    struct fuse_entry_param e;
    err = do_lookup(parent, name, &e);
    if (err) {
        close(fd);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uint64_t)fd;
    if (fuse_reply_create(req, &e, fi) != 0) close(fd);
}

static void sfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    if (is_stats(ino)) {
        struct stats_snapshot *s = (struct stats_snapshot *)(uintptr_t)fi->fh;
        size_t start = off < 0 || (size_t)off >= s->len ? s->len : (size_t)off;
        size_t len = s->len - start < size ? s->len - start : size;
        fuse_reply_buf(req, s->text + start, len);
        return;
    }
    account(OP_READ);
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ssize_t got = pread(fd_of(fi), buf, size, off);
    if (got < 0) {
        fuse_reply_err(req, errno);
    } else {
        count_add(&bytes_read, (uint64_t)got);
        fuse_reply_buf(req, buf, (size_t)got);
    }
    free(buf);
}

static void sfs_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
                          struct fuse_file_info *fi) {
    if (is_stats(ino)) {
        reset_counters();
        fuse_reply_write(req, fuse_buf_size(in));
        return;
    }
    account(OP_WRITE);
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
    out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    out.buf[0].fd = fd_of(fi);
    out.buf[0].pos = off;
    ssize_t written = fuse_buf_copy(&out, in, 0);
    if (written < 0) {
        fuse_reply_err(req, (int)-written);
    } else {
        count_add(&bytes_written, (uint64_t)written);
        fuse_reply_write(req, (size_t)written);
    }
}

static void sfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (is_stats(ino)) {
        fuse_reply_err(req, 0);
        return;
    }
    account(OP_FLUSH);
    // Closing a duplicate reports the errors a close of the file would (NFS-style), without closing it.
    int dup_fd = dup(fd_of(fi));
    fuse_reply_err(req, dup_fd < 0 ? errno : (close(dup_fd) == 0 ? 0 : errno));
}

static void sfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (is_stats(ino)) {
        free((void *)(uintptr_t)fi->fh);
        fuse_reply_err(req, 0);
        return;
    }
    account(OP_RELEASE);
    close_file(ino, fi->fh);
    fuse_reply_err(req, 0);
}

static void sfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)ino;
    account(OP_FSYNC);
    int rc = datasync ? fdatasync(fd_of(fi)) : fsync(fd_of(fi));
    fuse_reply_err(req, rc == 0 ? 0 : errno);
}

struct dir_handle {
    DIR *dir;
    off_t offset;
    struct dirent *pending;  // read from the directory but not yet sent (it did not fit)
};

static void sfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    account(OP_OPENDIR);
    char path[PATH_MAX];
    int err = node_path(ino, NULL, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    struct dir_handle *d = calloc(1, sizeof *d);
    int fd = d ? openat(source_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd < 0 || !(d->dir = fdopendir(fd))) {
        err = d ? errno : ENOMEM;
        if (fd >= 0) close(fd);
        free(d);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    if (fuse_reply_open(req, fi) != 0) {
        closedir(d->dir);
        free(d);
    }
}

static void sfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino;
    account(OP_READDIR);
    struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (off != d->offset) {
        seekdir(d->dir, off);
        d->pending = NULL;
        d->offset = off;
    }
    size_t used = 0;
    int err = 0;
    for (;;) {
        if (!d->pending) {
            errno = 0;
            d->pending = readdir(d->dir);
            if (!d->pending) {
                err = errno;
                break;
            }
        }
        struct stat st = {.st_ino = d->pending->d_ino, .st_mode = (mode_t)d->pending->d_type << 12};
        size_t len = fuse_add_direntry(req, buf + used, size - used, d->pending->d_name, &st, d->pending->d_off);
        if (len > size - used) break;
        used += len;
        d->offset = d->pending->d_off;
        d->pending = NULL;
    }
    if (err && used == 0)
        fuse_reply_err(req, err);
    else
        fuse_reply_buf(req, buf, used);
    free(buf);
}

static void sfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    account(OP_RELEASEDIR);
    struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
    closedir(d->dir);
    free(d);
    fuse_reply_err(req, 0);
}

static void sfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)ino;
    account(OP_FSYNCDIR);
    int fd = dirfd(((struct dir_handle *)(uintptr_t)fi->fh)->dir);
    int rc = datasync ? fdatasync(fd) : fsync(fd);
    fuse_reply_err(req, rc == 0 ? 0 : errno);
}

static void sfs_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    account(OP_STATFS);
    struct statvfs sv;
    if (fstatvfs(source_fd, &sv) != 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

static void sfs_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    if (is_stats(ino)) {
        fuse_reply_err(req, (mask & X_OK) ? EACCES : 0);
        return;
    }
    account(OP_ACCESS);
    char path[PATH_MAX];
    int err = node_path(ino, NULL, path, sizeof path);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    fuse_reply_err(req, faccessat(source_fd, path, mask, 0) == 0 ? 0 : errno);
}

// The xattr calls have no *at forms: they take SOURCE_DIR's absolute path.
static int absolute_path(fuse_ino_t ino, char *buf, size_t size) {
    char rel[PATH_MAX];
    int err = node_path(ino, NULL, rel, sizeof rel);
    if (err) return err;
    return (size_t)snprintf(buf, size, "%s/%s", source_abs, rel) >= size ? ENAMETOOLONG : 0;
}

static void sfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    if (is_stats(ino)) {
        fuse_reply_err(req, ENODATA);
        return;
    }
    account(OP_GETXATTR);
    char path[PATH_MAX];
    int err = absolute_path(ino, path, sizeof path);
    char *value = err ? NULL : malloc(size ? size : 1);
    if (!err && !value) err = ENOMEM;
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    ssize_t len = lgetxattr(path, name, size ? value : NULL, size);
    if (len < 0)
        fuse_reply_err(req, errno);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)len);
    else
        fuse_reply_buf(req, value, (size_t)len);
    free(value);
}

static void sfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    if (is_stats(ino)) {
        if (size == 0)
            fuse_reply_xattr(req, 0);
        else
            fuse_reply_buf(req, NULL, 0);
        return;
    }
    account(OP_LISTXATTR);
    char path[PATH_MAX];
    int err = absolute_path(ino, path, sizeof path);
    char *list = err ? NULL : malloc(size ? size : 1);
    if (!err && !list) err = ENOMEM;
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    ssize_t len = llistxattr(path, size ? list : NULL, size);
    if (len < 0)
        fuse_reply_err(req, errno);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)len);
    else
        fuse_reply_buf(req, list, (size_t)len);
    free(list);
}

static void sfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                         int flags) {
    account(OP_SETXATTR);
    char path[PATH_MAX];
    int err = absolute_path(ino, path, sizeof path);
    if (!err && lsetxattr(path, name, value, size, flags) != 0) err = errno;
    fuse_reply_err(req, err);
}

static void sfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
    account(OP_REMOVEXATTR);
    char path[PATH_MAX];
    int err = absolute_path(ino, path, sizeof path);
    if (!err && lremovexattr(path, name) != 0) err = errno;
    fuse_reply_err(req, err);
}

static const struct fuse_lowlevel_ops sfs_ops = {
    .init = sfs_init,
    .lookup = sfs_lookup,
    .forget = sfs_forget,
    .forget_multi = sfs_forget_multi,
    .getattr = sfs_getattr,
    .setattr = sfs_setattr,
    .readlink = sfs_readlink,
    .mknod = sfs_mknod,
    .mkdir = sfs_mkdir,
    .unlink = sfs_unlink,
    .rmdir = sfs_rmdir,
    .symlink = sfs_symlink,
    .rename = sfs_rename,
    .link = sfs_link,
    .open = sfs_open,
    .read = sfs_read,
    .write_buf = sfs_write_buf,
    .flush = sfs_flush,
    .release = sfs_release,
    .fsync = sfs_fsync,
    .opendir = sfs_opendir,
    .readdir = sfs_readdir,
    .releasedir = sfs_releasedir,
    .fsyncdir = sfs_fsyncdir,
    .statfs = sfs_statfs,
    .setxattr = sfs_setxattr,
    .getxattr = sfs_getxattr,
    .listxattr = sfs_listxattr,
    .removexattr = sfs_removexattr,
    .access = sfs_access,
    .create = sfs_create,
};

// ---- signals and main ------------------------------------------------------------------------------------

// SIGUSR1 and SIGUSR2 are blocked in every thread and taken here, so their work needs no signal safety.
static void *signal_thread(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0) continue;
        if (sig == SIGUSR1)
            write_stats_file();
        else if (sig == SIGUSR2)
            reset_counters();
    }
    return NULL;
}

static bool parse_double(const char *text, double *out) {
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || value < 0) return false;
    *out = value;
    return true;
}

// Our option's value: "--name=VALUE" or "--name VALUE". Returns NULL when argv[*i] is not --name.
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing) {
    size_t len = strlen(name);
    if (strncmp(argv[*i], name, len) != 0) return NULL;
    if (argv[*i][len] == '=') return argv[*i] + len + 1;
    if (argv[*i][len] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

int main(int argc, char **argv) {
    const char *source = NULL, *mountpoint = NULL;
    unsigned threads = 128;
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    fuse_opt_add_arg(&args, argv[0]);
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *value;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if ((value = option_value(argc, argv, &i, "--delay-ms", &missing))) {
            if (!parse_double(value, &delay_ms)) {
                fprintf(stderr, "slowfs: --delay-ms wants milliseconds >= 0 (e.g. 1.5), not '%s'\n", value);
                return 2;
            }
        } else if ((value = option_value(argc, argv, &i, "--cache", &missing))) {
            if (!parse_double(value, &cache_seconds)) {
                fprintf(stderr, "slowfs: --cache wants seconds >= 0, not '%s'\n", value);
                return 2;
            }
        } else if ((value = option_value(argc, argv, &i, "--threads", &missing))) {
            double n;
            if (!parse_double(value, &n) || n < 1 || n > 100000 || n != (unsigned)n) {
                fprintf(stderr, "slowfs: --threads wants a whole number from 1, not '%s'\n", value);
                return 2;
            }
            threads = (unsigned)n;
        } else if (strcmp(argv[i], "--no-data-cache") == 0) {
            data_cache = false;
        } else if ((value = option_value(argc, argv, &i, "--stats", &missing))) {
            stats_path = value;
        } else if (missing) {
            fprintf(stderr, "slowfs: %s needs a value; see slowfs --help\n", argv[i]);
            return 2;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            fuse_opt_add_arg(&args, argv[i]);
            fuse_opt_add_arg(&args, argv[++i]);
        } else if (argv[i][0] == '-') {
            fuse_opt_add_arg(&args, argv[i]);
        } else if (!source) {
            source = argv[i];
        } else if (!mountpoint) {
            mountpoint = argv[i];
        } else {
            fprintf(stderr, "slowfs: unexpected argument '%s'; usage: slowfs SOURCE_DIR MOUNTPOINT [options]\n",
                    argv[i]);
            return 2;
        }
    }
    if (!source || !mountpoint) {
        fprintf(stderr, "slowfs: need SOURCE_DIR and MOUNTPOINT; see slowfs --help\n");
        return 2;
    }
    struct rlimit files;  // descriptors: one per open directory and per file open for writing
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    source_abs = realpath(source, NULL);
    source_fd = source_abs ? open(source_abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    struct stat root_st;
    if (source_fd < 0 || fstat(source_fd, &root_st) != 0) {
        fprintf(stderr, "slowfs: cannot open SOURCE_DIR %s: %s\n", source, strerror(errno));
        return 1;
    }
    root_node.dev = root_st.st_dev;
    root_node.ino = root_st.st_ino;
    if (stats_path && stats_path[0] != '/') {  // resolve now: daemonizing changes the working directory
        char cwd[PATH_MAX], *abs;
        if (!getcwd(cwd, sizeof cwd) || asprintf(&abs, "%s/%s", cwd, stats_path) < 0) {
            fprintf(stderr, "slowfs: cannot resolve --stats %s against the working directory\n", stats_path);
            return 1;
        }
        stats_path = abs;
    }

    fuse_opt_add_arg(&args, "-osubtype=slowfs,fsname=slowfs");
    fuse_opt_add_arg(&args, mountpoint);
    struct fuse_cmdline_opts opts;
    if (fuse_parse_cmdline(&args, &opts) != 0) return 2;
    if (opts.show_version) {
        printf("slowfs: FUSE library %s\n", fuse_pkgversion());
        return 0;
    }
    if (opts.show_help || !opts.mountpoint) {
        fputs(usage_text, opts.show_help ? stdout : stderr);
        return opts.show_help ? 0 : 2;
    }

    int ret = 1;
    struct fuse_session *se = fuse_session_new(&args, &sfs_ops, sizeof sfs_ops, NULL);
    if (!se) goto out_args;
    if (fuse_set_signal_handlers(se) != 0) goto out_session;
    if (fuse_session_mount(se, opts.mountpoint) != 0) {
        fprintf(stderr, "slowfs: cannot mount on %s (is /dev/fuse there, and fusermount3 installed?)\n",
                opts.mountpoint);
        goto out_signals;
    }
    fuse_daemonize(opts.foreground);

    sigset_t usr_signals;
    sigemptyset(&usr_signals);
    sigaddset(&usr_signals, SIGUSR1);
    sigaddset(&usr_signals, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &usr_signals, NULL);  // inherited by the worker threads created below
    prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us instead of 50 us, so --delay-ms 0.5 sleeps 0.5 ms; inherited too
    pthread_t signals;
    pthread_create(&signals, NULL, signal_thread, &usr_signals);

    if (opts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(config, opts.clone_fd);
        fuse_loop_cfg_set_max_threads(config, threads);
        fuse_loop_cfg_set_idle_threads(config, threads);  // keep sleepers around: thread churn would add latency
        ret = fuse_session_loop_mt(se, config);
        fuse_loop_cfg_destroy(config);
    }
    if (ret == SIGTERM || ret == SIGINT || ret == SIGHUP) ret = 0;  // asked to stop: a clean unmount
    pthread_cancel(signals);
    pthread_join(signals, NULL);
    write_stats_file();
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_args:
    free(opts.mountpoint);
    fuse_opt_free_args(&args);
    return ret ? 1 : 0;
}
