/* Fence benchmark client: each rank puts 1 KiB, then times K whole-job PMIx fences with PMIX_COLLECT_DATA.
 * usage: fence_client K [BYTES]   (BYTES defaults to 1024)
 * Does 1 untimed warm-up fence and K timed ones (K+1 fences in all; PMIx_Init and PMIx_Finalize add none),
 * then checks that it can PMIx_Get the next rank's value and that its bytes are right. Rank 0 prints
 *   fence_client: N ranks, K fences, B bytes each: mean M ms median D ms min A ms max Z ms; get OK
 * Exit 0 only if every PMIx call succeeded and the value read back is the one the other rank put.
 * Build: gcc -O2 -o fence_client fence_client.c $(pkg-config --cflags --libs pmix) */
#include <pmix.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY "canopy.bench.blob"

static pmix_proc_t me;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The bytes rank r puts: a pattern that differs per rank and per position, so a wrong rank's blob fails. */
static unsigned char pattern(uint32_t rank, size_t i)
{
    return (unsigned char)(rank * 131u + i * 7u + (rank >> 8));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fence_all(void)
{
    pmix_proc_t all;
    pmix_info_t info;
    bool collect = true;
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_client rank %u: PMIx_Fence: %s\n", me.rank, PMIx_Error_string(rc));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || atoi(argv[1]) < 0) {
        fprintf(stderr, "usage: fence_client K [BYTES]  (K timed fences after one warm-up)\n");
        return 2;
    }
    int fences = atoi(argv[1]);
    size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 1024;

    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_client: PMIx_Init: %s (run it under a PMIx server, e.g. canopy)\n",
                PMIx_Error_string(rc));
        return 1;
    }
    int ok = 1;
    pmix_proc_t wildcard;
    pmix_value_t *val = NULL;
    uint32_t size = 0;
    PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || val->type != PMIX_UINT32) {
        fprintf(stderr, "fence_client rank %u: PMIx_Get(PMIX_JOB_SIZE): %s\n", me.rank, PMIx_Error_string(rc));
        return 1;
    }
    size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);

    unsigned char *blob = malloc(bytes);
    for (size_t i = 0; i < bytes; ++i)
        blob[i] = pattern(me.rank, i);
    pmix_value_t put;
    PMIX_VALUE_CONSTRUCT(&put);
    put.type = PMIX_BYTE_OBJECT;
    put.data.bo.bytes = (char *)blob;
    put.data.bo.size = bytes;
    rc = PMIx_Put(PMIX_GLOBAL, KEY, &put);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_client rank %u: PMIx_Put/Commit: %s\n", me.rank, PMIx_Error_string(rc));
        ok = 0;
    }

    double *times = calloc(fences > 0 ? fences : 1, sizeof(double));
    ok = ok && fence_all(); /* warm-up: first fence sets up the collective's state on every daemon */
    for (int k = 0; ok && k < fences; ++k) {
        double t0 = now();
        ok = fence_all();
        times[k] = now() - t0;
    }

    /* The next rank's blob came with the collecting fences, so this Get is answered locally. */
    uint32_t peer = (me.rank + 1) % size;
    if (ok) {
        pmix_proc_t proc;
        PMIX_LOAD_PROCID(&proc, me.nspace, peer);
        rc = PMIx_Get(&proc, KEY, NULL, 0, &val);
        if (rc != PMIX_SUCCESS) {
            fprintf(stderr, "fence_client rank %u: PMIx_Get(rank %u): %s\n", me.rank, peer, PMIx_Error_string(rc));
            ok = 0;
        } else {
            int good = val->type == PMIX_BYTE_OBJECT && val->data.bo.size == bytes;
            for (size_t i = 0; good && i < bytes; ++i)
                good = (unsigned char)val->data.bo.bytes[i] == pattern(peer, i);
            if (!good) {
                fprintf(stderr, "fence_client rank %u: rank %u's value is wrong (type %s, %zu bytes)\n", me.rank,
                        peer, PMIx_Data_type_string(val->type),
                        val->type == PMIX_BYTE_OBJECT ? val->data.bo.size : (size_t)0);
                ok = 0;
            }
            PMIX_VALUE_RELEASE(val);
        }
    }

    if (ok && me.rank == 0) {
        double sum = 0;
        for (int k = 0; k < fences; ++k)
            sum += times[k];
        qsort(times, fences, sizeof(double), cmp_double);
        double median = fences == 0 ? 0 : (fences % 2 ? times[fences / 2]
                                                      : (times[fences / 2 - 1] + times[fences / 2]) / 2);
        printf("fence_client: %u ranks, %d fences, %zu bytes each: mean %.3f ms median %.3f ms min %.3f ms "
               "max %.3f ms; get OK\n",
               size, fences, bytes, fences ? sum / fences * 1e3 : 0.0, median * 1e3,
               fences ? times[0] * 1e3 : 0.0, fences ? times[fences - 1] * 1e3 : 0.0);
        fflush(stdout);
    }
    free(times);
    free(blob);
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "fence_client rank %u: PMIx_Finalize: %s\n", me.rank, PMIx_Error_string(rc));
        ok = 0;
    }
    return ok ? 0 : 1;
}
