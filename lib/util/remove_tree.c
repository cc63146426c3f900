#include "util/remove_tree.h"

#include <dirent.h>
#include <errno.h>   /* the constants only: canopy_sys returns -errno */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include "util/raw_syscall.h"

struct dirent64_record {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

static long str(const char* text) { return (long)text; }

/* Keeps the first failure; something already gone is not one. */
static void note(int* first_error, long result)
{
    if (result < 0 && result != -ENOENT && *first_error == 0)
        *first_error = (int)result;
}

/* Empties the open directory `dir`, depth first. Entries removed while we read may shift the rest, so it reads
   again until a pass removes nothing. */
static void remove_contents(int dir, int depth, int* first_error)
{
    _Alignas(8) char buffer[4096];
    canopy_sys(SYS_fchmod, dir, 0700, 0, 0);
    for (int removed = 1; removed;) {
        removed = 0;
        canopy_sys(SYS_lseek, dir, 0, 0 /* SEEK_SET */, 0);
        long got;
        while ((got = canopy_sys(SYS_getdents64, dir, (long)buffer, sizeof buffer, 0)) > 0) {
            for (long offset = 0; offset < got;) {
                struct dirent64_record* entry = (struct dirent64_record*)(buffer + offset);
                offset += entry->reclen;
                const char* name = entry->name;
                if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
                    continue;
                int is_dir = entry->type == DT_DIR;
                if (entry->type == DT_UNKNOWN) {
                    struct stat info;
                    is_dir = canopy_sys(SYS_newfstatat, dir, str(name), (long)&info, AT_SYMLINK_NOFOLLOW) == 0 &&
                             S_ISDIR(info.st_mode);
                }
                if (is_dir && depth < CANOPY_REMOVE_TREE_MAX_DEPTH) {
                    long sub =
                        canopy_sys(SYS_openat, dir, str(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
                    if (sub >= 0) {
                        remove_contents((int)sub, depth + 1, first_error);
                        canopy_sys(SYS_close, sub, 0, 0, 0);
                    }
                }
                long unlinked = canopy_sys(SYS_unlinkat, dir, str(name), is_dir ? AT_REMOVEDIR : 0, 0);
                if (unlinked == 0)
                    removed = 1;
                note(first_error, unlinked);
            }
        }
    }
}

int canopy_remove_tree(const char* path)
{
    int first_error = 0;
    long dir = canopy_sys(SYS_openat, AT_FDCWD, str(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (dir == -ENOTDIR || dir == -ELOOP) {   /* a file, a socket or a symlink: removed itself */
        note(&first_error, canopy_sys(SYS_unlinkat, AT_FDCWD, str(path), 0, 0));
        return first_error;
    }
    if (dir == -ENOENT)
        return 0;
    if (dir < 0)
        return (int)dir;
    remove_contents((int)dir, 0, &first_error);
    canopy_sys(SYS_close, dir, 0, 0, 0);
    note(&first_error, canopy_sys(SYS_unlinkat, AT_FDCWD, str(path), AT_REMOVEDIR, 0));
    return first_error;
}
