/*
 * Keeping the metric overviews: a thread folds the metric rows committed
 * since metric_sketch_mark into each trial's and kind's two M4 overviews
 * (sketch.c) in metric_sketches, so that a page drawing 1,000 trials reads
 * 1,000 small rows instead of a million. Every transaction that inserts
 * metrics, in any controller replica, takes KD_STORE_METRICS_LOCK_SQL
 * first, so ids are committed in order and the mark is a clean cut; rows
 * after it are folded in by the readers themselves (query.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "store/store_int.h"

#define CHUNK_ROWS 20000  /* rows folded in one transaction */
#define SAVE_GROUPS 200   /* overviews written in one statement */
#define REBUILD_PAGE 5000 /* rows read at once when an overview is made again */
#define IDLE_MS 5000      /* a look without a poke (rows of another process, a migration) */
#define BACKOFF_MAX_MS 30000
#define FOLD_PACE 3
#define BUF_MAX (256u << 20) /* the overviews of one statement, the keys of a chunk */

static const char *const MARK_SQL = "SELECT upto_id FROM metric_sketch_mark FOR UPDATE";
static const char *const ROWS_SQL =
    "SELECT id, trial_id, kind, step, metrics FROM metrics WHERE id > $1::bigint"
    " ORDER BY id LIMIT $2::bigint";
static const char *const OLD_SQL =
    "SELECT s.trial_id, s.kind, s.max_step, s.coarse_shift, s.coarse, s.fine_shift, s.fine"
    " FROM metric_sketches s JOIN unnest($1::bigint[], $2::text[]) AS k (trial_id, kind)"
    " USING (trial_id, kind) ORDER BY s.trial_id, s.kind COLLATE \"C\"";
/* A step reported twice counts once, the newest row: as every reader of the series. */
static const char *const ALL_SQL =
    "SELECT DISTINCT ON (step) step, metrics FROM metrics WHERE trial_id = $1::bigint"
    " AND kind = $2 AND id <= $3::bigint AND step > $4::bigint ORDER BY step, id DESC"
    " LIMIT $5::bigint";
/* A trial deleted meanwhile has no rows left to fold: its overview is not written. */
static const char *const SAVE_SQL =
    "INSERT INTO metric_sketches (trial_id, kind, max_step, coarse_shift, coarse, fine_shift, fine)"
    " SELECT x.trial_id, x.kind, x.max_step, x.coarse_shift, x.coarse, x.fine_shift, x.fine"
    " FROM json_to_recordset($1::json) AS x (trial_id bigint, kind text, max_step bigint,"
    "  coarse_shift integer, coarse json, fine_shift integer, fine json)"
    " WHERE EXISTS (SELECT 1 FROM trials t WHERE t.id = x.trial_id)"
    " ON CONFLICT (trial_id, kind) DO UPDATE SET max_step = excluded.max_step,"
    " coarse_shift = excluded.coarse_shift, coarse = excluded.coarse,"
    " fine_shift = excluded.fine_shift, fine = excluded.fine";
static const char *const MOVE_SQL = "UPDATE metric_sketch_mark SET upto_id = $1::bigint";

/* One trial's and kind's overviews while they are folded. */
struct over {
    int64_t max_step;
    int shift[2];
    struct kd_series_set lvl[2]; /* coarse, fine */
};

static const int LEVEL_BUCKETS[2] = {KD_SKETCH_COARSE, KD_SKETCH_FINE};

static void over_free(struct over *o)
{
    kd_sketch__free(&o->lvl[0]);
    kd_sketch__free(&o->lvl[1]);
}

/*
 * The overviews this process folded last, kept between folds so that a
 * busy trial's overview is not read back and decoded every time. They are
 * good only while metric_sketch_mark is where this process left it: when
 * it moved (another replica folded, a fold was rolled back) they are all
 * dropped. Bounded by SKETCH_CACHE_BYTES, the least recently folded
 * dropped first.
 */
#define SKETCH_CACHE_BYTES (32u << 20)

struct cached {
    int64_t trial;
    char kind[16];
    uint64_t used; /* the fold that last touched it */
    size_t bytes;  /* over_bytes(&o) when it was last touched */
    struct over o;
};

