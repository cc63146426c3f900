/* PMIx client test: job info, Put/Commit/Fence/Get of many value types, a Get without a fence (direct modex),
 * fences over subsets and back to back, and publish/lookup/unpublish.
 * usage: client_keyval NODE[,NODE...] COUNT[,COUNT...]   (node names and ranks per node, ranks placed in blocks) */
#include "client_common.h"

#include <stdint.h>
#include <unistd.h>

#define MAX_NODES 64

static int nnodes = 0;
static char *node_names[MAX_NODES];
static uint32_t first_rank[MAX_NODES + 1];

static int node_of(uint32_t rank)
{
    for (int n = 0; n < nnodes; ++n)
        if (rank < first_rank[n + 1])
            return n;
    return -1;
}

static void parse_layout(char *names, char *counts)
{
    char *save = NULL;
    for (char *t = strtok_r(names, ",", &save); t && nnodes < MAX_NODES; t = strtok_r(NULL, ",", &save))
        node_names[nnodes++] = t;
    int i = 0;
    first_rank[0] = 0;
    save = NULL;
    for (char *t = strtok_r(counts, ",", &save); t && i < nnodes; t = strtok_r(NULL, ",", &save), ++i)
        first_rank[i + 1] = first_rank[i] + (uint32_t)strtoul(t, NULL, 10);
}

static void check_job_info(uint32_t size)
{
    pmix_value_t *v;
    int mynode = node_of(me.rank);
    uint32_t local_size = first_rank[mynode + 1] - first_rank[mynode];

    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, PMIX_UINT32, NULL, 0))) {
        CHECK(v->data.uint32 == size, "JOB_SIZE %u, expected %u", v->data.uint32, size);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_UNIV_SIZE, PMIX_UINT32, NULL, 0))) {
        CHECK(v->data.uint32 == size, "UNIV_SIZE %u, expected %u", v->data.uint32, size);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_MAX_PROCS, PMIX_UINT32, NULL, 0))) {
        CHECK(v->data.uint32 == size, "MAX_PROCS %u, expected %u", v->data.uint32, size);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE, PMIX_UINT32, NULL, 0))) {
        CHECK(v->data.uint32 == local_size, "LOCAL_SIZE %u, expected %u", v->data.uint32, local_size);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_LOCAL_PEERS, PMIX_STRING, NULL, 0))) {
        char expected[4096] = "";
        for (uint32_t r = first_rank[mynode]; r < first_rank[mynode + 1]; ++r)
            snprintf(expected + strlen(expected), sizeof(expected) - strlen(expected), "%s%u",
                     r == first_rank[mynode] ? "" : ",", r);
        CHECK(strcmp(v->data.string, expected) == 0, "LOCAL_PEERS '%s', expected '%s'", v->data.string, expected);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(PMIX_RANK_WILDCARD, PMIX_NUM_NODES, PMIX_UINT32, NULL, 0))) {
        CHECK(v->data.uint32 == (uint32_t)nnodes, "NUM_NODES %u, expected %d", v->data.uint32, nnodes);
        PMIX_VALUE_RELEASE(v);
    }
    /* Per-rank facts, for ourselves and for every other rank (remote ones come from the maps). */
    for (uint32_t r = 0; r < size; ++r) {
        int node = node_of(r);
        if ((v = get_typed(r, PMIX_HOSTNAME, PMIX_STRING, NULL, 0))) {
            CHECK(strcmp(v->data.string, node_names[node]) == 0, "HOSTNAME of rank %u '%s', expected '%s'", r,
                  v->data.string, node_names[node]);
            PMIX_VALUE_RELEASE(v);
        }
        /* PMIx 4.2.2 answers NODEID, LOCAL_RANK and NODE_RANK for this node's ranks only (docs/pmix.md). */
        if (node != mynode)
            continue;
        if ((v = get_typed(r, PMIX_NODEID, PMIX_UINT32, NULL, 0))) {
            CHECK(v->data.uint32 == (uint32_t)node, "NODEID of rank %u %u, expected %d", r, v->data.uint32, node);
            PMIX_VALUE_RELEASE(v);
        }
        if ((v = get_typed(r, PMIX_LOCAL_RANK, PMIX_UINT16, NULL, 0))) {
            CHECK(v->data.uint16 == r - first_rank[node], "LOCAL_RANK of rank %u %u, expected %u", r,
                  v->data.uint16, r - first_rank[node]);
            PMIX_VALUE_RELEASE(v);
        }
        if ((v = get_typed(r, PMIX_NODE_RANK, PMIX_UINT16, NULL, 0))) {
            CHECK(v->data.uint16 == r - first_rank[node], "NODE_RANK of rank %u %u, expected %u", r,
                  v->data.uint16, r - first_rank[node]);
            PMIX_VALUE_RELEASE(v);
        }
    }
}

