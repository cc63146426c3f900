/* PMI exchange benchmark program: the PMI-1 wire exchange MPICH 4's MPI_Init does, without MPI or any library.
 * usage: pmi_exchange   (run under a launcher serving simple PMI: canopy --pmi simple, mpiexec.hydra)
 * Speaks PMI-1 on the descriptor in PMI_FD as MPICH 4's simple PMI client does: init, get_maxes, get_my_kvsname,
 * a put of this rank's "card" (card-R, 100 hex digits derived from R), barrier, gets of the cards of ranks R+1
 * and R-1 (mod size), checked, a get of PMI_process_mapping, a second barrier, finalize. Every rank prints
 *   pmi_exchange_times rank R main T0 init T1 barrier T2 gets T3 finalize T4 cpu C
 * with T* the wall clock (seconds since the epoch, CLOCK_REALTIME) on entering main, after init, after the first
 * barrier, after the gets and after finalize, and C the rank's own user+system CPU seconds at exit. Rank 0 then
 * prints "pmi_exchange: N ranks OK". Any wrong or missing answer: one line on stderr and exit 1.
 * Answers are newline-terminated lines of space-separated key=value fields, in any order. Hydra's server sends
 * barrier_out and finalize_ack without rc, and get_result as "rc=0 msg=success value=..."; both forms pass.
 * Build: cc -O2 -o pmi_exchange pmi_exchange.c */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096
#define MAX_FIELDS 64
#define CARD_BYTES 50 /* 100 hex digits */

static int pmi_fd = -1;
static long my_rank = -1;

/* What is buffered from PMI_FD beyond the last line handed out. */
static char inbuf[LINE_MAX_BYTES * 2];
static size_t inlen;

/* The last answer, split into fields: its line is cut in place at the spaces and after each '='. */
static char answer[LINE_MAX_BYTES];
static char *keys[MAX_FIELDS], *values[MAX_FIELDS];
static int nfields;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail(const char *format, ...)
{
    char text[LINE_MAX_BYTES + 256];
    va_list ap;
    va_start(ap, format);
    vsnprintf(text, sizeof text, format, ap);
    va_end(ap);
    fprintf(stderr, "pmi_exchange rank %ld: %s\n", my_rank, text);
    exit(1);
}

static void send_line(const char *line)
{
    size_t len = strlen(line), done = 0;
    while (done < len) {
        ssize_t n = write(pmi_fd, line + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("writing to PMI_FD %d: %s", pmi_fd, n < 0 ? strerror(errno) : "wrote nothing");
        done += (size_t)n;
    }
}

/* Reads one newline-terminated answer into `answer` (without the newline) and splits it into fields. */
static void read_answer(const char *after)
{
    for (;;) {
        char *newline = memchr(inbuf, '\n', inlen);
        if (newline) {
            size_t len = (size_t)(newline - inbuf);
            if (len >= sizeof answer)
                fail("answer to %s longer than %zu bytes", after, sizeof answer - 1);
            memcpy(answer, inbuf, len);
            answer[len] = '\0';
            memmove(inbuf, newline + 1, inlen - len - 1);
            inlen -= len + 1;
            break;
        }
        if (inlen == sizeof inbuf)
            fail("answer to %s has no newline in %zu bytes", after, inlen);
        ssize_t n = read(pmi_fd, inbuf + inlen, sizeof inbuf - inlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail("reading the answer to %s from PMI_FD: %s", after, strerror(errno));
        if (n == 0)
            fail("PMI_FD closed while waiting for the answer to %s", after);
        inlen += (size_t)n;
    }
    nfields = 0;
    char *save = NULL;
    for (char *field = strtok_r(answer, " \t\r", &save); field; field = strtok_r(NULL, " \t\r", &save)) {
        if (nfields == MAX_FIELDS)
            fail("answer to %s has more than %d fields", after, MAX_FIELDS);
        char *eq = strchr(field, '=');
        if (eq)
            *eq = '\0';
        keys[nfields] = field;
        values[nfields++] = eq ? eq + 1 : field + strlen(field);
    }
}

static const char *field(const char *key)
{
    for (int i = 0; i < nfields; ++i)
        if (strcmp(keys[i], key) == 0)
            return values[i];
    return NULL;
}

/* Sends `line`, reads the answer and checks it is `cmd=expected`. With need_rc the answer must carry rc=0;
 * without, an answer without rc passes (Hydra's barrier_out, finalize_ack, maxes), but an rc other than 0 fails. */
static void exchange(const char *line, const char *what, const char *expected, int need_rc)
{
    send_line(line);
    read_answer(what);
    const char *cmd = field("cmd"), *rc = field("rc");
    if (!cmd || strcmp(cmd, expected) != 0)
        fail("%s: expected cmd=%s, got cmd=%s", what, expected, cmd ? cmd : "(none)");
    if ((need_rc && !rc) || (rc && strcmp(rc, "0") != 0)) {
        const char *msg = field("msg");
        fail("%s: %s rc=%s%s%s", what, expected, rc ? rc : "(none)", msg ? " msg=" : "", msg ? msg : "");
    }
}

static long env_number(const char *name)
{
    const char *text = getenv(name);
    char *end;
    if (!text || !*text)
        fail("%s is not set (run under a launcher serving simple PMI, e.g. canopy --pmi simple)", name);
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0)
        fail("%s=%s is not a number", name, text);
    return v;
}

/* Rank r's card: CARD_BYTES bytes from a per-rank xorshift stream, in hex. */
static void card(long rank, char *out)
{
    unsigned long long x = 0x9e3779b97f4a7c15ULL ^ ((unsigned long long)rank * 0xbf58476d1ce4e5b9ULL + 1);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < CARD_BYTES; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[2 * i] = hex[(x >> 4) & 15];
        out[2 * i + 1] = hex[x & 15];
    }
    out[2 * CARD_BYTES] = '\0';
}

