/*
 * Overviews of metric series for charts: M4 downsampling (per bucket of
 * steps, the first, lowest, highest and last point), which draws a line
 * the same as all its points at one pixel per bucket, keeps every trial's
 * extremes and last value, and merges: M4 of the M4 points of finer
 * buckets is M4 of the points themselves. Buckets are 2^shift steps wide
 * from step 0, so a coarser overview is always a merge of a finer one.
 * Pure functions on named series; the sketcher (sketcher.c) keeps two such
 * overviews per trial and kind in metric_sketches.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/alloc.h"
#include "store/store_int.h"

int kd_sketch__shift(int64_t max_step, int buckets, int min_shift)
{
    int s = min_shift < 0 ? 0 : min_shift;
    if (buckets < 1)
        buckets = 1;
    while (s < 62 && (max_step >> s) >= buckets)
        s++;
    return s;
}

int kd_sketch__buckets(int max_points)
{
    int b = 1;
    while (b * 2 <= max_points / 4 && b * 2 <= KD_SKETCH_FINE)
        b *= 2;
    return b;
}

size_t kd_sketch__m4(struct kd_pt *p, size_t n, int shift)
{
    size_t out = 0, i = 0;
    while (i < n) {
        int64_t b = p[i].step >> shift;
        size_t j = i, lo = i, hi = i;
        while (j < n && (p[j].step >> shift) == b) {
            if (p[j].v < p[lo].v)
                lo = j;
            if (p[j].v > p[hi].v)
                hi = j;
            j++;
        }
        /* first, lowest, highest, last: each once, in step order */
        size_t idx[4] = {i, lo < hi ? lo : hi, lo < hi ? hi : lo, j - 1};
        struct kd_pt keep[4];
        size_t k = 0;
        for (int x = 0; x < 4; x++)
            if (k == 0 || idx[x] != idx[x - 1])
                keep[k++] = p[idx[x]];
        for (size_t x = 0; x < k; x++)
            p[out++] = keep[x];
        i = j;
    }
    return out;
}

struct kd_series *kd_sketch__series(struct kd_series_set *set, const char *name)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->s[i].name, name) == 0)
            return &set->s[i];
    if (set->n == set->cap) {
        set->cap = set->cap ? 2 * set->cap : 4;
        set->s = kd_xrealloc(set->s, set->cap * sizeof(*set->s));
    }
    struct kd_series *s = &set->s[set->n++];
    memset(s, 0, sizeof(*s));
    s->name = kd_xstrdup(name);
    return s;
}

void kd_sketch__add(struct kd_series *s, int64_t step, double v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->pt = kd_xrealloc(s->pt, s->cap * sizeof(*s->pt));
    }
    s->pt[s->n].step = step;
    s->pt[s->n].v = v;
    s->n++;
}

/* Insertion order breaks ties: a point added later for the same step wins. */
struct ordered {
    struct kd_pt p;
    size_t at;
};

static int by_step(const void *a, const void *b)
{
    const struct ordered *x = a, *y = b;
    if (x->p.step != y->p.step)
        return x->p.step < y->p.step ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

void kd_sketch__settle(struct kd_series *s)
{
    bool sorted = true;
    for (size_t i = 1; i < s->n && sorted; i++)
        sorted = s->pt[i - 1].step < s->pt[i].step;
    if (sorted)
        return;
    struct ordered *o = kd_xcalloc(s->n, sizeof(*o));
    for (size_t i = 0; i < s->n; i++) {
        o[i].p = s->pt[i];
        o[i].at = i;
    }
    qsort(o, s->n, sizeof(*o), by_step);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i + 1 < s->n && o[i + 1].p.step == o[i].p.step)
            continue; /* a newer point of the same step follows */
        s->pt[k++] = o[i].p;
    }
    s->n = k;
    free(o);
}

void kd_sketch__reduce(struct kd_series_set *set, int shift)
{
    for (size_t i = 0; i < set->n; i++) {
        kd_sketch__settle(&set->s[i]);
        set->s[i].n = kd_sketch__m4(set->s[i].pt, set->s[i].n, shift);
    }
}

void kd_sketch__clip(struct kd_series_set *set, int64_t from, int64_t to)
{
    for (size_t i = 0; i < set->n; i++) {
        struct kd_series *s = &set->s[i];
        size_t k = 0;
        for (size_t j = 0; j < s->n; j++)
            if (s->pt[j].step >= from && s->pt[j].step <= to)
                s->pt[k++] = s->pt[j];
        s->n = k;
    }
}

