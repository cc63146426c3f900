/* Record mode: each lookup under a prefix becomes one line of the record file, escaped. */
#include "interpose/record.h"

#include <errno.h>
#include <stddef.h>

#include "interpose/raw_io.h"

int record_start(struct record_state* r, const char* file, const char* prefixes)
{
    if (copy_str(r->file, sizeof r->file, file) == (size_t)-1 || !prefixes ||
        copy_str(r->prefix_text, sizeof r->prefix_text, prefixes) == (size_t)-1)
        return -1;
    prefix_list_parse(&r->prefixes, r->prefix_text);
    return r->prefixes.count ? 0 : -1;
}

void record_lookup(const struct record_state* r, enum canopy_stage_record_op op, int dirfd, const char* path,
                   int failed)
{
    int saved = errno;
    int result = failed ? errno : 0;
    char abs[PMAX];
    int trailing;
    long len = absolute_path(dirfd, path, abs, &trailing);
    if (len < 0 || !prefix_list_holds(&r->prefixes, abs, (size_t)len)) {
        errno = saved;
        return;
    }
    char line[2 * PMAX + 32];
    char* p = line;
    *p++ = (char)op;
    *p++ = '\t';
    p = put_u(p, (unsigned long)(result < 0 ? 0 : result));
    *p++ = '\t';
    for (long i = 0; i < len; ++i) {
        char c = abs[i];
        if (c == '\\' || c == '\n' || c == '\t') {
            *p++ = '\\';
            c = c == '\n' ? 'n' : c == '\t' ? 't' : '\\';
        }
        *p++ = c;
    }
    *p++ = '\n';
    append_to_file(r->file, line, (size_t)(p - line));
    errno = saved;
}
