/* The interposer's life cycle: the environment read once into a mode, the real functions resolved, the stats
 * line written at exit (see docs/staging.md). */
#include "interpose/interposer.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose/counters.h"
#include "interpose/raw_io.h"

/* Environment:
 *   CANOPY_STAGE_CACHE=DIR      serve from the node cache DIR (DIR/index, DIR/root, DIR/dirs)
 *   CANOPY_STAGE_RECORD=FILE    record mode: pass everything through, append lookups under the prefixes
 *   CANOPY_STAGE_PREFIXES=A:B   the prefixes to record (serving takes them from the index)
 *   CANOPY_STAGE_SOCKET=PATH    on demand: ask the node's canopyd about paths under a prefix the index lacks
 *   CANOPY_STAGE_FETCH_TIMEOUT=S   how long one such question may take before the real filesystem answers (120)
 *   CANOPY_STAGE_STATS=FILE     append one line of counters at exit
 *   CANOPY_STAGE_DISABLE=1      pass everything through */

struct serve_state serving;
struct record_state recording;

#define SYMBOL(ret, name, params) ret(*real_##name) params;
#include "interpose/symbols.def"
#undef SYMBOL

enum { PHASE_NEW, PHASE_STARTING, PHASE_READY };

static struct {
    int phase;
    int mode;
    int audit;
    char stats_file[PMAX];
} life;

static void start_once(void)
{
    int expected = PHASE_NEW;
    if (!__atomic_compare_exchange_n(&life.phase, &expected, PHASE_STARTING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread starts: until it is done, calls pass through (correct, only unstaged) */
    const char* disable = getenv("CANOPY_STAGE_DISABLE");
    const char* cache = getenv("CANOPY_STAGE_CACHE");
    const char* record = getenv("CANOPY_STAGE_RECORD");
    const char* stats_file = getenv("CANOPY_STAGE_STATS");
    if (stats_file)
        copy_str(life.stats_file, sizeof life.stats_file, stats_file);
    if (disable && *disable && strcmp(disable, "0") != 0)
        life.mode = MODE_OFF;
    else if (record && *record)
        life.mode = record_start(&recording, record, getenv("CANOPY_STAGE_PREFIXES")) == 0 ? MODE_RECORD : MODE_OFF;
    else if (cache && cache[0] == '/')
        life.mode = serve_start(&serving, cache, getenv("CANOPY_STAGE_SOCKET"), getenv("CANOPY_STAGE_FETCH_TIMEOUT")) == 0
                        ? MODE_SERVE
                        : MODE_OFF;
    __atomic_store_n(&life.phase, PHASE_READY, __ATOMIC_RELEASE);
}

int current_mode(void)
{
    if (__builtin_expect(__atomic_load_n(&life.phase, __ATOMIC_ACQUIRE) != PHASE_READY, 0)) {
        start_once();
        if (__atomic_load_n(&life.phase, __ATOMIC_ACQUIRE) != PHASE_READY)
            return MODE_OFF;
    }
    return life.mode;
}

void note_audit_namespace(void)
{
    life.audit = 1;
}

static void resolve(void** real, const char* name)
{
    if (__builtin_expect(!*real, 0))
        __atomic_store_n(real, dlsym(RTLD_NEXT, name), __ATOMIC_RELEASE);
}

int enter(void** real, const char* name)
{
    resolve(real, name);
    return current_mode();
}

__attribute__((constructor)) static void interpose_init(void)
{
#define SYMBOL(ret, name, params) resolve((void**)&real_##name, #name);
#include "interpose/symbols.def"
#undef SYMBOL
    current_mode();
}

__attribute__((destructor)) static void interpose_fini(void)
{
    if (!life.stats_file[0])
        return;
    char line[512];
    char* p = line;
    p = put_s(p, life.audit ? "audit" : "preload");
    p = put_s(p, " pid=");
    p = put_u(p, (unsigned long)getpid());
    p = put_s(p, " mode=");
    p = put_s(p, life.mode == MODE_SERVE ? "serve" : life.mode == MODE_RECORD ? "record" : "off");
    p = put_counters(p);
    *p++ = '\n';
    append_to_file(life.stats_file, line, (size_t)(p - line));
}
