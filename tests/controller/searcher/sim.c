/* The simulated controller for searcher tests (see sim.h). */
#include "sim.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/str.h"

void sim_init(struct sim *m, struct kd_searcher *s, sim_fn fn, void *ctx, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->s = s;
    m->fn = fn;
    m->ctx = ctx;
    kd_rng_seed(&m->r, seed);
    m->events = json_array();
    m->ops = json_array();
    m->snaps = json_array();
    m->best = INFINITY;
}

void sim_free(struct sim *m)
{
    for (size_t i = 0; i < m->nt; i++)
        json_decref(m->t[i].hp);
    free(m->t);
    json_decref(m->events);
    json_decref(m->ops);
    json_decref(m->snaps);
}

json_t *sim_ops_json(struct kd_searcher *s, struct kd_search_ops *ops)
{
    json_t *a = json_array();
    for (size_t i = 0; i < ops->n; i++)
        json_array_append_new(a, kd_search_op_to_json(&ops->v[i], kd_searcher_unit(s)));
    kd_search_ops_free(ops);
    return a;
}

json_t *sim_feed(struct kd_searcher *s, const json_t *event)
{
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN] = "";
    int rc = kd_searcher_event(s, event, &ops, err);
    if (rc != 0)
        fail_msg("event rejected: %s", err);
    return sim_ops_json(s, &ops);
}

json_t *sim_config(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad test config at %d:%d: %s", je.line, je.column, je.text);
    return j;
}

static struct sim_trial *find(struct sim *m, const char *id)
{
    for (size_t i = 0; i < m->nt; i++)
        if (strcmp(m->t[i].id, id) == 0)
            return &m->t[i];
    fail_msg("op names unknown trial %s", id);
    return NULL;
}

static void apply_ops(struct sim *m, json_t *ops)
{
    size_t i;
    json_t *op;
    json_array_foreach(ops, i, op)
    {
        const char *kind = json_string_value(json_object_get(op, "op"));
        const char *id = json_string_value(json_object_get(op, "request_id"));
        if (strcmp(kind, "create") == 0) {
            if (m->nt == m->capt) {
                m->capt = m->capt ? m->capt * 2 : 64;
                m->t = kd_xrealloc(m->t, m->capt * sizeof(*m->t));
            }
            struct sim_trial *t = &m->t[m->nt++];
            memset(t, 0, sizeof(*t));
            kd_strlcpy(t->id, id, sizeof(t->id));
            t->hp = json_incref(json_object_get(op, "hparams"));
            t->seed = (uint32_t)json_integer_value(json_object_get(op, "seed"));
            const char *p = json_string_value(json_object_get(op, "parent"));
            if (p)
                kd_strlcpy(t->parent, p, sizeof(t->parent));
        } else if (strcmp(kind, "validate_after") == 0) {
            struct sim_trial *t = find(m, id);
            assert_true(t->stage <= 1);
            t->length = json_integer_value(json_object_get(op, "length"));
        } else if (strcmp(kind, "close") == 0) {
            struct sim_trial *t = find(m, id);
            assert_true(t->stage <= 1);
            t->stage = 2;
            t->length = 0;
        } else if (strcmp(kind, "shutdown") == 0) {
            assert_false(m->shutdown);
            m->shutdown = true;
            kd_strlcpy(m->shutdown_reason, json_string_value(json_object_get(op, "reason")),
                       sizeof(m->shutdown_reason));
            m->shutdown_failure = json_is_true(json_object_get(op, "failure"));
        }
    }
}

static void record(struct sim *m, json_t *event, json_t *ops)
{
    json_array_append_new(m->events, event);
    json_array_append(m->ops, ops);
    if (m->keep_snapshots) {
        json_t *sn = kd_searcher_snapshot(m->s);
        char *txt = json_dumps(sn, JSON_COMPACT);
        json_array_append_new(m->snaps, json_string(txt));
        free(txt);
        json_decref(sn);
    }
    apply_ops(m, ops);
    json_decref(ops);
    double p = kd_searcher_progress(m->s);
    if (p < m->progress - 1e-12 || p < 0 || p > 1)
        fail_msg("progress went from %g to %g", m->progress, p);
    m->progress = p;
    if (m->shutdown)
        assert_true(p == 1.0);
}

long sim_run(struct sim *m, long max_events)
{
    long n = 0;
    json_t *ev = json_pack("{ss}", "event", "initial");
    record(m, ev, sim_feed(m->s, ev));
    n++;
    while (n < max_events) {
        /* trials with something to say */
        size_t *ready = kd_xcalloc(m->nt + 1, sizeof(size_t));
        size_t nr = 0;
        for (size_t i = 0; i < m->nt; i++) {
            struct sim_trial *t = &m->t[i];
            if (t->stage == 0 || t->stage == 2 || (t->stage == 1 && t->length > 0))
                ready[nr++] = i;
        }
        if (nr == 0) {
            free(ready);
            break;
        }
        struct sim_trial *t = &m->t[ready[m->shuffle ? kd_rng_below(&m->r, nr) : 0]];
        free(ready);
        if (t->stage == 0) {
            ev = json_pack("{ssss}", "event", "trial_created", "request_id", t->id);
            t->stage = 1;
        } else if (t->stage == 2) {
            ev = json_pack("{ssss}", "event", "trial_closed", "request_id", t->id);
            t->stage = 3;
        } else if (m->p_error > 0 && kd_rng_uniform(&m->r) < m->p_error) {
            ev = json_pack("{ssssss}", "event", "trial_exited_early", "request_id", t->id, "reason",
                           "errored");
            t->stage = 3;
            t->length = 0;
        } else if (kd_searcher_time_metric(m->s) != NULL) {
            /* Trains on its own: a validation every time_step, with the time reached. */
            t->done += m->time_step > 0 ? m->time_step : 1;
            double metric = m->fn(t->hp, t->done, m->ctx);
            ev =
                json_pack("{sssssfsIsf}", "event", "validation_completed", "request_id", t->id,
                          "metric", metric, "length", (json_int_t)t->done, "time", (double)t->done);
            if (metric < m->best)
                m->best = metric;
        } else {
            int64_t len = t->length;
            double metric = m->fn(t->hp, len, m->ctx);
            t->length = 0;
            ev = json_pack("{sssssfsI}", "event", "validation_completed", "request_id", t->id,
                           "metric", metric, "length", (json_int_t)len);
            if (metric < m->best)
                m->best = metric;
        }
        record(m, ev, sim_feed(m->s, ev));
        n++;
    }
    return n;
}
