/* A PMIx rank of the fault campaign: after PMIx_Init it marks "fence", and rank 0 enters the fence a second
 * late, so the other ranks are inside PMIx_Fence when the fault comes.
 * usage: fence_rank DIR SECONDS   (SECONDS: how long it runs after the fence) */
#include <pmix.h>

#include "phase_marks.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fence_rank DIR SECONDS\n");
        return 2;
    }
    const char *dir = argv[1];
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_rank: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    mark_phase(dir, "fence");
    if (me.rank == 0)
        sleep(1);
    pmix_info_t collect;
    bool yes = true;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    rc = PMIx_Fence(NULL, 0, &collect, 1);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_rank %u: PMIx_Fence: %s\n", me.rank, PMIx_Error_string(rc));
        return 1;
    }
    mark_phase(dir, "run");
    usleep((useconds_t)(atof(argv[2]) * 1e6));
    mark_phase(dir, "done");
    PMIx_Finalize(NULL, 0);
    return 0;
}
