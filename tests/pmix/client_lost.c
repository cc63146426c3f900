/* PMIx client test: rank VICTIM leaves without PMIx_Finalize (MODE "exit": exit 0 after PMIx_Init; "early":
 * exit 0 before PMIx_Init; "kill": SIGKILL itself after PMIx_Init) while the others wait in a whole-job fence,
 * or with WAIT "connect" in a PMIx_Connect over every rank. The host must turn the loss into an abort so nothing
 * hangs. usage: client_lost VICTIM MODE [fence|connect] */
#include "client_common.h"

#include <signal.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    unsigned victim = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
    const char *mode = argc > 2 ? argv[2] : "exit";
    int in_connect = argc > 3 && strcmp(argv[3], "connect") == 0;
    const char *rank_env = getenv("PMIX_RANK");
    if (strcmp(mode, "early") == 0 && rank_env && (unsigned)atoi(rank_env) == victim)
        return 0;   /* never connects to the PMIx server */
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_lost: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (me.rank == victim) {
        usleep(300 * 1000);   /* the others are in the fence by now */
        if (strcmp(mode, "kill") == 0)
            raise(SIGKILL);
        _exit(0);
    }
    if (strcmp(mode, "early") == 0)
        usleep(300 * 1000);
    if (in_connect) {
        pmix_proc_t all;
        PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
        pmix_status_t connected = PMIx_Connect(&all, 1, NULL, 0);
        printf("client_lost rank %u: connect returned %s although rank %u is gone\n", me.rank,
               PMIx_Error_string(connected), victim);
        PMIx_Finalize(NULL, 0);
        return 3;
    }
    fence_all(1);
    printf("client_lost rank %u: fence returned although rank %u is gone\n", me.rank, victim);
    PMIx_Finalize(NULL, 0);
    return 3;
}