/* The values rank r puts; every rank recomputes them to check what it gets. */
#define BYTES_LEN 3000
#define BIG_LEN (64 * 1024)

static void fill_bytes(char *buf, size_t len, uint32_t r)
{
    for (size_t i = 0; i < len; ++i)
        buf[i] = (char)((i * 31 + r * 7) & 0xff);
}

static void put_values(void)
{
    pmix_value_t v;
    uint32_t r = me.rank;
    char str[64], bytes[BYTES_LEN];
    char *big = malloc(BIG_LEN + 1);
    pmix_status_t rc;

#define PUT(key, field, ptype, value)                             \
    do {                                                          \
        PMIX_VALUE_CONSTRUCT(&v);                                 \
        v.type = (ptype);                                         \
        v.data.field = (value);                                   \
        rc = PMIx_Put(PMIX_GLOBAL, (key), &v);                    \
        CHECK_RC(rc, "PMIx_Put " key);                            \
    } while (0)

    PUT("k.int32", int32, PMIX_INT32, -7 * (int32_t)r - 1);
    PUT("k.uint64", uint64, PMIX_UINT64, (1ULL << 40) + r);
    PUT("k.int16", int16, PMIX_INT16, (int16_t)(-300 - (int)r));
    PUT("k.uint8", uint8, PMIX_UINT8, (uint8_t)(200 + r));
    PUT("k.size", size, PMIX_SIZE, (size_t)r * 1000000000ULL);
    PUT("k.double", dval, PMIX_DOUBLE, r + 0.25);
    PUT("k.float", fval, PMIX_FLOAT, r + 0.5f);
    PUT("k.bool", flag, PMIX_BOOL, (r % 2) == 1);
    PUT("k.pid", pid, PMIX_PID, (pid_t)(1000 + r));

    snprintf(str, sizeof str, "hello from rank %u", r);
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = str;
    rc = PMIx_Put(PMIX_GLOBAL, "k.string", &v);
    CHECK_RC(rc, "PMIx_Put k.string");

    fill_bytes(bytes, BYTES_LEN, r);
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = bytes;
    v.data.bo.size = BYTES_LEN;
    rc = PMIx_Put(PMIX_GLOBAL, "k.bytes", &v);
    CHECK_RC(rc, "PMIx_Put k.bytes");

    memset(big, 'a' + (int)(r % 26), BIG_LEN);
    big[BIG_LEN] = '\0';
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = big;
    rc = PMIx_Put(PMIX_GLOBAL, "k.big", &v);
    CHECK_RC(rc, "PMIx_Put k.big");
    free(big);
#undef PUT
}

