/*
 * `.detignore` rules with gitignore's syntax and matching, written by hand
 * because fnmatch(3) has no `**` and no notion of anchoring or
 * directory-only rules.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "context/context.h"
#include "core/alloc.h"

struct rule {
    char *pat;     /* the glob, without `!`, leading `/` or trailing `/` */
    bool negate;   /* `!pattern` re-includes */
    bool dir_only; /* `pattern/` */
    bool anchored; /* matched against the whole path, not the last name */
};

struct kd_ignore {
    struct rule *rules;
    size_t n;
};

/* Match one `[...]` class at *pp against c; advance *pp past `]`. */
static bool match_class(const char **pp, char c, bool *ok)
{
    const char *p = *pp + 1;
    bool neg = false, hit = false;
    if (*p == '!' || *p == '^') {
        neg = true;
        p++;
    }
    bool first = true;
    while (*p && (first || *p != ']')) {
        char lo = *p;
        if (lo == '\\' && p[1])
            lo = *++p;
        if (p[1] == '-' && p[2] && p[2] != ']') {
            char hi = p[2];
            if (hi == '\\' && p[3]) {
                hi = p[3];
                p++;
            }
            if (c >= lo && c <= hi)
                hit = true;
            p += 3;
        } else {
            if (c == lo)
                hit = true;
            p++;
        }
        first = false;
    }
    if (*p != ']') {
        *ok = false;
        return false;
    }
    *pp = p + 1;
    *ok = true;
    return c != '/' && hit != neg;
}

/*
 * One glob match: the pattern and text, and a bit per (pattern position, text position)
 * already known not to match. Each star tries its next text position once: without the
 * bits, runs of stars (`*a*a*a*b`, `****...x`) retried the same pairs exponentially often
 * (an 86-byte .detignore took minutes).
 */
struct wm {
    const char *p0, *t0;
    size_t tn;
    unsigned char *failed; /* (strlen(p0) + 1) * (tn + 1) bits */
};

static size_t wm_bit(const struct wm *w, const char *p, const char *t)
{
    return (size_t)(p - w->p0) * (w->tn + 1) + (size_t)(t - w->t0);
}

static bool wm_failed(const struct wm *w, const char *p, const char *t)
{
    size_t k = wm_bit(w, p, t);
    return (w->failed[k / 8] >> (k % 8)) & 1u;
}

static void wm_fail(struct wm *w, const char *p, const char *t)
{
    size_t k = wm_bit(w, p, t);
    w->failed[k / 8] |= (unsigned char)(1u << (k % 8));
}

/*
 * Glob match of the text from t against the pattern from p; `*`, `?` and classes stop at
 * `/`, `**` does not. A star at p that failed from text position s is marked (p, s): a
 * success anywhere ends the whole match, so a mark is only ever read after a failure, and
 * a star's later positions were all tried before its loop ended.
 */
static bool wm(struct wm *w, const char *p, const char *t)
{
    bool ok;
    if (wm_failed(w, p, t))
        return false;
    while (*p) {
        if (p[0] == '*' && p[1] == '*') {
            const char *rest = p + 2;
            if (*rest == '/') {
                /* `**` + `/`: zero or more whole directories */
                for (const char *s = t;;) {
                    if (wm_failed(w, p, s))
                        return false;
                    if (wm(w, rest + 1, s))
                        return true;
                    wm_fail(w, p, s);
                    if ((s = strchr(s, '/')) == NULL)
                        return false;
                    s++;
                }
            }
            if (*rest == '\0')
                return true; /* trailing `**`: everything */
            /* `**x`: like `*` but may cross `/` */
            for (const char *s = t;; s++) {
                if (wm_failed(w, p, s))
                    return false;
                if (wm(w, rest, s))
                    return true;
                wm_fail(w, p, s);
                if (*s == '\0')
                    return false;
            }
        }
        switch (*p) {
        case '*':
            for (const char *s = t;; s++) {
                if (wm_failed(w, p, s))
                    return false;
                if (wm(w, p + 1, s))
                    return true;
                wm_fail(w, p, s);
                if (*s == '\0' || *s == '/')
                    return false;
            }
        case '?':
            if (*t == '\0' || *t == '/')
                return false;
            p++;
            t++;
            break;
        case '[': {
            if (*t == '\0')
                return false;
            if (!match_class(&p, *t, &ok))
                return false;
            t++;
            break;
        }
        case '\\':
            if (p[1])
                p++;
            /* fallthrough */
        default:
            if (*p != *t)
                return false;
            p++;
            t++;
        }
    }
    return *t == '\0';
}

