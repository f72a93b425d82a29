#include "golden.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void kd_golden_check(const char *what, const char *path, const json_t *got)
{
    json_error_t je;
    const char *upd = getenv("KD_UPDATE_GOLDEN");
    if (upd != NULL && strcmp(upd, "1") == 0)
        assert_int_equal(json_dump_file(got, path, JSON_INDENT(2) | JSON_SORT_KEYS), 0);
    json_t *want = json_load_file(path, 0, &je);
    if (want == NULL)
        fail_msg("%s: %s (KD_UPDATE_GOLDEN=1 writes it)", path, je.text);
    if (!json_equal(want, got)) {
        char *dump = json_dumps(got, JSON_INDENT(2) | JSON_SORT_KEYS);
        fail_msg("%s: output differs from %s; got:\n%s", what, path, dump);
    }
    json_decref(want);
}
