/*
 * Prometheus text exposition (https://prometheus.io/docs/instrumenting/
 * exposition_formats/): each family is "# HELP", "# TYPE" and one line per
 * series; histograms are cumulative _bucket lines with an le label, then
 * _sum and _count. Label values escape backslash, double quote and newline;
 * help text escapes backslash and newline.
 */
#include "metrics/metrics.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"

enum kind { COUNTER, GAUGE, HISTOGRAM };

struct series {
    char **values;              /* one per label */
    double value;               /* counter, gauge */
    double sum;                 /* histogram */
    unsigned long long *counts; /* histogram: per bucket, not cumulative; [nb] is +Inf */
    unsigned long long count;
};

struct kd_metric {
    struct kd_metrics *reg;
    enum kind kind;
    char *name, *help;
    char *labels[KD_METRICS_MAX_LABELS];
    size_t nlabels;
    double *buckets;
    size_t nb;
    pthread_mutex_t mu;
    struct series *series;
    size_t nseries, cap;
    struct kd_metric *next;
};

struct kd_metrics {
    struct kd_metric *first, *last;
    void (*on_render)(void *);
    void *on_render_ud;
    struct kd_metric *dropped; /* kd_metrics_dropped_series_total */
};

static bool valid_name(const char *s, bool colon)
{
    if (s == NULL || s[0] == '\0' || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (colon && c == ':')))
            return false;
    }
    return true;
}

static struct kd_metric *add_family(struct kd_metrics *m, enum kind kind, const char *name,
                                    const char *help, const char *labels)
{
    assert(valid_name(name, true));
    for (struct kd_metric *f = m->first; f != NULL; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            /* registered again (a module restarted in the same process): the same family */
            assert(f->kind == kind);
            return f;
        }
    }
    struct kd_metric *f = kd_xcalloc(1, sizeof(*f));
    f->reg = m;
    f->kind = kind;
    f->name = kd_xstrdup(name);
    f->help = kd_xstrdup(help != NULL ? help : "");
    if (labels != NULL && labels[0] != '\0') {
        const char *p = labels;
        while (*p) {
            const char *e = strchr(p, ',');
            size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
            assert(f->nlabels < KD_METRICS_MAX_LABELS);
            f->labels[f->nlabels] = kd_xstrndup(p, n);
            assert(valid_name(f->labels[f->nlabels], false) &&
                   strcmp(f->labels[f->nlabels], "le") != 0);
            f->nlabels++;
            p += n + (e != NULL);
        }
    }
    pthread_mutex_init(&f->mu, NULL);
    if (m->last != NULL)
        m->last->next = f;
    else
        m->first = f;
    m->last = f;
    return f;
}

struct kd_metrics *kd_metrics_new(void)
{
    struct kd_metrics *m = kd_xcalloc(1, sizeof(*m));
    m->dropped = add_family(m, COUNTER, "kd_metrics_dropped_series_total",
                            "Series not created because their family had too many.", NULL);
    return m;
}

void kd_metrics_free(struct kd_metrics *m)
{
    if (m == NULL)
        return;
    struct kd_metric *f = m->first;
    while (f != NULL) {
        struct kd_metric *next = f->next;
        for (size_t i = 0; i < f->nseries; i++) {
            for (size_t l = 0; l < f->nlabels; l++)
                free(f->series[i].values[l]);
            free(f->series[i].values);
            free(f->series[i].counts);
        }
        free(f->series);
        for (size_t l = 0; l < f->nlabels; l++)
            free(f->labels[l]);
        pthread_mutex_destroy(&f->mu);
        free(f->buckets);
        free(f->name);
        free(f->help);
        free(f);
        f = next;
    }
    free(m);
}

struct kd_metric *kd_metrics_counter(struct kd_metrics *m, const char *name, const char *help,
                                     const char *labels)
{
    return add_family(m, COUNTER, name, help, labels);
}

