/* PMIx client test of PMIx_Spawn: rank 0 spawns COUNT copies of this program; each child finds its parent
 * through PMIX_PARENT_ID, and parent and children PMIx_Connect across the two namespaces, then fence over both.
 * usage: client_spawn COUNT */
#include "client_common.h"

static int run_child(void)
{
    pmix_value_t *parent = get_typed(PMIX_RANK_WILDCARD, PMIX_PARENT_ID, PMIX_PROC, NULL, 0);
    if (!parent)
        return finish("client_spawn child");
    pmix_proc_t procs[2];
    PMIX_LOAD_PROCID(&procs[0], parent->data.proc->nspace, parent->data.proc->rank);
    PMIX_LOAD_PROCID(&procs[1], me.nspace, PMIX_RANK_WILDCARD);
    pmix_status_t rc = PMIx_Connect(procs, 2, NULL, 0);
    CHECK_RC(rc, "child PMIx_Connect with the parent");
    rc = PMIx_Fence(procs, 2, NULL, 0);
    CHECK_RC(rc, "child PMIx_Fence over both namespaces");
    printf("client_spawn child %u of %s: parent is rank %u of %s\n", me.rank, me.nspace, parent->data.proc->rank,
           parent->data.proc->nspace);
    PMIX_VALUE_RELEASE(parent);
    return finish("client_spawn child");
}

int main(int argc, char **argv)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_spawn: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return run_child();
    int count = argc > 1 ? atoi(argv[1]) : 2;
    if (me.rank != 0)
        return finish("client_spawn parent");

    pmix_app_t app;
    PMIX_APP_CONSTRUCT(&app);
    app.cmd = strdup(argv[0]);
    app.argv = calloc(3, sizeof(char *));
    app.argv[0] = strdup(argv[0]);
    app.argv[1] = strdup("child");
    app.maxprocs = count;
    pmix_nspace_t children;
    rc = PMIx_Spawn(NULL, 0, &app, 1, children);
    CHECK_RC(rc, "PMIx_Spawn");
    if (rc == PMIX_SUCCESS) {
        pmix_value_t *size = NULL;
        pmix_proc_t wildcard;
        PMIX_LOAD_PROCID(&wildcard, children, PMIX_RANK_WILDCARD);
        rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, NULL, 0, &size);
        CHECK(rc == PMIX_SUCCESS && size->data.uint32 == (uint32_t)count, "PMIx_Get(children's job size): %s",
              PMIx_Error_string(rc));
        pmix_proc_t procs[2];
        PMIX_LOAD_PROCID(&procs[0], me.nspace, me.rank);
        PMIX_LOAD_PROCID(&procs[1], children, PMIX_RANK_WILDCARD);
        rc = PMIx_Connect(procs, 2, NULL, 0);
        CHECK_RC(rc, "parent PMIx_Connect with the children");
        rc = PMIx_Fence(procs, 2, NULL, 0);
        CHECK_RC(rc, "parent PMIx_Fence over both namespaces");
        printf("client_spawn parent: spawned %s with %d ranks\n", children, count);
    }
    PMIX_APP_DESTRUCT(&app);
    return finish("client_spawn parent");
}
