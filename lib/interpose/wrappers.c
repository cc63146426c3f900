/* The libc wrappers: in serve mode a call is answered (serve.c) or passed through, with the original path when it
 * named the cache mirror; in record mode it is passed through and recorded (record.c). symbols.def declares and
 * so exports them. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>

#include "interpose/interposer.h"

/* Appends the call to the record in record mode; failed: it returned its error value and errno tells which. */
static void record_if(int m, enum canopy_stage_record_op op, int dirfd, const char* path, int failed)
{
    if (m == MODE_RECORD)
        record_lookup(&recording, op, dirfd, path, failed);
}

/* The body of a lookup wrapper, after its prologue (m = ENTER(name)). In serve mode `serve`, a serve_* call that
 * fills d and rc, may answer; otherwise `call` runs the real function, with pass_path(&d, path) and
 * pass_dirfd(&d, dirfd): the caller's own unless they named the cache mirror. Record mode records `op`. */
#define LOOKUP(m, type, op, dirfd, path, serve, call)                                                              \
    struct decision d;                                                                                             \
    type rc;                                                                                                       \
    d.aliased = 0;                                                                                                 \
    if ((m) == MODE_SERVE && (serve))                                                                              \
        return rc;                                                                                                 \
    rc = call;                                                                                                     \
    record_if(m, op, dirfd, path, rc < 0);                                                                         \
    return rc;

/* ---------- stat ---------- */

static enum canopy_stage_record_op stat_op(int follow)
{
    return follow ? CANOPY_STAGE_RECORD_STAT : CANOPY_STAGE_RECORD_LSTAT;
}

static int follows(int flags)
{
    return !(flags & AT_SYMLINK_NOFOLLOW);
}

int stat(const char* path, struct stat* st)
{
    int m = ENTER(stat);
    LOOKUP(m, int, stat_op(1), AT_FDCWD, path, serve_stat(&serving, AT_FDCWD, path, 1, st, NULL, &d, &rc),
           real_stat(pass_path(&d, path), st))
}

int stat64(const char* path, struct stat64* st)
{
    int m = ENTER(stat64);
    LOOKUP(m, int, stat_op(1), AT_FDCWD, path,
           serve_stat(&serving, AT_FDCWD, path, 1, (struct stat*)st, NULL, &d, &rc),
           real_stat64(pass_path(&d, path), st))
}

int lstat(const char* path, struct stat* st)
{
    int m = ENTER(lstat);
    LOOKUP(m, int, stat_op(0), AT_FDCWD, path, serve_stat(&serving, AT_FDCWD, path, 0, st, NULL, &d, &rc),
           real_lstat(pass_path(&d, path), st))
}

int lstat64(const char* path, struct stat64* st)
{
    int m = ENTER(lstat64);
    LOOKUP(m, int, stat_op(0), AT_FDCWD, path,
           serve_stat(&serving, AT_FDCWD, path, 0, (struct stat*)st, NULL, &d, &rc),
           real_lstat64(pass_path(&d, path), st))
}

int __xstat(int ver, const char* path, struct stat* st)
{
    int m = ENTER(__xstat);
    LOOKUP(m, int, stat_op(1), AT_FDCWD, path, serve_stat(&serving, AT_FDCWD, path, 1, st, NULL, &d, &rc),
           real___xstat(ver, pass_path(&d, path), st))
}

int __xstat64(int ver, const char* path, struct stat64* st)
{
    int m = ENTER(__xstat64);
    LOOKUP(m, int, stat_op(1), AT_FDCWD, path,
           serve_stat(&serving, AT_FDCWD, path, 1, (struct stat*)st, NULL, &d, &rc),
           real___xstat64(ver, pass_path(&d, path), st))
}

int __lxstat(int ver, const char* path, struct stat* st)
{
    int m = ENTER(__lxstat);
    LOOKUP(m, int, stat_op(0), AT_FDCWD, path, serve_stat(&serving, AT_FDCWD, path, 0, st, NULL, &d, &rc),
           real___lxstat(ver, pass_path(&d, path), st))
}

int __lxstat64(int ver, const char* path, struct stat64* st)
{
    int m = ENTER(__lxstat64);
    LOOKUP(m, int, stat_op(0), AT_FDCWD, path,
           serve_stat(&serving, AT_FDCWD, path, 0, (struct stat*)st, NULL, &d, &rc),
           real___lxstat64(ver, pass_path(&d, path), st))
}

/* The stat of a descriptor (the real call's rc): reported as the original file's when it was opened from the
 * cache. */