struct kd_sketch_cache {
    pthread_mutex_t mu; /* held for a whole fold */
    int64_t mark;       /* the mark the overviews are folded up to; -1: none is good */
    uint64_t folds;
    struct cached *e; /* e[0..sorted) sorted by (trial, kind); a fold appends after them */
    size_t n, cap, sorted;
    size_t bytes; /* the sum of e[].bytes */
};

struct kd_sketch_cache *kd_sketch_cache__new(void)
{
    struct kd_sketch_cache *c = kd_xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->mark = -1;
    return c;
}

static void cache_clear(struct kd_sketch_cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        over_free(&c->e[i].o);
    c->n = c->sorted = 0;
    c->bytes = 0;
}

void kd_sketch_cache__free(struct kd_sketch_cache *c)
{
    if (!c)
        return;
    cache_clear(c);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int cached_cmp(int64_t trial, const char *kind, const struct cached *e)
{
    if (trial != e->trial)
        return trial < e->trial ? -1 : 1;
    return strcmp(kind, e->kind);
}

/* The cached overview of (trial, kind), or NULL. */
static struct cached *cache_find(struct kd_sketch_cache *c, int64_t trial, const char *kind)
{
    size_t lo = 0, hi = c->sorted;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int k = cached_cmp(trial, kind, &c->e[mid]);
        if (k == 0)
            return &c->e[mid];
        if (k < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static size_t over_bytes(const struct over *o)
{
    size_t b = sizeof(struct cached);
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < o->lvl[l].n; i++)
            b += o->lvl[l].s[i].cap * sizeof(struct kd_pt) + strlen(o->lvl[l].s[i].name) + 1 +
                 sizeof(struct kd_series);
    return b;
}

/* Keep o (moved in) as the overview of (trial, kind); appended, cache_settle sorts. */
static void cache_put(struct kd_sketch_cache *c, int64_t trial, const char *kind, struct over *o)
{
    if (strlen(kind) >= sizeof(c->e[0].kind)) {
        over_free(o);
        return;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->e = kd_xrealloc(c->e, c->cap * sizeof(*c->e));
    }
    struct cached *e = &c->e[c->n++];
    e->trial = trial;
    snprintf(e->kind, sizeof(e->kind), "%s", kind);
    e->used = c->folds;
    e->o = *o;
    memset(o, 0, sizeof(*o));
    e->bytes = over_bytes(&e->o);
    c->bytes += e->bytes;
}

/* e's overview grew (or was rebuilt) in this fold. */
static void cache_touched(struct kd_sketch_cache *c, struct cached *e)
{
    size_t now = over_bytes(&e->o);
    c->bytes = c->bytes - e->bytes + now;
    e->bytes = now;
    e->used = c->folds;
}

static int by_used_desc(const void *pa, const void *pb)
{
    const struct cached *a = pa, *b = pb;
    return (a->used < b->used) - (a->used > b->used);
}

static int by_cached_key(const void *pa, const void *pb)
{
    const struct cached *a = pa, *b = pb;
    return cached_cmp(a->trial, a->kind, b);
}

/*
 * After a fold: within the byte budget (past it, the most recently folded are kept), sorted
 * by key again. Within the budget, only a fold's appended entries make a sort needed.
 */
static void cache_settle(struct kd_sketch_cache *c)
{
    if (c->bytes > SKETCH_CACHE_BYTES) {
        qsort(c->e, c->n, sizeof(*c->e), by_used_desc);
        size_t bytes = 0, keep = 0;
        while (keep < c->n && bytes + c->e[keep].bytes <= SKETCH_CACHE_BYTES)
            bytes += c->e[keep++].bytes;
        for (size_t i = keep; i < c->n; i++)
            over_free(&c->e[i].o);
        c->n = keep;
        c->bytes = bytes;
        c->sorted = 0;
    }
    if (c->sorted < c->n)
        qsort(c->e, c->n, sizeof(*c->e), by_cached_key);
    c->sorted = c->n;
}

/* Add fresh's points (all after o's last step, or o empty) to both levels and reduce them. */
static void fold(struct over *o, const struct kd_series_set *fresh, int64_t max_step)
{
    if (max_step > o->max_step)
        o->max_step = max_step;
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < fresh->n; i++) {
            struct kd_series *dst = kd_sketch__series(&o->lvl[l], fresh->s[i].name);
            for (size_t k = 0; k < fresh->s[i].n; k++)
                kd_sketch__add(dst, fresh->s[i].pt[k].step, fresh->s[i].pt[k].v);
        }
        o->shift[l] = kd_sketch__shift(o->max_step, LEVEL_BUCKETS[l], o->shift[l]);
        kd_sketch__reduce(&o->lvl[l], o->shift[l]);
    }
}