static void check_values(uint32_t r)
{
    pmix_value_t *v;
    char str[64], bytes[BYTES_LEN];

#define GETCHECK(key, ptype, field, expected, fmt)                                                        \
    if ((v = get_typed(r, key, ptype, NULL, 0))) {                                                      \
        CHECK(v->data.field == (expected), "rank %u " key " = " fmt ", expected " fmt, r, v->data.field, \
              (expected));                                                                             \
        PMIX_VALUE_RELEASE(v);                                                                         \
    }
    GETCHECK("k.int32", PMIX_INT32, int32, -7 * (int32_t)r - 1, "%d");
    GETCHECK("k.uint64", PMIX_UINT64, uint64, (uint64_t)((1ULL << 40) + r), "%lu");
    GETCHECK("k.int16", PMIX_INT16, int16, (int16_t)(-300 - (int)r), "%d");
    GETCHECK("k.uint8", PMIX_UINT8, uint8, (uint8_t)(200 + r), "%u");
    GETCHECK("k.size", PMIX_SIZE, size, (size_t)r * (size_t)1000000000, "%zu");
    GETCHECK("k.double", PMIX_DOUBLE, dval, r + 0.25, "%f");
    GETCHECK("k.float", PMIX_FLOAT, fval, r + 0.5f, "%f");
    GETCHECK("k.bool", PMIX_BOOL, flag, (r % 2) == 1, "%d");
    GETCHECK("k.pid", PMIX_PID, pid, (pid_t)(1000 + r), "%d");
#undef GETCHECK
    snprintf(str, sizeof str, "hello from rank %u", r);
    if ((v = get_typed(r, "k.string", PMIX_STRING, NULL, 0))) {
        CHECK(strcmp(v->data.string, str) == 0, "rank %u k.string '%s'", r, v->data.string);
        PMIX_VALUE_RELEASE(v);
    }
    fill_bytes(bytes, BYTES_LEN, r);
    if ((v = get_typed(r, "k.bytes", PMIX_BYTE_OBJECT, NULL, 0))) {
        CHECK(v->data.bo.size == BYTES_LEN && memcmp(v->data.bo.bytes, bytes, BYTES_LEN) == 0,
              "rank %u k.bytes differ (size %zu)", r, v->data.bo.size);
        PMIX_VALUE_RELEASE(v);
    }
    if ((v = get_typed(r, "k.big", PMIX_STRING, NULL, 0))) {
        size_t len = strlen(v->data.string);
        CHECK(len == BIG_LEN && v->data.string[0] == 'a' + (int)(r % 26) &&
                  v->data.string[BIG_LEN - 1] == 'a' + (int)(r % 26),
              "rank %u k.big wrong (length %zu)", r, len);
        PMIX_VALUE_RELEASE(v);
    }
}

static void check_direct_modex(uint32_t size)
{
    /* Put a key after the data exchange, then fence WITHOUT collecting data: the key reaches the others only if
     * their Get goes to the server and, for a rank on another node, through the host's direct_modex. */
    pmix_value_t v, *got;
    pmix_info_t info[2];
    int seconds = 20;
    bool refresh = true;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_UINT32;
    v.data.uint32 = 5000 + me.rank;
    CHECK_RC(PMIx_Put(PMIX_GLOBAL, "k.late", &v), "PMIx_Put k.late");
    CHECK_RC(PMIx_Commit(), "PMIx_Commit (late)");
    fence_all(0);
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &seconds, PMIX_INT);
    /* A remote rank's earlier data is cached from the collecting fence: ask for a fresh copy. (PMIx 4.2.2 refuses
     * the refresh for a rank on this node, whose data the server has anyway.) */
    PMIX_INFO_LOAD(&info[1], PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
    for (uint32_t k = 1; k < size; ++k) {
        uint32_t r = (me.rank + k) % size;
        size_t ninfo = node_of(r) == node_of(me.rank) ? 1 : 2;
        if ((got = get_typed(r, "k.late", PMIX_UINT32, info, ninfo))) {
            CHECK(got->data.uint32 == 5000 + r, "rank %u k.late %u", r, got->data.uint32);
            PMIX_VALUE_RELEASE(got);
        }
    }
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);

    /* A key nobody put: NOT-FOUND within the timeout, never a hang. */
    seconds = 5;
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &seconds, PMIX_INT);
    pmix_proc_t other;
    PMIX_LOAD_PROCID(&other, me.nspace, (me.rank + 1) % size);
    got = NULL;
    pmix_status_t rc = PMIx_Get(&other, "k.never", info, 1, &got);
    CHECK(rc != PMIX_SUCCESS, "PMIx_Get of a key nobody put succeeded");
    if (got)
        PMIX_VALUE_RELEASE(got);
    PMIX_INFO_DESTRUCT(&info[0]);
}

static void check_subset_fences(uint32_t size)
{
    /* Evens and odds fence separately and at the same time, three times back to back; then the whole job. */
    pmix_rank_t group[1024];
    size_t n = 0;
    for (uint32_t r = me.rank % 2; r < size && n < 1024; r += 2)
        group[n++] = r;
    for (int round = 0; round < 3; ++round)
        fence_procs(group, n, round == 0);
    for (int round = 0; round < 5; ++round)
        fence_all(0);
    /* A pair fence: rank 0 with the last rank. */
    if (size > 1 && (me.rank == 0 || me.rank == size - 1)) {
        pmix_rank_t pair[2] = {0, size - 1};
        fence_procs(pair, 2, 1);
    }
}

