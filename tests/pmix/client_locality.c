/* PMIx client test: what PMIx says of this rank's place on its node, as Open MPI reads it.
 * Prints "locality rank R cpuset CPUSET locality STRING", with "-" for a key PMIx does not have. */
#include "client_common.h"

static const char *string_of(const char *key)
{
    pmix_value_t *val = NULL;
    if (PMIx_Get(&me, key, NULL, 0, &val) != PMIX_SUCCESS || val->type != PMIX_STRING)
        return "-";
    return val->data.string;   /* kept until exit */
}

int main(void)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    printf("locality rank %u cpuset %s locality %s\n", me.rank, string_of(PMIX_CPUSET), string_of(PMIX_LOCALITY_STRING));
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 0;
}
