/* How the fault campaign's ranks say which phase they have reached: an empty file DIR/PHASE.RANK holding the
 * rank's PID, so the campaign can time a fault to a phase and find the rank to kill. */
#ifndef CANOPY_TESTS_FAULTS_PHASE_MARKS_H
#define CANOPY_TESTS_FAULTS_PHASE_MARKS_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void mark_phase(const char *dir, const char *phase)
{
    const char *rank = getenv("RANK");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, phase, rank ? rank : "unknown");
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(3);
    }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
}

#endif