static int fd_stat_answer(int m, int rc, int fd, struct stat* st, struct statx* sx)
{
    if (rc == 0 && m == MODE_SERVE)
        serve_fd_stat(&serving, fd, st, sx);
    return rc;
}

/* AT_EMPTY_PATH with "" stats dirfd itself. */
static int names_dirfd(const char* path, int flags)
{
    return path && !*path && (flags & AT_EMPTY_PATH);
}

int fstatat(int dirfd, const char* path, struct stat* st, int flags)
{
    int m = ENTER(fstatat);
    if (names_dirfd(path, flags))
        return fd_stat_answer(m, real_fstatat(dirfd, path, st, flags), dirfd, st, NULL);
    LOOKUP(m, int, stat_op(follows(flags)), dirfd, path,
           serve_stat(&serving, dirfd, path, follows(flags), st, NULL, &d, &rc),
           real_fstatat(pass_dirfd(&d, dirfd), pass_path(&d, path), st, flags))
}

int fstatat64(int dirfd, const char* path, struct stat64* st, int flags)
{
    int m = ENTER(fstatat64);
    if (names_dirfd(path, flags))
        return fd_stat_answer(m, real_fstatat64(dirfd, path, st, flags), dirfd, (struct stat*)st, NULL);
    LOOKUP(m, int, stat_op(follows(flags)), dirfd, path,
           serve_stat(&serving, dirfd, path, follows(flags), (struct stat*)st, NULL, &d, &rc),
           real_fstatat64(pass_dirfd(&d, dirfd), pass_path(&d, path), st, flags))
}

int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* sx)
{
    int m = ENTER(statx);
    if (names_dirfd(path, flags))
        return fd_stat_answer(m, real_statx(dirfd, path, flags, mask, sx), dirfd, NULL, sx);
    LOOKUP(m, int, stat_op(follows(flags)), dirfd, path,
           serve_stat(&serving, dirfd, path, follows(flags), NULL, sx, &d, &rc),
           real_statx(pass_dirfd(&d, dirfd), pass_path(&d, path), flags, mask, sx))
}

/* The pre-2.33 form, without the AT_EMPTY_PATH patch (an empty path is neither served nor recorded). */
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags)
{
    int m = ENTER(__fxstatat);
    LOOKUP(m, int, stat_op(follows(flags)), dirfd, path,
           serve_stat(&serving, dirfd, path, follows(flags), st, NULL, &d, &rc),
           real___fxstatat(ver, pass_dirfd(&d, dirfd), pass_path(&d, path), st, flags))
}

int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags)
{
    return __fxstatat(ver, dirfd, path, (struct stat*)st, flags);
}

int fstat(int fd, struct stat* st)
{
    int m = ENTER(fstat);
    return fd_stat_answer(m, real_fstat(fd, st), fd, st, NULL);
}

int fstat64(int fd, struct stat64* st)
{
    int m = ENTER(fstat64);
    return fd_stat_answer(m, real_fstat64(fd, st), fd, (struct stat*)st, NULL);
}

int __fxstat(int ver, int fd, struct stat* st)
{
    int m = ENTER(__fxstat);
    return fd_stat_answer(m, real___fxstat(ver, fd, st), fd, st, NULL);
}

int __fxstat64(int ver, int fd, struct stat64* st)
{
    int m = ENTER(__fxstat64);
    return fd_stat_answer(m, real___fxstat64(ver, fd, st), fd, (struct stat*)st, NULL);
}

/* ---------- access, readlink ---------- */

int access(const char* path, int amode)
{
    int m = ENTER(access);
    LOOKUP(m, int, CANOPY_STAGE_RECORD_ACCESS, AT_FDCWD, path, serve_access(&serving, AT_FDCWD, path, amode, 0, &d, &rc),
           real_access(pass_path(&d, path), amode))
}

int faccessat(int dirfd, const char* path, int amode, int flags)
{
    int m = ENTER(faccessat);
    LOOKUP(m, int, CANOPY_STAGE_RECORD_ACCESS, dirfd, path, serve_access(&serving, dirfd, path, amode, flags, &d, &rc),
           real_faccessat(pass_dirfd(&d, dirfd), pass_path(&d, path), amode, flags))
}

