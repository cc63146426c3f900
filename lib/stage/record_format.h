/* The record file: what the interposer writes in record mode and the index builder reads (C, shared). */
#pragma once

/*
 * One lookup a line, "OP<TAB>RESULT<TAB>PATH\n": OP one of the letters below, RESULT the errno the call failed
 * with (0: it succeeded), PATH absolute and normalized, with "\\", "\n" and "\t" escaped as "\\\\", "\\n" and
 * "\\t". Writers append whole lines with O_APPEND, so the ranks of a job can share one file.
 */

#ifdef __cplusplus
extern "C" {
#endif

enum canopy_stage_record_op {
    CANOPY_STAGE_RECORD_STAT = 'S',     /* stat, statx, realpath: symlinks followed */
    CANOPY_STAGE_RECORD_LSTAT = 'L',
    CANOPY_STAGE_RECORD_ACCESS = 'A',
    CANOPY_STAGE_RECORD_READLINK = 'R',
    CANOPY_STAGE_RECORD_OPEN = 'O',     /* an open for reading: the program wants the content */
    CANOPY_STAGE_RECORD_OPENDIR = 'D',
    CANOPY_STAGE_RECORD_WRITE = 'W',    /* an open that may write: nothing to stage */
    CANOPY_STAGE_RECORD_LOAD = 'X',     /* the loader found a library there: the content is wanted */
};

#ifdef __cplusplus
}
#endif
