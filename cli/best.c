/*
 * The best trials of an experiment by its searcher metric (`det trial list
 * --best N`): which way is better, and the ranking itself, as pure
 * functions over the Experiment and Trial objects.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"

bool det_smaller_is_better(const json_t *exp)
{
    json_t *v = det_get(exp, "spec.searcher.smaller_is_better");
    const char *ann = json_string_value(
        json_object_get(det_get(exp, "metadata.annotations"), "kdet.io/smaller-is-better"));
    if (json_is_boolean(v))
        return json_is_true(v);
    return ann == NULL || strcmp(ann, "false") != 0;
}

struct ranked {
    json_t *t;
    double v;
    size_t pos; /* the input order: ties keep it */
};

static int by_value(const void *pa, const void *pb)
{
    const struct ranked *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos ? 1 : 0;
}

json_t *det_best_trials(const json_t *trials, bool smaller_is_better, size_t n)
{
    size_t m = 0, total = json_array_size(trials);
    struct ranked *r = kd_xcalloc(total ? total : 1, sizeof(*r));
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        json_t *v = det_get(t, "status.bestValidation.value");
        if (!json_is_number(v))
            continue;
        double d = json_number_value(v); /* never NaN: JSON has none */
        r[m++] = (struct ranked){t, smaller_is_better ? d : -d, i};
    }
    qsort(r, m, sizeof(*r), by_value);
    for (i = 0; i < m && i < n; i++)
        json_array_append(out, r[i].t);
    free(r);
    return out;
}
