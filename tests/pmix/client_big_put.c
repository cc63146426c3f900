/* PMIx client test: a rank that stores a lot through PMIx, to meet the job's limit per rank (docs/pmix.md,
 * "What a rank may store").
 * usage: client_big_put put|publish MIB [TIMES]
 *   put      PMIx_Put one value of MIB MiB (PMIX_GLOBAL), PMIx_Commit, then PMIx_Fence collecting data
 *   publish  PMIx_Publish a value of MIB MiB, TIMES times (default 1) under keys of its own
 * A call that fails is printed, and the rank then waits 60 s rather than exit: it is the job's end that must end it.
 * Everything having worked, it prints "big_put rank R: stored N MiB" and finalizes. */
#include "client_common.h"

#include <stdint.h>
#include <unistd.h>

static void wait_for_the_end(const char *what, pmix_status_t rc)
{
    printf("big_put rank %u: %s failed: %s\n", me.rank, what, PMIx_Error_string(rc));
    fflush(stdout);
    sleep(60);
    exit(3);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: client_big_put put|publish MIB [TIMES]\n");
        return 2;
    }
    int publish = strcmp(argv[1], "publish") == 0;
    size_t bytes = (size_t)strtoul(argv[2], NULL, 10) << 20;
    int times = argc > 3 ? atoi(argv[3]) : 1;

    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = malloc(bytes);
    value.data.bo.size = bytes;
    memset(value.data.bo.bytes, 'x', bytes);

    if (publish) {
        for (int i = 0; i < times; ++i) {
            pmix_info_t info;
            char key[64];
            snprintf(key, sizeof key, "big-%u-%d", me.rank, i);
            PMIX_INFO_CONSTRUCT(&info);
            PMIX_LOAD_KEY(info.key, key);
            info.value = value;   /* borrowed: the info must not free it */
            if ((rc = PMIx_Publish(&info, 1)) != PMIX_SUCCESS)
                wait_for_the_end("PMIx_Publish", rc);
        }
        PMIX_VALUE_DESTRUCT(&value);
        bytes *= (size_t)times;
    } else {
        if ((rc = PMIx_Put(PMIX_GLOBAL, "big", &value)) != PMIX_SUCCESS)
            wait_for_the_end("PMIx_Put", rc);
        PMIX_VALUE_DESTRUCT(&value);
        if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
            wait_for_the_end("PMIx_Commit", rc);
        pmix_proc_t all;
        pmix_info_t info;
        bool collect = true;
        PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        rc = PMIx_Fence(&all, 1, &info, 1);
        PMIX_INFO_DESTRUCT(&info);
        if (rc != PMIX_SUCCESS)
            wait_for_the_end("PMIx_Fence", rc);
    }
    printf("big_put rank %u: stored %zu MiB\n", me.rank, bytes >> 20);
    fflush(stdout);
    return finish("big_put");
}