static bool wildmatch(const char *p, const char *t)
{
    unsigned char small[1024];
    struct wm w = {.p0 = p, .t0 = t, .tn = strlen(t)};
    size_t bytes = ((strlen(p) + 1) * (w.tn + 1) + 7) / 8;
    w.failed = bytes <= sizeof(small) ? small : kd_xcalloc(bytes, 1);
    if (w.failed == small)
        memset(small, 0, bytes);
    bool r = wm(&w, p, t);
    if (w.failed != small)
        free(w.failed);
    return r;
}

/* Check that every `[` is closed, so matching never reads past the end. */
static bool classes_closed(const char *p)
{
    for (; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '[') {
            const char *q = p + 1;
            if (*q == '!' || *q == '^')
                q++;
            if (*q == ']')
                q++;
            while (*q && *q != ']')
                q++;
            if (*q != ']')
                return false;
            p = q;
        }
    }
    return true;
}

int kd_ignore_parse(const char *name, const char *text, size_t len, struct kd_ignore **out,
                    char *err)
{
    int rc = 0, lineno = 0;
    struct kd_ignore *ig = kd_xcalloc(1, sizeof(*ig));
    size_t cap = 0;
    const char *p = text, *end = text ? text + len : NULL;
    char line[KD_CONTEXT_MAX_PATH + 2];
    *out = NULL;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        if (n > KD_CONTEXT_MAX_PATH) {
            rc = kd_seterr(err, KD_EINVAL, "%s:%d: line longer than %d bytes", name, lineno,
                           KD_CONTEXT_MAX_PATH);
            goto out;
        }
        memcpy(line, p, n);
        line[n] = '\0';
        p = nl ? nl + 1 : end;
        if (n > 0 && line[n - 1] == '\r')
            line[--n] = '\0';
        /* trailing spaces go unless escaped */
        while (n > 0 && line[n - 1] == ' ' && !(n > 1 && line[n - 2] == '\\'))
            line[--n] = '\0';
        if (n == 0 || line[0] == '#')
            continue;
        struct rule r = {NULL, false, false, false};
        char *s = line;
        if (*s == '!') {
            r.negate = true;
            s++;
        } else if (*s == '\\' && (s[1] == '#' || s[1] == '!')) {
            s++;
        }
        size_t sl = strlen(s);
        if (sl > 0 && s[sl - 1] == '/') {
            r.dir_only = true;
            s[--sl] = '\0';
        }
        if (*s == '/') {
            r.anchored = true;
            s++;
        } else if (strchr(s, '/') != NULL) {
            r.anchored = true;
        }
        if (*s == '\0')
            continue;
        if (!classes_closed(s)) {
            rc = kd_seterr(err, KD_EINVAL, "%s:%d: unterminated '[' in pattern \"%s\"", name,
                           lineno, s);
            goto out;
        }
        r.pat = kd_xstrdup(s);
        if (ig->n == cap) {
            cap = cap ? cap * 2 : 16;
            ig->rules = kd_xrealloc(ig->rules, cap * sizeof(*ig->rules));
        }
        ig->rules[ig->n++] = r;
    }
    *out = ig;
    ig = NULL;
out:
    kd_ignore_free(ig);
    return rc;
}

bool kd_ignore_match(const struct kd_ignore *ig, const char *rel, bool is_dir)
{
    bool excluded = false;
    if (ig == NULL)
        return false;
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    for (size_t i = 0; i < ig->n; i++) {
        const struct rule *r = &ig->rules[i];
        if (r->dir_only && !is_dir)
            continue;
        if (wildmatch(r->pat, r->anchored ? rel : base))
            excluded = !r->negate;
    }
    return excluded;
}

void kd_ignore_free(struct kd_ignore *ig)
{
    if (ig == NULL)
        return;
    for (size_t i = 0; i < ig->n; i++)
        free(ig->rules[i].pat);
    free(ig->rules);
    free(ig);
}
