#include "gcview.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "states.h"

bool kd_gc_trial_ended(const struct kd_gc_trial *t)
{
    enum kd_trial_state s;
    return t != NULL && kd_trial_state_parse(t->state, &s) && kd_trial_state_terminal(s);
}

static int by_uid(const void *a, const void *b)
{
    return strcmp(((const struct kd_gc_trial *)a)->uid ?: "",
                  ((const struct kd_gc_trial *)b)->uid ?: "");
}

void kd_gc_trials_sort(struct kd_gc_trial *t, size_t n)
{
    if (n > 1)
        qsort(t, n, sizeof(*t), by_uid);
}

const struct kd_gc_trial *kd_gc_trial_find(const struct kd_gc_trial *t, size_t n, const char *uid)
{
    struct kd_gc_trial k = {.uid = uid};
    return uid != NULL && n > 0 ? bsearch(&k, t, n, sizeof(*t), by_uid) : NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char **kd_gc_parent_starts(const struct kd_gc_trial *t, size_t n, size_t *np)
{
    const char **v = kd_xcalloc(n + 1, sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].parent_request_id != NULL && !kd_gc_trial_ended(&t[i]) && t[i].checkpoint == NULL)
            v[k++] = t[i].parent_request_id;
    qsort(v, k, sizeof(*v), cmp_str);
    *np = k;
    return v;
}

bool kd_gc_parent_start(const char *const *parents, size_t np, const struct kd_gc_trial *ck,
                        const char *uuid)
{
    const char *rid = ck->request_id != NULL ? ck->request_id : "";
    return ck->checkpoint != NULL && uuid != NULL && strcmp(ck->checkpoint, uuid) == 0 && np > 0 &&
           bsearch(&rid, parents, np, sizeof(*parents), cmp_str) != NULL;
}