ssize_t readlink(const char* path, char* buf, size_t size)
{
    int m = ENTER(readlink);
    LOOKUP(m, ssize_t, CANOPY_STAGE_RECORD_READLINK, AT_FDCWD, path, serve_readlink(&serving, AT_FDCWD, path, buf, size, &d, &rc),
           real_readlink(pass_path(&d, path), buf, size))
}

ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t size)
{
    int m = ENTER(readlinkat);
    LOOKUP(m, ssize_t, CANOPY_STAGE_RECORD_READLINK, dirfd, path, serve_readlink(&serving, dirfd, path, buf, size, &d, &rc),
           real_readlinkat(pass_dirfd(&d, dirfd), pass_path(&d, path), buf, size))
}

/* ---------- open ---------- */

static enum canopy_stage_record_op open_op(int flags)
{
    return is_write_open(flags)      ? CANOPY_STAGE_RECORD_WRITE
           : (flags & O_DIRECTORY) ? CANOPY_STAGE_RECORD_OPENDIR
                                   : CANOPY_STAGE_RECORD_OPEN;
}

/* The mode argument of open and its twins, there only when the flags create a file. A statement expression:
 * va_start needs the variadic function's own frame. */
#define MODE_ARGUMENT(flags)                                                                                       \
    ({                                                                                                             \
        mode_t mode_ = 0;                                                                                          \
        if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {                                           \
            va_list ap;                                                                                            \
            va_start(ap, flags);                                                                                   \
            mode_ = (mode_t)va_arg(ap, int);                                                                       \
            va_end(ap);                                                                                            \
        }                                                                                                          \
        mode_;                                                                                                     \
    })

int open(const char* path, int flags, ...)
{
    mode_t md = MODE_ARGUMENT(flags);
    int m = ENTER(open);
    LOOKUP(m, int, open_op(flags), AT_FDCWD, path, serve_open(&serving, AT_FDCWD, path, flags, &d, &rc),
           real_open(pass_path(&d, path), flags, md))
}

int open64(const char* path, int flags, ...)
{
    mode_t md = MODE_ARGUMENT(flags);
    int m = ENTER(open64);
    LOOKUP(m, int, open_op(flags), AT_FDCWD, path, serve_open(&serving, AT_FDCWD, path, flags, &d, &rc),
           real_open64(pass_path(&d, path), flags, md))
}

int openat(int dirfd, const char* path, int flags, ...)
{
    mode_t md = MODE_ARGUMENT(flags);
    int m = ENTER(openat);
    LOOKUP(m, int, open_op(flags), dirfd, path, serve_open(&serving, dirfd, path, flags, &d, &rc),
           real_openat(pass_dirfd(&d, dirfd), pass_path(&d, path), flags, md))
}

int openat64(int dirfd, const char* path, int flags, ...)
{
    mode_t md = MODE_ARGUMENT(flags);
    int m = ENTER(openat64);
    LOOKUP(m, int, open_op(flags), dirfd, path, serve_open(&serving, dirfd, path, flags, &d, &rc),
           real_openat64(pass_dirfd(&d, dirfd), pass_path(&d, path), flags, md))
}

/* _FORTIFY_SOURCE forms (Python calls __open64_2): the same decision, the real one keeps its checks. */
int __open_2(const char* path, int flags)
{
    int m = ENTER(__open_2);
    LOOKUP(m, int, open_op(flags), AT_FDCWD, path, serve_open(&serving, AT_FDCWD, path, flags, &d, &rc),
           real___open_2(pass_path(&d, path), flags))
}

int __open64_2(const char* path, int flags)
{
    int m = ENTER(__open64_2);
    LOOKUP(m, int, open_op(flags), AT_FDCWD, path, serve_open(&serving, AT_FDCWD, path, flags, &d, &rc),
           real___open64_2(pass_path(&d, path), flags))
}

int __openat_2(int dirfd, const char* path, int flags)
{
    int m = ENTER(__openat_2);
    LOOKUP(m, int, open_op(flags), dirfd, path, serve_open(&serving, dirfd, path, flags, &d, &rc),
           real___openat_2(pass_dirfd(&d, dirfd), pass_path(&d, path), flags))
}

int __openat64_2(int dirfd, const char* path, int flags)
{
    int m = ENTER(__openat64_2);
    LOOKUP(m, int, open_op(flags), dirfd, path, serve_open(&serving, dirfd, path, flags, &d, &rc),
           real___openat64_2(pass_dirfd(&d, dirfd), pass_path(&d, path), flags))
}

static int fopen_writes(const char* fmode)
{
    return fmode && (strchr(fmode, 'w') || strchr(fmode, 'a') || strchr(fmode, '+'));
}