/* The overviews made again from every row of the trial and kind up to id upto, page by page. */
static int rebuild(struct kd_store *s, PGconn *c, int64_t trial, const char *kind, int64_t upto,
                   struct over *o, char *err)
{
    int rc = 0;
    PGresult *r = NULL;
    char tb[24], ub[24], ab[24], lb[24];
    int64_t after = -1;
    over_free(o);
    memset(o, 0, sizeof(*o));
    o->max_step = -1;
    snprintf(tb, sizeof(tb), "%lld", (long long)trial);
    snprintf(ub, sizeof(ub), "%lld", (long long)upto);
    snprintf(lb, sizeof(lb), "%d", REBUILD_PAGE);
    for (;;) {
        struct kd_series_set fresh = {0};
        int64_t top = o->max_step;
        snprintf(ab, sizeof(ab), "%lld", (long long)after);
        const char *p[5] = {tb, kind, ub, ab, lb};
        rc = kd_store__conn_exec(s, c, "metric overview rows", ALL_SQL, 5, p, &r, err);
        if (rc != 0)
            break;
        int n = PQntuples(r);
        for (int i = 0; i < n && rc == 0; i++) {
            int64_t step = 0;
            if (kd_parse_i64(PQgetvalue(r, i, 0), &step) != 0)
                rc = kd_seterr(err, KD_EPROTO, "metric overview rows: bad step");
            else
                rc = kd_sketch__add_row(&fresh, step, PQgetvalue(r, i, 1),
                                        (size_t)PQgetlength(r, i, 1), &top, err);
            after = step;
        }
        if (rc == 0)
            fold(o, &fresh, top);
        kd_sketch__free(&fresh);
        PQclear(r);
        r = NULL;
        if (rc != 0 || n < REBUILD_PAGE)
            break;
    }
    return rc;
}

/* Append o as one record of SAVE_SQL's array. */
static int save_record(struct kd_buf *b, int64_t trial, const char *kind, struct over *o)
{
    int rc = kd_buf_printf(b,
                           "%s{\"trial_id\":%lld,\"kind\":\"%s\",\"max_step\":%lld,"
                           "\"coarse_shift\":%d,\"coarse\":",
                           b->len > 1 ? "," : "", (long long)trial, kind,
                           (long long)(o->max_step < 0 ? 0 : o->max_step), o->shift[0]);
    if (rc == 0)
        rc = kd_sketch__encode(b, &o->lvl[0]);
    if (rc == 0)
        rc = kd_buf_printf(b, ",\"fine_shift\":%d,\"fine\":", o->shift[1]);
    if (rc == 0)
        rc = kd_sketch__encode(b, &o->lvl[1]);
    return rc ? rc : kd_buf_putc(b, '}');
}

static int save(struct kd_store *s, PGconn *c, struct kd_buf *b, char *err)
{
    int rc = kd_buf_putc(b, ']');
    if (rc != 0)
        return kd_seterr(err, rc, "metric overviews: too big to write");
    const char *p[1] = {kd_buf_str(b)};
    rc = kd_store__conn_exec(s, c, "metric overviews", SAVE_SQL, 1, p, NULL, err);
    kd_buf_reset(b);
    return rc ? rc : kd_buf_putc(b, '[');
}

/* A row of the chunk: its trial, kind and position (rows of a trial and kind stay in id order). */
struct ref {
    int64_t trial;
    const char *kind;
    int row;
};

static int by_key(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    if (a->trial != b->trial)
        return a->trial < b->trial ? -1 : 1;
    int k = strcmp(a->kind, b->kind);
    return k ? k : (a->row > b->row) - (a->row < b->row);
}

struct step_ctx {
    int max_rows;
    int folded;
    struct kd_sketch_cache *cache;
    int64_t mark_after; /* where the fold leaves the mark */
};

