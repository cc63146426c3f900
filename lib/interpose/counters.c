/* The interposer's counters, and their part of the CANOPY_STAGE_STATS line. */
#include "interpose/counters.h"

#include "interpose/raw_io.h"

struct interpose_counters counters;

char* put_counters(char* p)
{
#define PUT_COUNTER(name)                                                                                          \
    p = put_s(p, " " #name "=");                                                                                   \
    p = put_u(p, __atomic_load_n(&counters.name, __ATOMIC_RELAXED));
    INTERPOSE_COUNTERS(PUT_COUNTER)
#undef PUT_COUNTER
    return p;
}
