/* LD_PRELOAD shim for the security tests: getuid, geteuid, getgid and getegid return CANOPY_FAKE_UID and
 * CANOPY_FAKE_GID, so that a PMIx client run by one user claims to be another, as an attacker's would. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/types.h>

static unsigned claimed(const char *name)
{
    const char *value = getenv(name);
    return value ? (unsigned)strtoul(value, NULL, 10) : 0;
}

uid_t getuid(void) { return claimed("CANOPY_FAKE_UID"); }
uid_t geteuid(void) { return claimed("CANOPY_FAKE_UID"); }
gid_t getgid(void) { return claimed("CANOPY_FAKE_GID"); }
gid_t getegid(void) { return claimed("CANOPY_FAKE_GID"); }