/* A stream's open: -1 it fails as answered (errno set), 0 the real function opens pass_path(d, path), 1 it opens
 * `target` (PMAX bytes), the cache copy or skeleton, first. */
static int stream_lookup(int m, const char* path, int writes, int want, struct decision* d, char* target)
{
    d->aliased = 0;
    if (m != MODE_SERVE)
        return 0;
    if (writes) {
        serve_changed(&serving, AT_FDCWD, path);
        return 0;
    }
    return open_lookup(&serving, AT_FDCWD, path, 1, want, d, target);
}

/* fopen and fopen64, with the real one of the two. */
static FILE* open_file_stream(int m, FILE* (*real)(const char*, const char*), const char* path, const char* fmode)
{
    struct decision d;
    char target[PMAX];
    int r = stream_lookup(m, path, fopen_writes(fmode), WANT_FILE, &d, target);
    if (r < 0)
        return NULL;
    FILE* f = r > 0 ? real(target, fmode) : NULL; /* NULL: the copy is not there (yet) */
    if (!f)
        f = real(pass_path(&d, path), fmode);
    record_if(m, fopen_writes(fmode) ? CANOPY_STAGE_RECORD_WRITE : CANOPY_STAGE_RECORD_OPEN, AT_FDCWD, path,
              !f);
    return f;
}

FILE* fopen(const char* path, const char* fmode)
{
    int m = ENTER(fopen);
    return open_file_stream(m, real_fopen, path, fmode);
}

FILE* fopen64(const char* path, const char* fmode)
{
    int m = ENTER(fopen64);
    return open_file_stream(m, real_fopen64, path, fmode);
}

DIR* opendir(const char* path)
{
    int m = ENTER(opendir);
    struct decision d;
    char target[PMAX];
    int r = stream_lookup(m, path, 0, WANT_DIR, &d, target);
    if (r < 0)
        return NULL;
    DIR* dir = r > 0 ? real_opendir(target) : NULL; /* NULL: the skeleton is not there (yet) */
    if (!dir)
        dir = real_opendir(pass_path(&d, path));
    record_if(m, CANOPY_STAGE_RECORD_OPENDIR, AT_FDCWD, path, !dir);
    return dir;
}

/* glibc's realpath calls its internal lstat and readlink, which no wrapper sees, so it is wrapped as a whole. */
char* realpath(const char* path, char* resolved)
{
    int m = ENTER(realpath);
    struct decision d;
    char* out;
    d.aliased = 0;
    if (m == MODE_SERVE && path && serve_realpath(&serving, path, resolved, &d, &out))
        return out;
    out = real_realpath(pass_path(&d, path), resolved);
    if (path)
        record_if(m, CANOPY_STAGE_RECORD_STAT, AT_FDCWD, path, !out);
    return out;
}

/* ---------- changes under a prefix: done on the real filesystem, remembered in serve mode ---------- */

static void changing(int m, int dirfd, const char* path)
{
    if (m == MODE_SERVE)
        serve_changed(&serving, dirfd, path);
}

int mkdir(const char* path, mode_t md)
{
    changing(ENTER(mkdir), AT_FDCWD, path);
    return real_mkdir(path, md);
}

int mkdirat(int dirfd, const char* path, mode_t md)
{
    changing(ENTER(mkdirat), dirfd, path);
    return real_mkdirat(dirfd, path, md);
}

int unlink(const char* path)
{
    changing(ENTER(unlink), AT_FDCWD, path);
    return real_unlink(path);
}

int unlinkat(int dirfd, const char* path, int flags)
{
    changing(ENTER(unlinkat), dirfd, path);
    return real_unlinkat(dirfd, path, flags);
}

int rmdir(const char* path)
{
    changing(ENTER(rmdir), AT_FDCWD, path);
    return real_rmdir(path);
}

int rename(const char* from, const char* to)
{
    int m = ENTER(rename);
    changing(m, AT_FDCWD, from);
    changing(m, AT_FDCWD, to);
    return real_rename(from, to);
}

int renameat(int from_dirfd, const char* from, int to_dirfd, const char* to)
{
    int m = ENTER(renameat);
    changing(m, from_dirfd, from);
    changing(m, to_dirfd, to);
    return real_renameat(from_dirfd, from, to_dirfd, to);
}

int renameat2(int from_dirfd, const char* from, int to_dirfd, const char* to, unsigned flags)
{
    int m = ENTER(renameat2);
    changing(m, from_dirfd, from);
    changing(m, to_dirfd, to);
    return real_renameat2(from_dirfd, from, to_dirfd, to, flags);
}
