/* The loader's hooks (LD_AUDIT): the loader's probes for libraries under a prefix go to the cache copy. */
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/counters.h"
#include "interpose/interposer.h"
#include "interpose/raw_io.h"

EXPORT unsigned int la_version(unsigned int version)
{
    note_audit_namespace();
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
    int m = current_mode();
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
