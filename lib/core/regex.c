/*
 * User regular expressions, bounded before regcomp (see regex.h).
 *
 * The check walks the expression once, as POSIX extended syntax: atoms (a
 * character, an escaped one, a bracket expression, a group), alternation
 * and repetitions. Each group keeps the size its content would have once
 * glibc has copied every repeated part: a repetition multiplies the size of
 * the atom it follows (+ by 2, {m} by m, {m,} by m + 1, {m,n} by n).
 */
#include "core/regex.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

struct frame {
    size_t total; /* the group's size so far */
    size_t last;  /* the size of its last atom with its repetitions; 0: none to repeat */
    bool rep;     /* the last thing read was a repetition operator */
    bool lazy;    /* ... followed by the non-greedy "?" */
};

/* The end of the bracket expression that starts at p ('['), or NULL when it does not end. */
static const char *bracket_end(const char *p)
{
    p++;
    if (*p == '^')
        p++;
    if (*p == ']')
        p++;
    for (; *p != '\0'; p++) {
        if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            char close[3] = {p[1], ']', '\0'};
            const char *e = strstr(p + 2, close);
            if (e == NULL)
                return NULL;
            p = e + 1;
        } else if (*p == ']') {
            return p;
        }
    }
    return NULL;
}

/* The decimal number at *q (advanced past it), capped at 100000; -1 when there is none. */
static long number(const char **q)
{
    long v = -1;
    for (; **q >= '0' && **q <= '9'; (*q)++)
        v = v < 0 ? **q - '0' : v * 10 + (**q - '0') > 100000 ? 100000 : v * 10 + (**q - '0');
    return v;
}

/* A repetition count "{m}", "{m,}" or "{m,n}" at p: its length, and the factor it multiplies
 * by; 0 when p does not start one (then '{' is an ordinary character). *count_over: a
 * count past KD_REGEX_MAX_REPEAT. */
static size_t interval(const char *p, size_t *factor, bool *count_over)
{
    const char *q = p + 1;
    long m = number(&q), n = -1;
    bool comma = *q == ',';
    if (comma) {
        q++;
        n = number(&q);
    }
    if (*q != '}' || m < 0)
        return 0;
    *count_over = m > KD_REGEX_MAX_REPEAT || n > KD_REGEX_MAX_REPEAT;
    long f = !comma ? m : n < 0 ? m + 1 : n;
    *factor = f < 1 ? 1 : (size_t)f;
    return (size_t)(q - p) + 1;
}

static int too_large(char *err)
{
    return kd_seterr(err, KD_EINVAL,
                     "expression too large (over %d nodes once its repetitions are "
                     "expanded)",
                     KD_REGEX_MAX_NODES);
}

/* Add an atom of size `size` to f. */
static int atom(struct frame *f, size_t size, char *err)
{
    f->total += size;
    f->last = size;
    f->rep = f->lazy = false;
    return f->total > KD_REGEX_MAX_NODES ? too_large(err) : 0;
}

int kd_regex_check(const char *ere, char *err)
{
    struct frame *st = calloc(KD_REGEX_MAX_DEPTH + 1, sizeof(*st));
    int depth = 0, rc = 0;
    if (st == NULL)
        return kd_seterr(err, KD_EINVAL, "out of memory");
    for (const char *p = ere; *p != '\0' && rc == 0;) {
        struct frame *f = &st[depth];
        size_t len = 1, factor = 0;
        bool over = false;
        switch (*p) {
        case '\\':
            len = p[1] != '\0' ? 2 : 1;
            rc = atom(f, 1, err);
            break;
        case '[': {
            const char *e = bracket_end(p);
            len = e != NULL ? (size_t)(e - p) + 1 : strlen(p); /* unclosed: regcomp says so */
            rc = atom(f, 1, err);
            break;
        }
        case '(':
            if (depth == KD_REGEX_MAX_DEPTH) {
                rc = kd_seterr(err, KD_EINVAL,
                               "expression nests too deeply (more than %d groups "
                               "within each other)",
                               KD_REGEX_MAX_DEPTH);
                break;
            }
            st[++depth] = (struct frame){0};
            break;
        case ')':
            if (depth == 0) { /* unmatched: regcomp says so */
                rc = atom(f, 1, err);
                break;
            }
            depth--;
            rc = atom(&st[depth], f->total > 0 ? f->total : 1, err);
            break;
        case '|':
            f->last = 0;
            f->rep = f->lazy = false;
            break;
        case '*':
        case '+':
        case '?': factor = *p == '+' ? 2 : 1; break;
        case '{':
            len = interval(p, &factor, &over);
            if (len == 0) {
                len = 1;
                rc = atom(f, 1, err);
            }
            break;
        default: rc = atom(f, 1, err); break;
        }
        if (rc == 0 && factor > 0) {
            if (f->rep && *p == '?' && !f->lazy) {
                f->lazy = true; /* non-greedy, as Go reads it: the same language here */
            } else if (f->rep) {
                rc = kd_seterr(err, KD_EINVAL,
                               "invalid nested repetition operator: `%.*s` right after `%c`",
                               (int)len, p, p[-1]);
            } else if (over) {
                rc = kd_seterr(err, KD_EINVAL, "invalid repeat count: `%.*s` (at most %d)",
                               (int)len, p, KD_REGEX_MAX_REPEAT);
            } else if (f->last > 0) {
                size_t grown = f->last * factor;
                if (grown / factor != f->last || grown > KD_REGEX_MAX_NODES) {
                    rc = too_large(err);
                } else {
                    f->total += grown - f->last + 1;
                    f->last = grown + 1;
                    f->rep = true;
                    f->lazy = false;
                    rc = f->total > KD_REGEX_MAX_NODES ? too_large(err) : 0;
                }
            } else {
                rc = atom(f, 1, err); /* nothing to repeat: regcomp says so */
            }
        }
        p += len;
    }
    free(st);
    return rc;
}

int kd_regcomp(regex_t *re, const char *ere, int cflags, char *err)
{
    int rc = kd_regex_check(ere, err);
    if (rc != 0)
        return rc;
    rc = regcomp(re, ere, cflags);
    if (rc != 0) {
        if (err != NULL)
            regerror(rc, re, err, KD_ERRLEN);
        return KD_EINVAL;
    }
    return 0;
}