/* The earlier overviews of the chunk's keys (refs[0..n), sorted), in the same order. */
static int old_overviews(struct kd_store *s, PGconn *c, const struct ref *refs, size_t n,
                         PGresult **out, char *err)
{
    struct kd_buf ids = KD_BUF_INIT(BUF_MAX), kinds = KD_BUF_INIT(BUF_MAX);
    int rc = kd_buf_putc(&ids, '{');
    if (rc == 0)
        rc = kd_buf_putc(&kinds, '{');
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i > 0 && refs[i].trial == refs[i - 1].trial && !strcmp(refs[i].kind, refs[i - 1].kind))
            continue;
        const char *sep = ids.len > 1 ? "," : "";
        rc = kd_buf_printf(&ids, "%s%lld", sep, (long long)refs[i].trial);
        if (rc == 0)
            rc = kd_buf_printf(&kinds, "%s%s", sep, refs[i].kind);
    }
    if (rc == 0)
        rc = kd_buf_putc(&ids, '}');
    if (rc == 0)
        rc = kd_buf_putc(&kinds, '}');
    if (rc != 0) {
        rc = kd_seterr(err, rc, "metric overviews: cannot list the keys");
    } else {
        const char *p[2] = {kd_buf_str(&ids), kd_buf_str(&kinds)};
        rc = kd_store__conn_exec(s, c, "metric overviews", OLD_SQL, 2, p, out, err);
    }
    kd_buf_free(&ids);
    kd_buf_free(&kinds);
    return rc;
}

/* The earlier overview of row `row` of OLD_SQL's result into o. */
static int load_old(PGresult *r, int row, struct over *o, char *err)
{
    int rc = 0;
    int64_t shift[2] = {0, 0};
    if (kd_parse_i64(PQgetvalue(r, row, 2), &o->max_step) != 0 ||
        kd_parse_i64(PQgetvalue(r, row, 3), &shift[0]) != 0 ||
        kd_parse_i64(PQgetvalue(r, row, 5), &shift[1]) != 0 || shift[0] < 0 || shift[0] > 62 ||
        shift[1] < 0 || shift[1] > 62)
        return kd_seterr(err, KD_ECORRUPT, "metric overview of trial %s: bad numbers",
                         PQgetvalue(r, row, 0));
    o->shift[0] = (int)shift[0];
    o->shift[1] = (int)shift[1];
    for (int l = 0; l < 2 && rc == 0; l++)
        rc = kd_sketch__decode(&o->lvl[l], PQgetvalue(r, row, 4 + 2 * l),
                               (size_t)PQgetlength(r, row, 4 + 2 * l), err);
    return rc;
}

