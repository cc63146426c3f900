/* PMIx client test: rank VICTIM calls PMIx_Abort(STATUS, message); the others wait in a whole-job fence that
 * only the host's teardown can end. usage: client_abort VICTIM STATUS */
#include "client_common.h"

#include <unistd.h>

int main(int argc, char **argv)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_abort: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    unsigned victim = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
    int status = argc > 2 ? atoi(argv[2]) : 42;
    if (me.rank == victim) {
        char message[128];
        usleep(200 * 1000);   /* let the others reach the fence first */
        snprintf(message, sizeof message, "client_abort: rank %u gives up on purpose", me.rank);
        rc = PMIx_Abort(status, message, NULL, 0);
        fprintf(stderr, "client_abort: rank %u: PMIx_Abort returned %s\n", me.rank, PMIx_Error_string(rc));
        return status;
    }
    fence_all(1);
    /* Only reached if the abort did not tear the job down. */
    printf("client_abort rank %u: fence completed although rank %u aborted\n", me.rank, victim);
    PMIx_Finalize(NULL, 0);
    return 3;
}
