/* access(2)'s answer from an index record's mode and owner, without the filesystem. Shared by the interposer (a
 * rank's access() under a prefix) and canopyd (its check of the ranks' program on a staged node). */
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "stage/index_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whoever asks access(2): the ids whose permission bits apply. */
struct canopy_stage_caller {
    uid_t uid;
    gid_t gid;
    const gid_t* groups; /* supplementary groups */
    int group_count;
};

/* Whether access(2) with amode (R_OK, X_OK, F_OK) succeeds on s for who; W_OK is never asked here. */
static inline int canopy_stage_permitted(const struct canopy_stage_stat* s, int amode,
                                         const struct canopy_stage_caller* who)
{
    if (amode == F_OK)
        return 1;
    if (who->uid == 0)
        return !(amode & X_OK) || S_ISDIR(s->mode) || (s->mode & 0111);
    unsigned bits;
    if (who->uid == s->uid) {
        bits = (s->mode >> 6) & 7;
    } else {
        int member = who->gid == s->gid;
        for (int i = 0; i < who->group_count && !member; ++i)
            member = who->groups[i] == s->gid;
        bits = member ? (s->mode >> 3) & 7 : s->mode & 7;
    }
    return ((amode & R_OK) ? (bits & 4) != 0 : 1) && ((amode & X_OK) ? (bits & 1) != 0 : 1);
}

#ifdef __cplusplus
}
#endif