static int sketch_step(struct kd_store *s, PGconn *c, void *ctx, char *err)
{
    struct step_ctx *x = ctx;
    PGresult *mr = NULL, *rows = NULL, *old = NULL;
    struct ref *refs = NULL, *uncached = NULL;
    struct kd_buf out = KD_BUF_INIT(BUF_MAX);
    int64_t mark = 0, last = 0;
    char mb[24], lb[24];
    int rc = kd_store__conn_exec(s, c, "metric overview mark", MARK_SQL, 0, NULL, &mr, err);
    if (rc != 0)
        goto out;
    if (PQntuples(mr) != 1 || kd_parse_i64(PQgetvalue(mr, 0, 0), &mark) != 0) {
        rc = kd_seterr(err, KD_ECORRUPT, "metric_sketch_mark: not one row with a number");
        goto out;
    }
    struct kd_sketch_cache *cc = x->cache;
    if (cc->mark != mark)
        cache_clear(cc); /* folded elsewhere, or our last fold did not commit */
    cc->mark = -1;       /* good again once this fold commits */
    cc->folds++;
    cc->sorted = cc->n;
    x->mark_after = mark;
    snprintf(mb, sizeof(mb), "%lld", (long long)mark);
    snprintf(lb, sizeof(lb), "%d", x->max_rows);
    const char *rp[2] = {mb, lb};
    rc = kd_store__conn_exec(s, c, "metric overview rows", ROWS_SQL, 2, rp, &rows, err);
    if (rc != 0)
        goto out;
    int n = PQntuples(rows);
    x->folded = n;
    if (n == 0)
        goto out;
    if (kd_parse_i64(PQgetvalue(rows, n - 1, 0), &last) != 0) {
        rc = kd_seterr(err, KD_EPROTO, "metric rows: bad id");
        goto out;
    }
    size_t nr = 0;
    refs = kd_xcalloc((size_t)n, sizeof(*refs));
    for (int i = 0; i < n; i++) {
        const char *kind = PQgetvalue(rows, i, 2);
        if (strcmp(kind, "profiling") == 0)
            continue; /* the profiler's samples are drawn from their own rows */
        if (kd_parse_i64(PQgetvalue(rows, i, 1), &refs[nr].trial) != 0) {
            rc = kd_seterr(err, KD_EPROTO, "metric rows: bad trial id");
            goto out;
        }
        refs[nr].kind = kind;
        refs[nr++].row = i;
    }
    qsort(refs, nr, sizeof(*refs), by_key);
    /* Only the keys this process does not hold are read back. */
    uncached = kd_xcalloc(nr ? nr : 1, sizeof(*uncached));
    size_t nu = 0;
    for (size_t i = 0; i < nr; i++)
        if ((i == 0 || refs[i].trial != refs[i - 1].trial ||
             strcmp(refs[i].kind, refs[i - 1].kind)) &&
            cache_find(cc, refs[i].trial, refs[i].kind) == NULL)
            uncached[nu++] = refs[i];
    if (nu > 0 && (rc = old_overviews(s, c, uncached, nu, &old, err)) != 0)
        goto out;
    rc = kd_buf_putc(&out, '[');
    int oi = 0, saved = 0;
    for (size_t g = 0; g < nr && rc == 0;) {
        size_t e = g;
        while (e < nr && refs[e].trial == refs[g].trial && !strcmp(refs[e].kind, refs[g].kind))
            e++;
        struct cached *ce = cache_find(cc, refs[g].trial, refs[g].kind);
        struct over mine = {.max_step = -1}, *o = ce ? &ce->o : &mine;
        struct kd_series_set fresh = {0};
        int64_t top = -1, low = INT64_MAX;
        for (size_t i = g; i < e && rc == 0; i++) {
            int64_t step = 0;
            if (kd_parse_i64(PQgetvalue(rows, refs[i].row, 3), &step) != 0) {
                rc = kd_seterr(err, KD_EPROTO, "metric rows: bad step");
                break;
            }
            if (step < low)
                low = step;
            rc = kd_sketch__add_row(&fresh, step, PQgetvalue(rows, refs[i].row, 4),
                                    (size_t)PQgetlength(rows, refs[i].row, 4), &top, err);
        }
        /* OLD_SQL's rows come in the keys' order: walk them alongside. */
        int64_t ot = 0;
        bool had = ce != NULL;
        while (!had && rc == 0 && old && oi < PQntuples(old) &&
               kd_parse_i64(PQgetvalue(old, oi, 0), &ot) == 0 &&
               (ot < refs[g].trial ||
                (ot == refs[g].trial && strcmp(PQgetvalue(old, oi, 1), refs[g].kind) < 0)))
            oi++;
        if (!had && rc == 0 && old && oi < PQntuples(old) && ot == refs[g].trial &&
            strcmp(PQgetvalue(old, oi, 1), refs[g].kind) == 0) {
            had = true;
            rc = load_old(old, oi, &mine, err);
        }
        if (rc == 0 && had && low <= o->max_step) /* a step again (a retried attempt) */
            rc = rebuild(s, c, refs[g].trial, refs[g].kind, last, o, err);
        else if (rc == 0)
            fold(o, &fresh, top);
        if (rc == 0)
            rc = save_record(&out, refs[g].trial, refs[g].kind, o);
        if (ce != NULL)
            cache_touched(cc, ce);
        else if (rc == 0)
            cache_put(cc, refs[g].trial, refs[g].kind, &mine);
        over_free(&mine);
        kd_sketch__free(&fresh);
        if (rc == 0 && ++saved % SAVE_GROUPS == 0)
            rc = save(s, c, &out, err);
        g = e;
    }
    if (rc == 0 && out.len > 1)
        rc = save(s, c, &out, err);
    if (rc == 0) {
        snprintf(lb, sizeof(lb), "%lld", (long long)last);
        const char *mp[1] = {lb};
        rc = kd_store__conn_exec(s, c, "metric overview mark", MOVE_SQL, 1, mp, NULL, err);
    }
    if (rc == 0) {
        x->mark_after = last;
        cache_settle(cc);
    }
out:
    PQclear(mr);
    PQclear(rows);
    PQclear(old);
    free(refs);
    free(uncached);
    kd_buf_free(&out);
    return rc;
}

