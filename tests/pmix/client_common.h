/* Small helpers shared by the PMIx client test programs: checks that count failures and name the rank. */
#ifndef CANOPY_TESTS_PMIX_CLIENT_COMMON_H
#define CANOPY_TESTS_PMIX_CLIENT_COMMON_H

#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmix_proc_t me;
static int checks = 0, failures = 0;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        ++checks;                                                            \
        if (!(cond)) {                                                       \
            ++failures;                                                      \
            fprintf(stderr, "client rank %u: FAIL line %d: ", me.rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

#define CHECK_RC(rc, what) CHECK((rc) == PMIX_SUCCESS, "%s: %s", (what), PMIx_Error_string(rc))

/* Gets `key` of `rank` in our namespace; NULL (and a failure) if it is missing or of another type. */
static inline pmix_value_t *get_typed(pmix_rank_t rank, const char *key, pmix_data_type_t type,
                               const pmix_info_t *info, size_t ninfo)
{
    pmix_proc_t proc;
    pmix_value_t *val = NULL;
    PMIX_LOAD_PROCID(&proc, me.nspace, rank);
    pmix_status_t rc = PMIx_Get(&proc, key, info, ninfo, &val);
    CHECK(rc == PMIX_SUCCESS, "PMIx_Get(rank %u, %s): %s", rank, key, PMIx_Error_string(rc));
    if (rc != PMIX_SUCCESS)
        return NULL;
    CHECK(val->type == type, "PMIx_Get(rank %u, %s): type %s, expected %s", rank, key,
          PMIx_Data_type_string(val->type), PMIx_Data_type_string(type));
    if (val->type != type) {
        PMIX_VALUE_RELEASE(val);
        return NULL;
    }
    return val;
}

static inline void fence_procs(const pmix_rank_t *ranks, size_t n, int collect)
{
    pmix_proc_t *procs;
    pmix_info_t info;
    bool flag = collect ? true : false;
    PMIX_PROC_CREATE(procs, n);
    for (size_t i = 0; i < n; ++i)
        PMIX_LOAD_PROCID(&procs[i], me.nspace, ranks[i]);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(procs, n, &info, 1);
    CHECK_RC(rc, "PMIx_Fence over a subset");
    PMIX_INFO_DESTRUCT(&info);
    PMIX_PROC_FREE(procs, n);
}

static inline void fence_all(int collect)
{
    pmix_proc_t all;
    pmix_info_t info;
    bool flag = collect ? true : false;
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(&all, 1, &info, 1);
    CHECK_RC(rc, collect ? "PMIx_Fence(all, collect)" : "PMIx_Fence(all)");
    PMIX_INFO_DESTRUCT(&info);
}

static inline int finish(const char *name)
{
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS) {
        ++failures;
        fprintf(stderr, "client rank %u: PMIx_Finalize: %s\n", me.rank, PMIx_Error_string(rc));
    }
    if (failures == 0)
        printf("%s rank %u: OK (%d checks)\n", name, me.rank, checks);
    else
        printf("%s rank %u: FAILED %d of %d checks\n", name, me.rank, failures, checks);
    fflush(stdout);
    return failures == 0 ? 0 : 1;
}

#endif