int main(void)
{
    double t_main = wall();
    char line[LINE_MAX_BYTES], kvsname[520], mine[2 * CARD_BYTES + 1], want[2 * CARD_BYTES + 1];

    my_rank = env_number("PMI_RANK");
    pmi_fd = (int)env_number("PMI_FD");
    long size = env_number("PMI_SIZE");
    if (size < 1 || my_rank >= size)
        fail("PMI_RANK=%ld is not below PMI_SIZE=%ld", my_rank, size);

    exchange("cmd=init pmi_version=1 pmi_subversion=1\n", "init", "response_to_init", 1);
    const char *version = field("pmi_version"), *subversion = field("pmi_subversion");
    if (!version || strcmp(version, "1") != 0 || (subversion && strcmp(subversion, "1") != 0))
        fail("init: the server answered PMI version %s.%s, not 1.1", version ? version : "(none)",
             subversion ? subversion : "(none)");
    double t_init = wall();

    exchange("cmd=get_maxes\n", "get_maxes", "maxes", 0);
    const char *keylen = field("keylen_max"), *vallen = field("vallen_max"), *kvslen = field("kvsname_max");
    if (!keylen || !vallen || !kvslen)
        fail("get_maxes: answer lacks kvsname_max, keylen_max or vallen_max");
    if (atol(keylen) < 16 || atol(vallen) < 2 * CARD_BYTES + 1)
        fail("get_maxes: keylen_max=%s vallen_max=%s are too small for a %d-byte card", keylen, vallen,
             2 * CARD_BYTES);
    long kvsname_max = atol(kvslen); /* the fields point into the answer, which the next one overwrites */

    exchange("cmd=get_my_kvsname\n", "get_my_kvsname", "my_kvsname", 0);
    const char *name = field("kvsname");
    if (!name || !*name)
        fail("get_my_kvsname: answer has no kvsname");
    if (strlen(name) >= (size_t)kvsname_max || strlen(name) > 512)
        fail("get_my_kvsname: kvsname of %zu bytes exceeds kvsname_max=%ld", strlen(name), kvsname_max);
    snprintf(kvsname, sizeof kvsname, "%s", name);

    card(my_rank, mine);
    snprintf(line, sizeof line, "cmd=put kvsname=%s key=card-%ld value=%s\n", kvsname, my_rank, mine);
    exchange(line, "put", "put_result", 1);

    exchange("cmd=barrier_in\n", "barrier_in", "barrier_out", 0);
    double t_barrier = wall();

    long peers[2] = {(my_rank + 1) % size, (my_rank + size - 1) % size};
    for (int i = 0; i < 2; ++i) {
        char what[64];
        snprintf(what, sizeof what, "get card-%ld", peers[i]);
        snprintf(line, sizeof line, "cmd=get kvsname=%s key=card-%ld\n", kvsname, peers[i]);
        exchange(line, what, "get_result", 1);
        const char *value = field("value");
        card(peers[i], want);
        if (!value || strcmp(value, want) != 0)
            fail("%s: value %s, expected %s", what, value ? value : "(none)", want);
    }
    snprintf(line, sizeof line, "cmd=get kvsname=%s key=PMI_process_mapping\n", kvsname);
    exchange(line, "get PMI_process_mapping", "get_result", 1);
    const char *mapping = field("value");
    if (!mapping || strncmp(mapping, "(vector,", 8) != 0)
        fail("get PMI_process_mapping: value %s is not a (vector,...) mapping", mapping ? mapping : "(none)");
    double t_gets = wall();

    exchange("cmd=barrier_in\n", "second barrier_in", "barrier_out", 0);
    exchange("cmd=finalize\n", "finalize", "finalize_ack", 0);
    double t_finalize = wall();

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    printf("pmi_exchange_times rank %ld main %.6f init %.6f barrier %.6f gets %.6f finalize %.6f cpu %.6f\n",
           my_rank, t_main, t_init, t_barrier, t_gets, t_finalize, cpu);
    if (my_rank == 0)
        printf("pmi_exchange: %ld ranks OK\n", size);
    return fflush(stdout) == 0 ? 0 : 1;
}