int kd_store_metrics_sketch(struct kd_store *s, int max_rows, int *folded, char *err)
{
    struct step_ctx x = {.max_rows = max_rows > 0 ? max_rows : CHUNK_ROWS,
                         .cache = s->sketch_cache};
    pthread_mutex_lock(&x.cache->mu);
    int rc = kd_store__tx(s, "metric overviews", sketch_step, &x, err);
    if (rc == 0)
        x.cache->mark = x.mark_after;
    pthread_mutex_unlock(&x.cache->mu);
    if (folded)
        *folded = rc == 0 ? x.folded : 0;
    return rc;
}

/* ---- the thread ------------------------------------------------------------ */

struct kd_sketcher {
    struct kd_store *s;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop, poked;
};

/* Wait on wake until deadline (kd_mono_ms) or until stop; with `poke`, a poke ends it too. */
static void wait_until(struct kd_sketcher *k, int64_t deadline, bool poke)
{
    for (int64_t now = kd_mono_ms(); !k->stop && !(poke && k->poked) && now < deadline;
         now = kd_mono_ms()) {
        struct timespec ts;
        pthread_cond_timedwait(&k->wake, &k->mu,
                               kd_deadline_ts(CLOCK_REALTIME, deadline - now, &ts));
    }
}

/*
 * Fold when the writer pokes (it committed rows), at most once per
 * interval while rows keep coming, chunk after chunk while there is more,
 * and every IDLE_MS anyway; back off after a failure. Between two folds it
 * waits at least FOLD_PACE times as long as the last one took, so that
 * under a heavy ingest it takes at most about a quarter of a core, and
 * each fold carries more rows per overview written.
 */
static void *sketcher_main(void *arg)
{
    struct kd_sketcher *k = arg;
    int interval = k->s->opts.sketch_interval_ms, backoff = 0;
    int64_t warned = 0;
    bool more = true; /* at start: rows may be waiting (a restart, a migration) */
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        if (!more)
            wait_until(k, kd_mono_ms() + IDLE_MS, true);
        if (k->stop)
            break;
        k->poked = false;
        pthread_mutex_unlock(&k->mu);
        char err[KD_ERRLEN] = "";
        int folded = 0;
        int64_t t0 = kd_mono_ms();
        int rc = kd_store_metrics_sketch(k->s, CHUNK_ROWS, &folded, err);
        int64_t took = kd_mono_ms() - t0;
        pthread_mutex_lock(&k->mu);
        more = rc == 0 && folded == CHUNK_ROWS;
        if (rc != 0) {
            backoff = backoff ? backoff * 2 : interval;
            if (backoff > BACKOFF_MAX_MS)
                backoff = BACKOFF_MAX_MS;
            if (kd_mono_ms() - warned >= 60000) {
                warned = kd_mono_ms();
                KD_WARN("metric overviews not updated; pages read the rows meanwhile", "err=%s",
                        kd_logq(err));
            }
        } else {
            backoff = 0;
        }
        int64_t pause = more ? 0 : backoff ? backoff : interval;
        if (pause < FOLD_PACE * took)
            pause = FOLD_PACE * took;
        if (pause > 0)
            wait_until(k, kd_mono_ms() + pause, false);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

int kd_sketcher__start(struct kd_store *s, struct kd_sketcher **out, char *err)
{
    struct kd_sketcher *k = kd_xcalloc(1, sizeof(*k));
    *out = NULL;
    k->s = s;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->wake, NULL);
    if (pthread_create(&k->th, NULL, sketcher_main, k) != 0) {
        pthread_cond_destroy(&k->wake);
        pthread_mutex_destroy(&k->mu);
        free(k);
        return kd_seterr(err, KD_EINTERNAL, "metric overviews: cannot start their thread");
    }
    *out = k;
    return 0;
}

void kd_sketcher__poke(struct kd_sketcher *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->poked = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->mu);
}

void kd_sketcher__stop(struct kd_sketcher *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->th, NULL);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->mu);
    free(k);
}