struct kd_metric *kd_metrics_gauge(struct kd_metrics *m, const char *name, const char *help,
                                   const char *labels)
{
    return add_family(m, GAUGE, name, help, labels);
}

struct kd_metric *kd_metrics_histogram(struct kd_metrics *m, const char *name, const char *help,
                                       const char *labels, const double *buckets, size_t nb)
{
    struct kd_metric *f = add_family(m, HISTOGRAM, name, help, labels);
    f->buckets = kd_xmalloc((nb ? nb : 1) * sizeof(double));
    for (size_t i = 0; i < nb; i++) {
        assert(i == 0 || buckets[i] > buckets[i - 1]);
        f->buckets[i] = buckets[i];
    }
    f->nb = nb;
    return f;
}

/* The series for values, created when new; NULL past the cap. Call with f->mu held. */
static struct series *series_of(struct kd_metric *f, const char *const *values)
{
    for (size_t i = 0; i < f->nseries; i++) {
        bool eq = true;
        for (size_t l = 0; l < f->nlabels && eq; l++)
            eq = strcmp(f->series[i].values[l], values[l] != NULL ? values[l] : "") == 0;
        if (eq)
            return &f->series[i];
    }
    if (f->nseries >= KD_METRICS_MAX_SERIES)
        return NULL;
    if (f->nseries == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 4;
        f->series = kd_xrealloc(f->series, f->cap * sizeof(*f->series));
    }
    struct series *s = &f->series[f->nseries++];
    memset(s, 0, sizeof(*s));
    s->values = kd_xcalloc(f->nlabels ? f->nlabels : 1, sizeof(char *));
    for (size_t l = 0; l < f->nlabels; l++)
        s->values[l] = kd_xstrdup(values[l] != NULL ? values[l] : "");
    if (f->kind == HISTOGRAM)
        s->counts = kd_xcalloc(f->nb + 1, sizeof(*s->counts));
    return s;
}

enum op { ADD, SET, OBSERVE };

