/* PMIx client test: the calls canopy does not serve must come back at once with an error, never hang a rank.
 * Each rank makes every call in turn and prints "client_unserved rank R: CALL -> STATUS in MS ms". A call that
 * hangs is caught by the test's deadline. usage: client_unserved */
#include "client_common.h"

#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void report(const char *call, pmix_status_t rc, double started)
{
    printf("client_unserved rank %u: %s -> %s in %.0f ms\n", me.rank, call, PMIx_Error_string(rc), now_ms() - started);
    fflush(stdout);
}

int main(void)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_unserved: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_info_t *results = NULL;
    size_t nresults = 0;
    pmix_info_t info;
    double t;

    t = now_ms();
    uint64_t nodes = 1;
    PMIX_INFO_LOAD(&info, PMIX_ALLOC_NUM_NODES, &nodes, PMIX_UINT64);
    rc = PMIx_Allocation_request(PMIX_ALLOC_NEW, &info, 1, &results, &nresults);
    report("PMIx_Allocation_request", rc, t);

    t = now_ms();
    bool yes = true;
    PMIX_INFO_LOAD(&info, PMIX_JOB_CTRL_PAUSE, &yes, PMIX_BOOL);
    rc = PMIx_Job_control(NULL, 0, &info, 1, &results, &nresults);
    report("PMIx_Job_control(pause)", rc, t);

    t = now_ms();
    PMIX_INFO_LOAD(&info, "canopy.test.monitor", &yes, PMIX_BOOL);
    rc = PMIx_Process_monitor(&info, PMIX_MONITOR_HEARTBEAT_ALERT, NULL, 0, &results, &nresults);
    report("PMIx_Process_monitor", rc, t);

    t = now_ms();
    pmix_byte_object_t credential = {NULL, 0};
    rc = PMIx_Get_credential(NULL, 0, &credential);
    report("PMIx_Get_credential", rc, t);

    t = now_ms();
    char bytes[] = "not a credential";
    pmix_byte_object_t forged = {bytes, sizeof bytes};
    rc = PMIx_Validate_credential(&forged, NULL, 0, &results, &nresults);
    report("PMIx_Validate_credential", rc, t);

    t = now_ms();
    PMIX_INFO_LOAD(&info, PMIX_LOG_EMAIL, "nobody@example.invalid", PMIX_STRING);
    rc = PMIx_Log(&info, 1, NULL, 0);
    report("PMIx_Log(email)", rc, t);

    t = now_ms();
    pmix_query_t query;
    PMIX_QUERY_CONSTRUCT(&query);
    char *keys[] = {"canopy.no.such.key", NULL};
    query.keys = keys;
    rc = PMIx_Query_info(&query, 1, &results, &nresults);
    report("PMIx_Query_info(unknown key)", rc, t);
    query.keys = NULL;

    t = now_ms();
    pmix_proc_t everyone;
    PMIX_LOAD_PROCID(&everyone, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Group_construct("canopy-test-group", &everyone, 1, NULL, 0, &results, &nresults);
    report("PMIx_Group_construct", rc, t);

    t = now_ms();
    rc = PMIx_Notify_event(PMIX_EXTERNAL_ERR_BASE - 1, &me, PMIX_RANGE_GLOBAL, NULL, 0, NULL, NULL);
    report("PMIx_Notify_event(global)", rc, t);

    PMIx_Finalize(NULL, 0);
    return 0;
}
