/* The loader's hooks (LD_AUDIT): the loader's probes for libraries under a prefix go to the cache copy. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/counters.h"
#include "interpose/interposer.h"
#include "interpose/raw_io.h"
#include "stage/loader_subdirs.h"

/* The loader searches LD_LIBRARY_PATH for a bare name (libm.so.6) through every hwcaps subdirectory of every
 * directory, and stats each subdirectory it finds no library in, itself: la_objsearch sees the names it tries,
 * not those stats. With LD_LIBRARY_PATH on the shared filesystem that is about a dozen metadata operations per
 * directory in every rank. So a bare name is answered before the search, when the cache makes the answer certain
 * (library_path_answer below); otherwise the loader searches as always. */
enum { MAX_LIBRARY_DIRS = 64 };
enum dir_state { DIR_UNCHECKED = 0, DIR_PLAIN, DIR_UNSURE };

static struct {
    int usable;                          /* LD_LIBRARY_PATH parsed, every entry a plain absolute directory */
    int some_rpath;                      /* an object other than ours has DT_RPATH, searched before LD_LIBRARY_PATH */
    int count;
    const char* dirs[MAX_LIBRARY_DIRS];  /* into `copy` */
    enum dir_state state[MAX_LIBRARY_DIRS];
    char copy[PMAX];
    char own_name[PMAX];                 /* this library's path: its own DT_RPATH is for its own libc only */
} library_path;

/* What the loader will search: LD_LIBRARY_PATH as the process started (the loader read it then). Anything this
 * code does not model (an empty or relative entry, a $ORIGIN-style token, too many entries, secure mode) leaves
 * the search to the loader. */
static void read_library_path(void)
{
    Dl_info self;
    if (dladdr((void*)la_objsearch, &self) && self.dli_fname)
        copy_str(library_path.own_name, sizeof library_path.own_name, self.dli_fname);
    const char* value = getenv("LD_LIBRARY_PATH");
    if (!CANOPY_LOADER_SUBDIRS_KNOWN || getauxval(AT_SECURE) || !value || !*value ||
        copy_str(library_path.copy, sizeof library_path.copy, value) == (size_t)-1)
        return;
    for (char* entry = library_path.copy; entry;) {
        char* end = strpbrk(entry, ":;");
        if (end)
            *end++ = '\0';
        if (entry[0] != '/' || strchr(entry, '$') || library_path.count == MAX_LIBRARY_DIRS)
            return;
        library_path.dirs[library_path.count++] = entry;
        entry = end;
    }
    library_path.usable = 1;
}

static int join_path(char* out, const char* dir, const char* name)
{
    int n = snprintf(out, PMAX, "%s/%s", dir, name);
    return n > 0 && n < PMAX ? 0 : -1;
}

/* Whether the cache knows that `path` does not exist (ENOENT or ENOTDIR as the answer). */
static int known_missing(const char* path)
{
    struct decision d;
    int rc = 0;
    errno = 0;
    return serve_stat(&serving, AT_FDCWD, path, 1, NULL, NULL, &d, &rc) && rc == -1 &&
           (errno == ENOENT || errno == ENOTDIR);
}

/* A search directory is plain when the cache knows none of the loader's subdirectories are in it: then the loader
 * would try `dir/name` first there, and the cache's answer for it is the loader's. */
static int plain_directory(int i)
{
    if (library_path.state[i] != DIR_UNCHECKED)
        return library_path.state[i] == DIR_PLAIN;
    library_path.state[i] = DIR_UNSURE;
#if CANOPY_LOADER_SUBDIRS_KNOWN
    char path[PMAX];
    const char* platform = (const char*)getauxval(AT_PLATFORM);
    size_t n = sizeof canopy_loader_subdirs / sizeof canopy_loader_subdirs[0];
    for (size_t k = 0; k <= n; ++k) {
        const char* sub = k < n ? canopy_loader_subdirs[k] : platform;
        if (!sub || !*sub)
            continue;
        if (join_path(path, library_path.dirs[i], sub) != 0 || !known_missing(path))
            return 0;
    }
    library_path.state[i] = DIR_PLAIN;
#endif
    return library_path.state[i] == DIR_PLAIN;
}

/* The cache copy of the library the loader would find for `name` along LD_LIBRARY_PATH, or NULL to let it search:
 * each directory in order must be under a prefix and plain, until one holds `name`. */
static char* library_path_answer(const char* name, char* result)
{
    if (!library_path.usable || library_path.some_rpath)
        return NULL;
    char path[PMAX];
    for (int i = 0; i < library_path.count; ++i) {
        if (!plain_directory(i) || join_path(path, library_path.dirs[i], name) != 0)
            return NULL;
        struct decision d;
        int r = open_lookup(&serving, AT_FDCWD, path, 1, WANT_FILE, &d, result);
        struct stat copy;
        if (r > 0)   /* the copy, when it is a file; anything else here the loader handles as always */
            return syscall(SYS_newfstatat, AT_FDCWD, result, &copy, 0) == 0 && S_ISREG(copy.st_mode) ? result : NULL;
        if (r == 0 || !(errno == ENOENT || errno == ENOTDIR))
            return NULL;   /* not known here, or there but unreadable: the loader decides */
    }
    return NULL;
}

EXPORT unsigned int la_version(unsigned int version)
{
    note_audit_namespace();
    read_library_path();
    /* Answer with the version we were built for, never more than the loader offers (0 would unload us). */
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

EXPORT unsigned int la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie)
{
    (void)lmid;
    (void)cookie;
    /* An object's DT_RPATH is searched before LD_LIBRARY_PATH for its own dependencies, and for those of the
     * objects it loads. Tracked for all objects alike: with any, the loader searches by itself. */
    if (map->l_name && strcmp(map->l_name, library_path.own_name) == 0)
        return 0;
    for (const ElfW(Dyn)* dyn = map->l_ld; dyn && dyn->d_tag != DT_NULL; ++dyn)
        if (dyn->d_tag == DT_RPATH)
            library_path.some_rpath = 1;
    return 0; /* no symbol bindings to audit */
}

EXPORT char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag)
{
    (void)cookie;
    /* The loader holds its lock around searches, so one buffer is enough; it copies the name it keeps. */
    static char result[PMAX];
    if (!name)
        return (char*)name;
    int m = current_mode();
    if (!strchr(name, '/')) {
        if (m != MODE_SERVE || flag != LA_SER_ORIG)
            return (char*)name;
        char* answer = library_path_answer(name, result);
        if (answer)
            COUNT(loader_named);
        return answer ? answer : (char*)name;
    }
    /* A path: absolute, or relative to the working directory (a relative LD_LIBRARY_PATH or RUNPATH entry,
     * dlopen("./lib.so")), which the lookups below resolve as the kernel would. */
    if (m == MODE_RECORD) {
        record_lookup(&recording, CANOPY_STAGE_RECORD_LOAD, AT_FDCWD, name, 0);
        return (char*)name;
    }
    if (m != MODE_SERVE)
        return (char*)name;
    struct decision d;
    int r = open_lookup(&serving, AT_FDCWD, name, 1, WANT_FILE, &d, result);
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