static void update(struct kd_metric *f, const char *const *values, double v, enum op op)
{
    if (f == NULL)
        return;
    static const char *const none[1] = {NULL};
    assert(f->nlabels == 0 || values != NULL);
    pthread_mutex_lock(&f->mu);
    struct series *s = series_of(f, values != NULL ? values : none);
    if (s != NULL) {
        if (op == ADD)
            s->value += v;
        else if (op == SET)
            s->value = v;
        else {
            size_t b = 0;
            while (b < f->nb && v > f->buckets[b])
                b++;
            s->counts[b]++;
            s->count++;
            s->sum += v;
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (s == NULL && f != f->reg->dropped)
        update(f->reg->dropped, NULL, 1, ADD);
}

void kd_metric_add(struct kd_metric *f, const char *const *values, double v)
{
    if (f != NULL && f->kind == COUNTER && !(v >= 0))
        return; /* counters only go up */
    update(f, values, v, ADD);
}

void kd_metric_inc(struct kd_metric *f, const char *const *values)
{
    update(f, values, 1, ADD);
}

void kd_metric_set(struct kd_metric *f, const char *const *values, double v)
{
    if (f != NULL && f->kind == GAUGE)
        update(f, values, v, SET);
}

void kd_metric_observe(struct kd_metric *f, const char *const *values, double v)
{
    if (f != NULL && f->kind == HISTOGRAM)
        update(f, values, v, OBSERVE);
}

/* ---- rendering ------------------------------------------------------------------------- */

static int put_number(struct kd_buf *b, double v)
{
    if (isnan(v))
        return kd_buf_puts(b, "NaN");
    if (isinf(v))
        return kd_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return kd_buf_printf(b, "%.0f", v);
    char t[40];
    snprintf(t, sizeof(t), "%.15g", v); /* the shortest form that reads back the same */
    if (strtod(t, NULL) != v)
        snprintf(t, sizeof(t), "%.17g", v);
    return kd_buf_puts(b, t);
}

/* s escaped: backslash and newline always, the double quote when quote. */
static int put_escaped(struct kd_buf *b, const char *s, bool quote)
{
    int rc = 0;
    for (; *s && rc == 0; s++) {
        if (*s == '\\')
            rc = kd_buf_puts(b, "\\\\");
        else if (*s == '\n')
            rc = kd_buf_puts(b, "\\n");
        else if (quote && *s == '"')
            rc = kd_buf_puts(b, "\\\"");
        else
            rc = kd_buf_putc(b, *s);
    }
    return rc;
}

/* name{l1="v1",...[,le="x"]} value\n */
static int put_line(struct kd_buf *b, const struct kd_metric *f, const char *suffix,
                    const struct series *s, const char *le, double v)
{
    int rc = kd_buf_printf(b, "%s%s", f->name, suffix);
    bool any = (s != NULL && f->nlabels > 0) || le != NULL;
    if (rc == 0 && any)
        rc = kd_buf_putc(b, '{');
    for (size_t l = 0; rc == 0 && s != NULL && l < f->nlabels; l++) {
        rc = kd_buf_printf(b, "%s%s=\"", l ? "," : "", f->labels[l]);
        if (rc == 0)
            rc = put_escaped(b, s->values[l], true);
        if (rc == 0)
            rc = kd_buf_putc(b, '"');
    }
    if (rc == 0 && le != NULL)
        rc = kd_buf_printf(b, "%sle=\"%s\"", s != NULL && f->nlabels > 0 ? "," : "", le);
    if (rc == 0 && any)
        rc = kd_buf_putc(b, '}');
    if (rc == 0)
        rc = kd_buf_putc(b, ' ');
    if (rc == 0)
        rc = put_number(b, v);
    if (rc == 0)
        rc = kd_buf_putc(b, '\n');
    return rc;
}

static int render_family(struct kd_metric *f, struct kd_buf *b)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    int rc = kd_buf_printf(b, "# HELP %s ", f->name);
    if (rc == 0)
        rc = put_escaped(b, f->help, false);
    if (rc == 0)
        rc = kd_buf_printf(b, "\n# TYPE %s %s\n", f->name, types[f->kind]);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&f->mu);
    if (f->nseries == 0 && f->nlabels == 0 && f->kind != HISTOGRAM)
        rc = put_line(b, f, "", NULL, NULL, 0); /* a plain counter or gauge starts at 0 */
    for (size_t i = 0; rc == 0 && i < f->nseries; i++) {
        const struct series *s = &f->series[i];
        if (f->kind != HISTOGRAM) {
            rc = put_line(b, f, "", s, NULL, s->value);
            continue;
        }
        unsigned long long cum = 0;
        char le[64];
        for (size_t k = 0; rc == 0 && k <= f->nb; k++) {
            cum += s->counts[k];
            if (k < f->nb) {
                struct kd_buf lb = KD_BUF_INIT(sizeof(le) - 1);
                rc = put_number(&lb, f->buckets[k]);
                kd_strlcpy(le, kd_buf_str(&lb), sizeof(le));
                kd_buf_free(&lb);
            } else {
                kd_strlcpy(le, "+Inf", sizeof(le));
            }
            if (rc == 0)
                rc = put_line(b, f, "_bucket", s, le, (double)cum);
        }
        if (rc == 0)
            rc = put_line(b, f, "_sum", s, NULL, s->sum);
        if (rc == 0)
            rc = put_line(b, f, "_count", s, NULL, (double)s->count);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void kd_metrics_on_render(struct kd_metrics *m, void (*fn)(void *ud), void *ud)
{
    m->on_render = fn;
    m->on_render_ud = ud;
}

int kd_metrics_render(struct kd_metrics *m, struct kd_buf *out)
{
    int rc = 0;
    if (m->on_render != NULL)
        m->on_render(m->on_render_ud);
    for (struct kd_metric *f = m->first; f != NULL && rc == 0; f = f->next)
        rc = render_family(f, out);
    return rc;
}