static void check_publish_lookup(uint32_t size)
{
    pmix_status_t rc;
    pmix_info_t info[2];
    pmix_pdata_t pdata[2];
    int port = 4242;
    (void)size;
    if (me.rank == 0) {
        PMIX_INFO_LOAD(&info[0], "svc.address", "tcp://node0:4242", PMIX_STRING);
        PMIX_INFO_LOAD(&info[1], "svc.port", &port, PMIX_INT);
        rc = PMIx_Publish(info, 2);
        CHECK_RC(rc, "PMIx_Publish");
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        /* Publishing the same key twice is refused. */
        PMIX_INFO_LOAD(&info[0], "svc.port", &port, PMIX_INT);
        rc = PMIx_Publish(info, 1);
        CHECK(rc != PMIX_SUCCESS, "a second PMIx_Publish of svc.port succeeded");
        PMIX_INFO_DESTRUCT(&info[0]);
    }
    fence_all(0);
    PMIX_PDATA_CONSTRUCT(&pdata[0]);
    PMIX_PDATA_CONSTRUCT(&pdata[1]);
    PMIX_LOAD_KEY(pdata[0].key, "svc.address");
    PMIX_LOAD_KEY(pdata[1].key, "svc.port");
    rc = PMIx_Lookup(pdata, 2, NULL, 0);
    CHECK_RC(rc, "PMIx_Lookup");
    if (rc == PMIX_SUCCESS) {
        CHECK(pdata[0].value.type == PMIX_STRING && strcmp(pdata[0].value.data.string, "tcp://node0:4242") == 0,
              "lookup svc.address wrong");
        CHECK(pdata[1].value.type == PMIX_INT && pdata[1].value.data.integer == 4242, "lookup svc.port wrong");
        CHECK(pdata[0].proc.rank == 0 && PMIX_CHECK_NSPACE(pdata[0].proc.nspace, me.nspace),
              "lookup svc.address publisher %s.%u, expected rank 0", pdata[0].proc.nspace, pdata[0].proc.rank);
    }
    PMIX_PDATA_DESTRUCT(&pdata[0]);
    PMIX_PDATA_DESTRUCT(&pdata[1]);

    PMIX_PDATA_CONSTRUCT(&pdata[0]);
    PMIX_LOAD_KEY(pdata[0].key, "svc.missing");
    rc = PMIx_Lookup(pdata, 1, NULL, 0);
    CHECK(rc == PMIX_ERR_NOT_FOUND, "lookup of a missing key: %s, expected NOT-FOUND", PMIx_Error_string(rc));
    PMIX_PDATA_DESTRUCT(&pdata[0]);

    fence_all(0);
    if (me.rank == 0) {
        char *keys[] = {"svc.address", NULL};
        CHECK_RC(PMIx_Unpublish(keys, NULL, 0), "PMIx_Unpublish");
    }
    fence_all(0);
    PMIX_PDATA_CONSTRUCT(&pdata[0]);
    PMIX_LOAD_KEY(pdata[0].key, "svc.address");
    rc = PMIx_Lookup(pdata, 1, NULL, 0);
    CHECK(rc == PMIX_ERR_NOT_FOUND, "lookup after unpublish: %s, expected NOT-FOUND", PMIx_Error_string(rc));
    PMIX_PDATA_DESTRUCT(&pdata[0]);
}

int main(int argc, char **argv)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: client_keyval NODE[,NODE...] COUNT[,COUNT...]\n");
        PMIx_Finalize(NULL, 0);
        return 2;
    }
    parse_layout(argv[1], argv[2]);
    uint32_t size = first_rank[nnodes];

    check_job_info(size);
    put_values();
    CHECK_RC(PMIx_Commit(), "PMIx_Commit");
    fence_all(1);
    for (uint32_t r = 0; r < size; ++r)
        check_values(r);
    check_direct_modex(size);
    check_subset_fences(size);
    check_publish_lookup(size);
    fence_all(0);
    return finish("client_keyval");
}
