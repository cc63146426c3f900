/* LD_PRELOAD shim for tests: the rank named by CANOPY_TEST_DIE_RANK kills itself with SIGKILL as it enters its
 * first PMIx fence. Under Open MPI that is inside MPI_Init, after PMIx_Init: the worst moment to lose a rank. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>

static void die_if_chosen(void)
{
    const char *chosen = getenv("CANOPY_TEST_DIE_RANK");
    const char *rank = getenv("RANK");
    if (chosen && rank && strcmp(chosen, rank) == 0)
        raise(SIGKILL);
}

pmix_status_t PMIx_Fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo)
{
    die_if_chosen();
    pmix_status_t (*real)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t) =
        (pmix_status_t(*)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t))dlsym(RTLD_NEXT, "PMIx_Fence");
    return real(procs, nprocs, info, ninfo);
}

pmix_status_t PMIx_Fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    die_if_chosen();
    pmix_status_t (*real)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t, void *) =
        (pmix_status_t(*)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t,
                          void *))dlsym(RTLD_NEXT, "PMIx_Fence_nb");
    return real(procs, nprocs, info, ninfo, cbfunc, cbdata);
}