/* A metric value that can be drawn: a JSON integer or a finite real (not a bool). */
static bool value_of(const json_t *j, double *v)
{
    if (json_is_integer(j))
        *v = (double)json_integer_value(j);
    else if (json_is_real(j))
        *v = json_real_value(j);
    else
        return false;
    return isfinite(*v);
}

void kd_sketch__add_metrics(struct kd_series_set *set, int64_t step, const json_t *metrics,
                            int64_t *max_step)
{
    const char *name;
    json_t *v;
    if (step > *max_step)
        *max_step = step;
    json_object_foreach((json_t *)metrics, name, v)
    {
        double d;
        if (value_of(v, &d))
            kd_sketch__add(kd_sketch__series(set, name), step, d);
    }
}

int kd_sketch__add_row(struct kd_series_set *set, int64_t step, const char *metrics, size_t len,
                       int64_t *max_step, char *err)
{
    json_error_t je;
    json_t *m = json_loadb(metrics, len, 0, &je);
    if (!json_is_object(m)) {
        json_decref(m);
        return kd_seterr(err, KD_EPARSE, "metrics of step %lld: not a JSON object: %s",
                         (long long)step, je.text);
    }
    kd_sketch__add_metrics(set, step, m, max_step);
    json_decref(m);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct kd_series *)a)->name, ((const struct kd_series *)b)->name);
}

/* s as a JSON string: quotes, backslashes and control characters escaped; UTF-8 as it is. */
static int json_str(struct kd_buf *b, const char *s)
{
    int rc = kd_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == 0; p++) {
        if (*p == '"' || *p == '\\')
            rc = kd_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            rc = kd_buf_printf(b, "\\u%04x", *p);
        else
            rc = kd_buf_putc(b, (char)*p);
    }
    return rc ? rc : kd_buf_putc(b, '"');
}

int kd_sketch__encode(struct kd_buf *b, struct kd_series_set *set)
{
    int rc = kd_buf_putc(b, '{');
    bool first = true;
    if (set->n > 1)
        qsort(set->s, set->n, sizeof(*set->s), by_name);
    for (size_t i = 0; i < set->n && rc == 0; i++) {
        const struct kd_series *s = &set->s[i];
        if (s->n == 0)
            continue;
        if (!first)
            rc = kd_buf_putc(b, ',');
        first = false;
        if (rc == 0)
            rc = json_str(b, s->name);
        if (rc == 0)
            rc = kd_buf_puts(b, ":{\"steps\":[");
        for (size_t k = 0; k < s->n && rc == 0; k++)
            rc = kd_buf_printf(b, k ? ",%lld" : "%lld", (long long)s->pt[k].step);
        if (rc == 0)
            rc = kd_buf_puts(b, "],\"values\":[");
        /* Nine significant digits: what a chart can show, at about half the bytes of 17. */
        for (size_t k = 0; k < s->n && rc == 0; k++)
            rc = kd_buf_printf(b, k ? ",%.9g" : "%.9g", s->pt[k].v);
        if (rc == 0)
            rc = kd_buf_puts(b, "]}");
    }
    return rc ? rc : kd_buf_putc(b, '}');
}

int kd_sketch__decode(struct kd_series_set *set, const char *text, size_t len, char *err)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je), *sv;
    const char *name;
    int rc = 0;
    if (!json_is_object(o)) {
        rc = kd_seterr(err, KD_ECORRUPT, "metric sketch: not a JSON object: %s", je.text);
        goto out;
    }
    json_object_foreach(o, name, sv)
    {
        json_t *st = json_object_get(sv, "steps"), *va = json_object_get(sv, "values");
        size_t n = json_array_size(st);
        if (!json_is_array(st) || !json_is_array(va) || json_array_size(va) != n) {
            rc = kd_seterr(err, KD_ECORRUPT, "metric sketch: series %s: steps and values differ",
                           name);
            goto out;
        }
        struct kd_series *s = kd_sketch__series(set, name);
        for (size_t i = 0; i < n; i++) {
            double v;
            json_t *x = json_array_get(st, i);
            if (!json_is_integer(x) || !value_of(json_array_get(va, i), &v)) {
                rc = kd_seterr(err, KD_ECORRUPT, "metric sketch: series %s: point %zu", name, i);
                goto out;
            }
            kd_sketch__add(s, json_integer_value(x), v);
        }
    }
out:
    json_decref(o);
    return rc;
}

void kd_sketch__free(struct kd_series_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++) {
        free(set->s[i].name);
        free(set->s[i].pt);
    }
    free(set->s);
    memset(set, 0, sizeof(*set));
}
