/* PMIx client test of what canopy serves beyond fences: PMIx_Connect and PMIx_Disconnect over the whole job (as a
 * wildcard and as every rank listed), over the even ranks only, PMIx_Query_info for the namespaces, and PMIx_Log
 * to stderr. usage: client_dynamic */
#include "client_common.h"

static void connect_and_disconnect(const pmix_proc_t *procs, size_t nprocs, const char *what)
{
    pmix_status_t rc = PMIx_Connect(procs, nprocs, NULL, 0);
    CHECK(rc == PMIX_SUCCESS, "PMIx_Connect(%s): %s", what, PMIx_Error_string(rc));
    rc = PMIx_Disconnect(procs, nprocs, NULL, 0);
    CHECK(rc == PMIX_SUCCESS, "PMIx_Disconnect(%s): %s", what, PMIx_Error_string(rc));
}

int main(void)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_dynamic: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_value_t *size_value = get_typed(PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, PMIX_UINT32, NULL, 0);
    uint32_t size = size_value ? size_value->data.uint32 : 0;

    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    connect_and_disconnect(&all, 1, "the job, as a wildcard");

    pmix_proc_t *listed;
    PMIX_PROC_CREATE(listed, size);
    for (uint32_t r = 0; r < size; ++r)
        PMIX_LOAD_PROCID(&listed[r], me.nspace, r);
    connect_and_disconnect(listed, size, "every rank listed");
    size_t even = 0;
    for (uint32_t r = 0; r < size; r += 2, ++even)
        PMIX_LOAD_PROCID(&listed[even], me.nspace, r);   /* a macro: its arguments may be evaluated twice */
    if (me.rank % 2 == 0)
        connect_and_disconnect(listed, even, "the even ranks");
    PMIX_PROC_FREE(listed, size);

    pmix_query_t query;
    PMIX_QUERY_CONSTRUCT(&query);
    char *keys[] = {PMIX_QUERY_NAMESPACES, NULL};
    query.keys = keys;
    pmix_info_t *results = NULL;
    size_t nresults = 0;
    rc = PMIx_Query_info(&query, 1, &results, &nresults);
    CHECK(rc == PMIX_SUCCESS && nresults == 1 && results[0].value.type == PMIX_STRING &&
              strcmp(results[0].value.data.string, me.nspace) == 0,
          "PMIx_Query_info(namespaces): %s, %zu results", PMIx_Error_string(rc), nresults);
    query.keys = NULL;

    char line[128];
    snprintf(line, sizeof line, "client_dynamic rank %u logs to stderr through PMIx_Log", me.rank);
    pmix_info_t entry;
    PMIX_INFO_LOAD(&entry, PMIX_LOG_STDERR, line, PMIX_STRING);
    rc = PMIx_Log(&entry, 1, NULL, 0);
    CHECK_RC(rc, "PMIx_Log(stderr)");
    PMIX_INFO_DESTRUCT(&entry);

    fence_all(0);
    printf("client_dynamic rank %u of %u: %d checks, %d failed\n", me.rank, size, checks, failures);
    return finish("client_dynamic");
}
