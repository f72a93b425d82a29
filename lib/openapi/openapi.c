/*
 * OpenAPI v3 structural-schema validation with the Kubernetes API server's
 * semantics and messages (kube-openapi's validators as converted to
 * field errors by apiextensions-apiserver), so a custom resource that kdet
 * accepts is one a real cluster accepts, and the causes read the same.
 */
#include "openapi/openapi.h"

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/regex.h"
#include "core/time.h"

/* Messages are built in bounded buffers; a value longer than this is cut. */
#define MSG_MAX (64 * 1024)
/* Nesting deeper than this is reported instead of recursed into. */
#define MAX_DEPTH 128

struct vctx {
    json_t *causes; /* array being filled */
    const char *root;
    int bad_schema; /* a schema node that is not an object */
};

/* Messages are cut at their buffer's cap rather than failing: appends
 * that do not fit are dropped. */
static void bputs(struct kd_buf *b, const char *s)
{
    if (kd_buf_puts(b, s) != 0)
        return;
}

static void bputc(struct kd_buf *b, char ch)
{
    if (kd_buf_putc(b, ch) != 0)
        return;
}

static void bappend(struct kd_buf *b, const char *p, size_t n)
{
    if (kd_buf_append(b, p, n) != 0)
        return;
}

static void bvprintf(struct kd_buf *b, const char *fmt, va_list ap) KD_PRINTF(2, 0);
static void bvprintf(struct kd_buf *b, const char *fmt, va_list ap)
{
    if (kd_buf_vprintf(b, fmt, ap) != 0)
        return;
}

static void bprintf(struct kd_buf *b, const char *fmt, ...) KD_PRINTF(2, 3);
static void bprintf(struct kd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bvprintf(b, fmt, ap);
    va_end(ap);
}

/* ---- value formatting (Go's fmt as the API server prints values) ------- */

/* Go's strconv.FormatFloat(f, 'g', -1, 64), which %v uses for float64. */
static void fmt_go_float(double d, struct kd_buf *b)
{
    char tmp[64];
    int prec = 1;
    if (isnan(d) || isinf(d)) {
        bputs(b, isnan(d) ? "NaN" : (d > 0 ? "+Inf" : "-Inf"));
        return;
    }
    if (d == 0) {
        bputs(b, signbit(d) ? "-0" : "0");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    /* tmp is d.ddde[+-]XX with `prec` significant digits */
    char *e = strchr(tmp, 'e');
    int exp = (int)strtol(e + 1, NULL, 10);
    if (exp < -4 || exp >= 6) {
        /* mantissa as is, exponent with at least two digits */
        *e = '\0';
        bprintf(b, "%se%c%02d", tmp, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else {
        int decimals = prec - 1 - exp;
        if (decimals < 0)
            decimals = 0;
        bprintf(b, "%.*f", decimals, d);
    }
}

/* Go's strconv.Quote for UTF-8 text (invalid bytes as \x..). */
static void fmt_go_quote(const char *s, struct kd_buf *b)
{
    bputc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': bputs(b, "\\\""); break;
        case '\\': bputs(b, "\\\\"); break;
        case '\n': bputs(b, "\\n"); break;
        case '\r': bputs(b, "\\r"); break;
        case '\t': bputs(b, "\\t"); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                bprintf(b, "\\x%02x", *p);
            else
                bputc(b, (char)*p);
        }
    }
    bputc(b, '"');
}

/* Go's %#v of a decoded JSON value (map[string]interface {}{...}, sorted keys). */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void fmt_go_sharp(const json_t *v, struct kd_buf *b, int depth)
{
    if (depth > 16) {
        bputs(b, "...");
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char **keys = kd_xcalloc(n ? n : 1, sizeof(*keys));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        qsort(keys, n, sizeof(*keys), cmp_str);
        bputs(b, "map[string]interface {}{");
        for (i = 0; i < n; i++) {
            if (i)
                bputs(b, ", ");
            fmt_go_quote(keys[i], b);
            bputc(b, ':');
            fmt_go_sharp(json_object_get(v, keys[i]), b, depth + 1);
        }
        bputc(b, '}');
        free(keys);
        break;
    }
    case JSON_ARRAY: {
        bputs(b, "[]interface {}{");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                bputs(b, ", ");
            fmt_go_sharp(json_array_get(v, i), b, depth + 1);
        }
        bputc(b, '}');
        break;
    }
    case JSON_STRING: fmt_go_quote(json_string_value(v), b); break;
    case JSON_INTEGER: bprintf(b, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: fmt_go_float(json_real_value(v), b); break;
    case JSON_TRUE: bputs(b, "true"); break;
    case JSON_FALSE: bputs(b, "false"); break;
    case JSON_NULL: bputs(b, "interface {}(nil)"); break;
    }
}

/* The bad value as field.Error.ErrorBody prints it after "Invalid value: ". */
static void fmt_bad_value(const json_t *v, struct kd_buf *b)
{
    if (v == NULL || json_is_null(v))
        fmt_go_quote("null", b);
    else if (json_is_string(v))
        fmt_go_quote(json_string_value(v), b);
    else if (json_is_integer(v))
        bprintf(b, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fmt_go_float(json_real_value(v), b);
    else if (json_is_boolean(v))
        bputs(b, json_is_true(v) ? "true" : "false");
    else
        fmt_go_sharp(v, b, 0);
}

/* ---- causes ------------------------------------------------------------- */

static void add_cause(struct vctx *c, const char *reason, const char *field, const char *msg)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "reason", reason, "message", msg, "field",
                          field[0] ? field : "<nil>");
    if (o == NULL)
        kd_oom(strlen(msg));
    json_array_append_new(c->causes, o);
}

/* "Invalid value: <v>: <detail>" with reason FieldValueInvalid (or TypeInvalid). */
static void add_invalid(struct vctx *c, const char *reason, const char *name, const json_t *v,
                        const char *fmt, ...) KD_PRINTF(5, 6);
static void add_invalid(struct vctx *c, const char *reason, const char *name, const json_t *v,
                        const char *fmt, ...)
{
    struct kd_buf b = KD_BUF_INIT(MSG_MAX);
    va_list ap;
    bputs(&b, "Invalid value: ");
    fmt_bad_value(v, &b);
    bputs(&b, ": ");
    va_start(ap, fmt);
    bvprintf(&b, fmt, ap);
    va_end(ap);
    add_cause(c, reason, name, kd_buf_str(&b));
    kd_buf_free(&b);
}

/* Composite (anyOf/oneOf/allOf/not) errors: the API server reports them at
 * the root of the validated object with an empty value. */
static void add_composite(struct vctx *c, const char *fmt, const char *name, const char *extra)
{
    struct kd_buf b = KD_BUF_INIT(MSG_MAX);
    bputs(&b, "Invalid value: \"\": ");
    bprintf(&b, fmt, name, extra);
    add_cause(c, "FieldValueInvalid", c->root, kd_buf_str(&b));
    kd_buf_free(&b);
}

static char *child_name(const char *path, const char *key)
{
    return path[0] ? kd_xasprintf("%s.%s", path, key) : kd_xstrdup(key);
}

/* ---- helpers ------------------------------------------------------------ */

static const char *type_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

static bool is_number(const json_t *v)
{
    return json_is_integer(v) || json_is_real(v);
}

static double num_of(const json_t *v)
{
    return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

/*
 * A real that stands for an integer, as the API server's validator takes it: whole and
 * within the integers a double holds exactly (|d| <= 2^53 - 1). 1e300 is whole but no
 * integer: accepted, it would be stored as a float in an integer field.
 */
static bool is_integral(double d)
{
    return isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740991.0;
}

static bool is_true(const json_t *s, const char *key)
{
    return json_is_true(json_object_get(s, key));
}

/* JSON equality where 1 and 1.0 are the same number. */
static bool values_equal(const json_t *a, const json_t *b)
{
    if (is_number(a) && is_number(b))
        return num_of(a) == num_of(b);
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!values_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *x;
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach((json_t *)a, k, x)
        {
            json_t *y = json_object_get(b, k);
            if (y == NULL || !values_equal(x, y))
                return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* UTF-8 code points, as Go's utf8.RuneCountInString counts them. */
static size_t rune_count(const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80)
            n++;
    return n;
}

/*
 * Translate the ECMA-262 shorthands that CRD patterns commonly use into
 * POSIX ERE: \d \w \s (and \D \W \S outside brackets) and escaped
 * punctuation. Everything else passes through to regcomp unchanged.
 */
static char *ecma_to_ere(const char *p)
{
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    bool in_br = false;
    for (; *p; p++) {
        if (*p == '\\' && p[1]) {
            char e = *++p;
            const char *cls = NULL;
            switch (e) {
            case 'd': cls = "0-9"; break;
            case 'w': cls = "A-Za-z0-9_"; break;
            case 's': cls = "[:space:]"; break;
            case 'D': cls = in_br ? NULL : "[^0-9]"; break;
            case 'W': cls = in_br ? NULL : "[^A-Za-z0-9_]"; break;
            case 'S': cls = in_br ? NULL : "[^[:space:]]"; break;
            default: break;
            }
            if (cls && (e == 'd' || e == 'w' || e == 's')) {
                if (in_br)
                    bputs(&b, cls);
                else
                    bprintf(&b, "[%s]", cls);
            } else if (cls) {
                bputs(&b, cls);
            } else if (e == 'n') {
                bputc(&b, '\n');
            } else if (e == 't') {
                bputc(&b, '\t');
            } else if (in_br) {
                /* inside a POSIX bracket a backslash is literal: keep the char */
                bputc(&b, e);
            } else {
                bputc(&b, '\\');
                bputc(&b, e);
            }
            continue;
        }
        if (!in_br && *p == '[') {
            in_br = true;
            bputc(&b, '[');
            if (p[1] == '^')
                bputc(&b, *++p);
            if (p[1] == ']')
                bputc(&b, *++p);
            continue;
        }
        if (in_br && *p == '[' && p[1] == ':') {
            const char *end = strstr(p + 2, ":]");
            if (end) {
                bappend(&b, p, (size_t)(end + 2 - p));
                p = end + 1;
                continue;
            }
        }
        if (in_br && *p == ']')
            in_br = false;
        bputc(&b, *p);
    }
    return kd_buf_steal(&b);
}

/*
 * Compiled patterns are kept, so that a schema's pattern is compiled once and not for every
 * value checked against it: compiling was 3.5% of kdet-local's CPU in a run of 5,000 trials,
 * matching 0.1%. Keyed by the schema's pattern text; one that does not compile is kept with
 * its reason. Entries are never removed, so a pointer to one stays valid without the lock.
 * Custom resource definitions may bring any number of patterns: past PATTERN_CACHE_MAX the
 * others are compiled at each use. glibc's regexec runs on one regex_t from several threads
 * at once (it takes the pattern's own lock), so only the table is under patterns_mu.
 */
#define PATTERN_CACHE_MAX 512

struct pattern {
    UT_hash_handle hh;
    char *src;
    int rc; /* kd_regcomp's: 0 compiled, else why says why not */
    regex_t re;
    char why[KD_ERRLEN];
};

static struct pattern *patterns;
static size_t npatterns;
static pthread_mutex_t patterns_mu = PTHREAD_MUTEX_INITIALIZER;

static void pattern_compile(struct pattern *p, const char *src)
{
    char *ere = ecma_to_ere(src);
    p->why[0] = '\0';
    p->rc = kd_regcomp(&p->re, ere, REG_EXTENDED | REG_NOSUB, p->why);
    free(ere);
}

/* The kept pattern for src, compiled now if new; NULL when the table is full. */
static const struct pattern *pattern_get(const char *src)
{
    struct pattern *p = NULL;
    pthread_mutex_lock(&patterns_mu);
    HASH_FIND_STR(patterns, src, p);
    if (p == NULL && npatterns < PATTERN_CACHE_MAX) {
        p = kd_xcalloc(1, sizeof(*p));
        p->src = kd_xstrdup(src);
        pattern_compile(p, src);
        HASH_ADD_KEYPTR(hh, patterns, p->src, strlen(p->src), p);
        npatterns++;
    }
    pthread_mutex_unlock(&patterns_mu);
    return p;
}

/* Match s against pattern; on a pattern that does not compile (or that kd_regcomp bounds
 * away), the reason goes into err (KD_ERRLEN bytes) and KD_EINVAL is returned. */
static int pattern_match(const char *pattern, const char *s, bool *match, char *err)
{
    const struct pattern *kept = pattern_get(pattern);
    struct pattern once;
    if (kept == NULL) {
        pattern_compile(&once, pattern);
        kept = &once;
    }
    int rc = kept->rc;
    if (rc != 0)
        snprintf(err, KD_ERRLEN, "%s", kept->why);
    else
        *match = regexec(&kept->re, s, 0, NULL, 0) == 0;
    if (kept == &once && rc == 0)
        regfree(&once.re);
    return rc != 0 ? KD_EINVAL : 0;
}

static bool is_uuid(const char *s)
{
    static const int groups[] = {8, 4, 4, 4, 12};
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < groups[g]; i++, s++)
            if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))
                return false;
        if (g < 4 && *s++ != '-')
            return false;
    }
    return *s == '\0';
}

static bool is_base64(const char *s)
{
    size_t n = 0, pad = 0;
    for (; *s; s++, n++) {
        if (*s == '=') {
            pad++;
            continue;
        }
        if (pad || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
                     (*s >= '0' && *s <= '9') || *s == '+' || *s == '/'))
            return false;
    }
    return n % 4 == 0 && pad <= 2;
}

static bool is_date(const char *s)
{
    int y, m, d;
    char tail;
    return strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 && m >= 1 &&
           m <= 12 && d >= 1 && d <= 31;
}

static bool is_ipv4(const char *s)
{
    int parts = 0;
    while (*s) {
        int v = 0, digits = 0;
        while (*s >= '0' && *s <= '9') {
            v = v * 10 + (*s++ - '0');
            if (++digits > 3)
                return false;
        }
        if (digits == 0 || v > 255)
            return false;
        parts++;
        if (*s == '.' && parts < 4)
            s++;
        else if (*s != '\0')
            return false;
    }
    return parts == 4;
}

/* Formats the API server checks on strings; others are accepted as is. */
static int format_ok(const char *format, const char *s)
{
    int64_t ms;
    if (strcmp(format, "date-time") == 0 || strcmp(format, "datetime") == 0)
        return kd_time_parse_rfc3339(s, &ms) == 0;
    if (strcmp(format, "date") == 0)
        return is_date(s);
    if (strcmp(format, "uuid") == 0)
        return is_uuid(s);
    if (strcmp(format, "byte") == 0)
        return is_base64(s);
    if (strcmp(format, "ipv4") == 0)
        return is_ipv4(s);
    return 1;
}

/* ---- the validator ------------------------------------------------------ */

static void validate(struct vctx *c, const json_t *s, const json_t *v, const char *path, int depth);

/* Validate into a scratch list; return how many causes it produced. */
static json_t *validate_sub(struct vctx *c, const json_t *s, const json_t *v, const char *path,
                            int depth)
{
    struct vctx sub = {json_array(), c->root, 0};
    if (sub.causes == NULL)
        kd_oom(64);
    validate(&sub, s, v, path, depth);
    c->bad_schema |= sub.bad_schema;
    return sub.causes;
}

static void merge(struct vctx *c, json_t *from)
{
    json_array_extend(c->causes, from);
}

static bool check_type(struct vctx *c, const json_t *s, const json_t *v, const char *path)
{
    const json_t *t = json_object_get(s, "type");
    const char *want = json_string_value(t);
    const char *have = type_of(v);
    bool ok;
    if ((want == NULL || want[0] == '\0') && is_true(s, "x-kubernetes-int-or-string")) {
        /* the API server turns int-or-string into type [integer, string] */
        want = "integer,string";
        ok = json_is_integer(v) || json_is_string(v) ||
             (json_is_real(v) && is_integral(json_real_value(v)));
    } else if (want == NULL || want[0] == '\0') {
        return true;
    } else {
        ok = strcmp(want, have) == 0 ||
             (strcmp(want, "number") == 0 && strcmp(have, "integer") == 0) ||
             (strcmp(want, "integer") == 0 && json_is_real(v) && is_integral(json_real_value(v)));
    }
    if (json_is_null(v) && is_true(s, "nullable"))
        ok = true;
    if (!ok) {
        json_t *tv = json_string(have);
        add_invalid(c, "FieldValueTypeInvalid", path, tv, "%s in body must be of type %s: \"%s\"",
                    path, want, have);
        json_decref(tv);
    }
    return ok;
}

static void check_composites(struct vctx *c, const json_t *s, const json_t *v, const char *path,
                             int depth)
{
    const json_t *any = json_object_get(s, "anyOf");
    const json_t *one = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    const json_t *not = json_object_get(s, "not");
    size_t i;
    if (json_array_size(any) > 0) {
        json_t *best = NULL;
        bool ok = false;
        for (i = 0; i < json_array_size(any) && !ok; i++) {
            json_t *r = validate_sub(c, json_array_get(any, i), v, path, depth + 1);
            if (json_array_size(r) == 0) {
                ok = true;
                json_decref(best);
                best = NULL;
            } else if (best == NULL || json_array_size(r) < json_array_size(best)) {
                json_decref(best);
                best = json_incref(r);
            }
            json_decref(r);
        }
        if (!ok)
            add_composite(c, "\"%s\" must validate at least one schema (anyOf)%s", path, "");
        if (best)
            merge(c, best);
        json_decref(best);
    }
    if (json_array_size(one) > 0) {
        json_t *best = NULL;
        int valid = 0;
        for (i = 0; i < json_array_size(one); i++) {
            json_t *r = validate_sub(c, json_array_get(one, i), v, path, depth + 1);
            if (json_array_size(r) == 0) {
                valid++;
                json_decref(best);
                best = NULL;
            } else if (valid == 0 && (best == NULL || json_array_size(r) < json_array_size(best))) {
                json_decref(best);
                best = json_incref(r);
            }
            json_decref(r);
        }
        if (valid != 1) {
            char extra[64];
            if (valid == 0)
                snprintf(extra, sizeof(extra), "Found none valid");
            else
                snprintf(extra, sizeof(extra), "Found %d valid alternatives", valid);
            add_composite(c, "\"%s\" must validate one and only one schema (oneOf). %s", path,
                          extra);
            if (best)
                merge(c, best);
        }
        json_decref(best);
    }
    if (json_array_size(all) > 0) {
        size_t valid = 0;
        for (i = 0; i < json_array_size(all); i++) {
            json_t *r = validate_sub(c, json_array_get(all, i), v, path, depth + 1);
            if (json_array_size(r) == 0)
                valid++;
            merge(c, r);
            json_decref(r);
        }
        if (valid != json_array_size(all))
            add_composite(c, "\"%s\" must validate all the schemas (allOf)%s", path,
                          valid == 0 ? ". None validated" : "");
    }
    if (json_is_object(not )) {
        json_t *r = validate_sub(c, not, v, path, depth + 1);
        if (json_array_size(r) == 0)
            add_composite(c, "\"%s\" must not validate the schema (not)%s", path, "");
        json_decref(r);
    }
}

static void check_string(struct vctx *c, const json_t *s, const json_t *v, const char *path)
{
    const char *str = json_string_value(v);
    const json_t *maxl = json_object_get(s, "maxLength");
    const json_t *minl = json_object_get(s, "minLength");
    const char *pattern = json_string_value(json_object_get(s, "pattern"));
    const char *format = json_string_value(json_object_get(s, "format"));
    size_t n = rune_count(str);
    if (json_is_integer(maxl) && (json_int_t)n > json_integer_value(maxl)) {
        char msg[128];
        snprintf(msg, sizeof(msg), "Too long: may not be more than %lld bytes",
                 (long long)json_integer_value(maxl));
        add_cause(c, "FieldValueTooLong", path, msg);
    }
    if (json_is_integer(minl) && (json_int_t)n < json_integer_value(minl))
        add_invalid(c, "FieldValueInvalid", path, v,
                    "%s in body should be at least %lld chars long", path,
                    (long long)json_integer_value(minl));
    if (pattern) {
        bool m = false;
        char why[KD_ERRLEN];
        if (pattern_match(pattern, str, &m, why) != 0)
            /* the API server reports a bad pattern against the value, too */
            add_invalid(c, "FieldValueInvalid", path, v,
                        "%s in body should match '%s, but pattern is invalid: %s'", path, pattern,
                        why);
        else if (!m)
            add_invalid(c, "FieldValueInvalid", path, v, "%s in body should match '%s'", path,
                        pattern);
    }
    if (format && !format_ok(format, str))
        add_invalid(c, "FieldValueTypeInvalid", path, v, "%s in body must be of type %s: \"%s\"",
                    path, format, str);
}

static void check_number(struct vctx *c, const json_t *s, const json_t *v, const char *path)
{
    const json_t *mult = json_object_get(s, "multipleOf");
    const json_t *max = json_object_get(s, "maximum");
    const json_t *min = json_object_get(s, "minimum");
    bool xmax = is_true(s, "exclusiveMaximum"), xmin = is_true(s, "exclusiveMinimum");
    double d = num_of(v);
    struct kd_buf lim = KD_BUF_INIT(128);
    if (is_number(mult) && num_of(mult) > 0) {
        double q = d / num_of(mult);
        if (fabs(q - round(q)) > 1e-9 * fmax(1.0, fabs(q))) {
            fmt_go_float(num_of(mult), &lim);
            add_invalid(c, "FieldValueInvalid", path, v, "%s in body should be a multiple of %s",
                        path, kd_buf_str(&lim));
        }
    }
    if (is_number(max)) {
        double m = num_of(max);
        if (xmax ? d >= m : d > m) {
            kd_buf_reset(&lim);
            fmt_go_float(m, &lim);
            add_invalid(c, "FieldValueInvalid", path, v, "%s in body should be less than %s%s",
                        path, xmax ? "" : "or equal to ", kd_buf_str(&lim));
        }
    }
    if (is_number(min)) {
        double m = num_of(min);
        if (xmin ? d <= m : d < m) {
            kd_buf_reset(&lim);
            fmt_go_float(m, &lim);
            add_invalid(c, "FieldValueInvalid", path, v, "%s in body should be greater than %s%s",
                        path, xmin ? "" : "or equal to ", kd_buf_str(&lim));
        }
    }
    kd_buf_free(&lim);
}

static void check_array(struct vctx *c, const json_t *s, const json_t *v, const char *path,
                        int depth)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *mini = json_object_get(s, "minItems");
    const json_t *maxi = json_object_get(s, "maxItems");
    size_t n = json_array_size(v);
    if (json_is_object(items)) {
        for (size_t i = 0; i < n; i++) {
            char *p = kd_xasprintf("%s[%zu]", path, i);
            validate(c, items, json_array_get(v, i), p, depth + 1);
            free(p);
        }
    }
    if (json_is_integer(mini) && (json_int_t)n < json_integer_value(mini)) {
        json_t *nv = json_integer((json_int_t)n);
        add_invalid(c, "FieldValueInvalid", path, nv, "%s in body should have at least %lld items",
                    path, (long long)json_integer_value(mini));
        json_decref(nv);
    }
    if (json_is_integer(maxi) && (json_int_t)n > json_integer_value(maxi)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Too many: %zu: must have at most %lld items", n,
                 (long long)json_integer_value(maxi));
        add_cause(c, "FieldValueTooMany", path, msg);
    }
    if (is_true(s, "uniqueItems")) {
        bool dup = false;
        for (size_t i = 0; i < n && !dup; i++)
            for (size_t j = i + 1; j < n && !dup; j++)
                dup = values_equal(json_array_get(v, i), json_array_get(v, j));
        if (dup) {
            json_t *e = json_string("");
            add_invalid(c, "FieldValueInvalid", path, e, "%s in body shouldn't contain duplicates",
                        path);
            json_decref(e);
        }
    }
}

static void check_enum(struct vctx *c, const json_t *s, const json_t *v, const char *path)
{
    const json_t *en = json_object_get(s, "enum");
    if (!json_is_array(en) || json_array_size(en) == 0)
        return;
    for (size_t i = 0; i < json_array_size(en); i++)
        if (values_equal(json_array_get(en, i), v))
            return;
    struct kd_buf b = KD_BUF_INIT(MSG_MAX);
    bputs(&b, "Unsupported value: ");
    fmt_bad_value(v, &b);
    bputs(&b, ": supported values: ");
    for (size_t i = 0; i < json_array_size(en); i++) {
        const json_t *e = json_array_get(en, i);
        if (i)
            bputs(&b, ", ");
        if (json_is_string(e)) {
            fmt_go_quote(json_string_value(e), &b);
        } else {
            char *j = json_dumps(e, JSON_ENCODE_ANY | JSON_COMPACT);
            fmt_go_quote(j ? j : "", &b);
            free(j);
        }
    }
    add_cause(c, "FieldValueNotSupported", path, kd_buf_str(&b));
    kd_buf_free(&b);
}

static void check_object(struct vctx *c, const json_t *s, const json_t *v, const char *path,
                         int depth)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *req = json_object_get(s, "required");
    const json_t *minp = json_object_get(s, "minProperties");
    const json_t *maxp = json_object_get(s, "maxProperties");
    json_int_t n = (json_int_t)json_object_size(v);
    const char *k;
    json_t *x;
    if (json_is_integer(minp) && n < json_integer_value(minp)) {
        json_t *nv = json_integer(n);
        add_invalid(c, "FieldValueInvalid", path, nv,
                    "%s in body should have at least %lld properties", path,
                    (long long)json_integer_value(minp));
        json_decref(nv);
        goto out; /* as kube-openapi: a count error ends the object's checks */
    }
    if (json_is_integer(maxp) && n > json_integer_value(maxp)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Too many: %lld: must have at most %lld items", (long long)n,
                 (long long)json_integer_value(maxp));
        add_cause(c, "FieldValueTooMany", path, msg);
        goto out;
    }
    json_object_foreach((json_t *)v, k, x)
    {
        if (json_object_get(props, k) != NULL)
            continue;
        if (json_is_false(addl)) {
            json_t *kv = json_string(k);
            add_invalid(c, "FieldValueInvalid", path, kv, "%s.%s in body is a forbidden property",
                        path, k);
            json_decref(kv);
        } else if (json_is_object(addl)) {
            char *p = child_name(path, k);
            validate(c, addl, x, p, depth + 1);
            free(p);
        }
    }
    json_object_foreach((json_t *)props, k, x)
    {
        const json_t *val = json_object_get(v, k);
        if (val == NULL)
            continue;
        char *p = child_name(path, k);
        validate(c, x, val, p, depth + 1);
        free(p);
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (r == NULL || json_object_get(v, r) != NULL)
            continue;
        char *p = child_name(path, r);
        add_cause(c, "FieldValueRequired", p, "Required value");
        free(p);
    }
out:
    return;
}

static void validate(struct vctx *c, const json_t *s, const json_t *v, const char *path, int depth)
{
    if (!json_is_object(s)) {
        if (s != NULL && !json_is_true(s))
            c->bad_schema = 1;
        return;
    }
    if (depth > MAX_DEPTH) {
        add_cause(c, "FieldValueInvalid", path, "Invalid value: \"\": nested too deeply");
        return;
    }
    if (json_is_null(v)) {
        check_type(c, s, v, path);
        check_enum(c, s, v, path);
        return;
    }
    check_type(c, s, v, path);
    check_composites(c, s, v, path, depth);
    if (json_is_string(v))
        check_string(c, s, v, path);
    if (is_number(v))
        check_number(c, s, v, path);
    if (json_is_array(v))
        check_array(c, s, v, path, depth);
    check_enum(c, s, v, path);
    if (json_is_object(v))
        check_object(c, s, v, path, depth);
}

int kd_openapi_validate(const json_t *schema, const json_t *instance, const char *root_path,
                        json_t **causes)
{
    int rc = 0;
    struct vctx c = {NULL, root_path ? root_path : "", 0};
    if (causes == NULL || !json_is_object(schema) || instance == NULL) {
        rc = KD_EINVAL;
        goto out;
    }
    *causes = NULL;
    c.causes = json_array();
    if (c.causes == NULL)
        kd_oom(64);
    validate(&c, schema, instance, c.root, 0);
    if (c.bad_schema) {
        rc = KD_EINVAL;
        goto out;
    }
    if (json_array_size(c.causes) > 0) {
        *causes = c.causes;
        c.causes = NULL;
        rc = KD_EINVALID;
    }
out:
    json_decref(c.causes);
    return rc;
}

/* ---- unknown fields ----------------------------------------------------- */

static void unknown_walk(const json_t *s, const json_t *v, const char *path, json_t *out, int depth)
{
    if (!json_is_object(s) || depth > MAX_DEPTH)
        return;
    if (json_is_array(v)) {
        const json_t *items = json_object_get(s, "items");
        for (size_t i = 0; i < json_array_size(v) && json_is_object(items); i++) {
            char *p = kd_xasprintf("%s[%zu]", path, i);
            unknown_walk(items, json_array_get(v, i), p, out, depth + 1);
            free(p);
        }
        return;
    }
    if (!json_is_object(v))
        return;
    bool keep = is_true(s, "x-kubernetes-preserve-unknown-fields");
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x)
    {
        const json_t *ps = json_object_get(props, k);
        char *p = child_name(path, k);
        if (depth == 0 && strcmp(k, "metadata") == 0)
            ; /* ObjectMeta: the API server validates it itself, never prunes it */
        else if (ps != NULL)
            unknown_walk(ps, x, p, out, depth + 1);
        else if (json_is_object(addl))
            unknown_walk(addl, x, p, out, depth + 1);
        else if (!keep && !json_is_true(addl))
            json_array_append_new(out, json_string(p));
        free(p);
    }
}

int kd_openapi_unknown_fields(const json_t *schema, const json_t *instance, const char *root_path,
                              json_t **paths)
{
    int rc = 0;
    if (paths == NULL) {
        rc = KD_EINVAL;
        goto out;
    }
    *paths = json_array();
    if (*paths == NULL)
        kd_oom(64);
    unknown_walk(schema, instance, root_path ? root_path : "", *paths, 0);
out:
    return rc;
}

/* ---- structural check --------------------------------------------------- */

/*
 * The API server's rules for apiextensions.k8s.io/v1 schemas: every node
 * outside anyOf/allOf/oneOf/not (a "structural" node) says what it is
 * (type, unless x-kubernetes-int-or-string or -preserve-unknown-fields),
 * while the nodes under those junctors are value validations only: no
 * type, default, description, title, nullable, additionalProperties and no
 * x-kubernetes-* extensions. The one exception is what IntOrString and
 * resource.Quantity fields are generated with:
 *   anyOf: [{type: integer}, {type: string}]
 * or the same anyOf as the first item of an allOf. Violations are
 * collected, then sorted as the API server sorts them.
 */

enum level { LEVEL_ROOT, LEVEL_ITEM, LEVEL_FIELD };

struct serrs {
    char **v;
    size_t n, cap;
};

static void serr(struct serrs *e, const char *fmt, ...) KD_PRINTF(2, 3);
static void serr(struct serrs *e, const char *fmt, ...)
{
    struct kd_buf b = KD_BUF_INIT(MSG_MAX);
    va_list ap;
    va_start(ap, fmt);
    bvprintf(&b, fmt, ap);
    va_end(ap);
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 8;
        e->v = kd_xrealloc(e->v, e->cap * sizeof(*e->v));
    }
    e->v[e->n++] = kd_xstrdup(kd_buf_str(&b));
    kd_buf_free(&b);
}

/* Exactly [{type: integer}, {type: string}], in that order, nothing else. */
static bool int_or_string_anyof(const json_t *any)
{
    static const char *const want[] = {"integer", "string"};
    if (json_array_size(any) != 2)
        return false;
    for (size_t i = 0; i < 2; i++) {
        const json_t *x = json_array_get(any, i);
        const char *t = json_string_value(json_object_get(x, "type"));
        if (!json_is_object(x) || json_object_size(x) != 1 || t == NULL || strcmp(t, want[i]) != 0)
            return false;
    }
    return true;
}

static bool int_or_string_allof(const json_t *s)
{
    const json_t *all = json_object_get(s, "allOf");
    return json_array_size(all) >= 1 &&
           int_or_string_anyof(json_object_get(json_array_get(all, 0), "anyOf"));
}

static void nested(const json_t *v, const char *path, bool skip_any, bool skip_first_all_any,
                   struct serrs *e, int depth);

/* The junctors of a node (structural or nested). */
static void junctors(const json_t *s, const char *path, bool skip_any, bool skip_first_all_any,
                     struct serrs *e, int depth)
{
    static const char *const logic[] = {"anyOf", "allOf", "oneOf"};
    for (size_t j = 0; j < sizeof(logic) / sizeof(logic[0]); j++) {
        const json_t *arr = json_object_get(s, logic[j]);
        if (j == 0 && skip_any)
            continue;
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char *p = kd_xasprintf("%s.%s[%zu]", path, logic[j], i);
            nested(json_array_get(arr, i), p, j == 1 && i == 0 && skip_first_all_any, false, e,
                   depth + 1);
            free(p);
        }
    }
    if (json_object_get(s, "not") != NULL) {
        char *p = kd_xasprintf("%s.not", path);
        nested(json_object_get(s, "not"), p, false, false, e, depth + 1);
        free(p);
    }
}

/* A value validation under anyOf/allOf/oneOf/not. */
static void nested(const json_t *v, const char *path, bool skip_any, bool skip_first_all_any,
                   struct serrs *e, int depth)
{
    if (!json_is_object(v) || depth > MAX_DEPTH)
        return;
    junctors(v, path, skip_any, skip_first_all_any, e, depth);
    if (json_object_get(v, "items") != NULL) {
        char *p = kd_xasprintf("%s.items", path);
        nested(json_object_get(v, "items"), p, false, false, e, depth + 1);
        free(p);
    }
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)json_object_get(v, "properties"), k, x)
    {
        char *p = kd_xasprintf("%s.properties[%s]", path, k);
        nested(x, p, false, false, e, depth + 1);
        free(p);
    }
    const char *type = json_string_value(json_object_get(v, "type"));
    const char *title = json_string_value(json_object_get(v, "title"));
    const char *desc = json_string_value(json_object_get(v, "description"));
    if (type && type[0])
        serr(e, "%s.type: Forbidden: must be empty to be structural", path);
    if (json_object_get(v, "additionalProperties") != NULL)
        serr(e, "%s.additionalProperties: Forbidden: must be undefined to be structural", path);
    if (json_object_get(v, "default") != NULL && !json_is_null(json_object_get(v, "default")))
        serr(e, "%s.default: Forbidden: must be undefined to be structural", path);
    if (title && title[0])
        serr(e, "%s.title: Forbidden: must be empty to be structural", path);
    if (desc && desc[0])
        serr(e, "%s.description: Forbidden: must be empty to be structural", path);
    if (is_true(v, "nullable"))
        serr(e, "%s.nullable: Forbidden: must be false to be structural", path);
    if (json_object_get(v, "externalDocs") != NULL)
        serr(e, "%s.externalDocs: Forbidden: must be undefined to be structural", path);
    static const char *const must_be_false[] = {"x-kubernetes-preserve-unknown-fields",
                                                "x-kubernetes-embedded-resource",
                                                "x-kubernetes-int-or-string"};
    for (size_t i = 0; i < sizeof(must_be_false) / sizeof(must_be_false[0]); i++)
        if (is_true(v, must_be_false[i]))
            serr(e, "%s.%s: Forbidden: must be false to be structural", path, must_be_false[i]);
    if (json_array_size(json_object_get(v, "x-kubernetes-list-map-keys")) > 0)
        serr(e, "%s.x-kubernetes-list-map-keys: Forbidden: must be empty to be structural", path);
    if (json_object_get(v, "x-kubernetes-list-type") != NULL)
        serr(e, "%s.x-kubernetes-list-type: Forbidden: must be undefined to be structural", path);
    if (json_object_get(v, "x-kubernetes-map-type") != NULL)
        serr(e, "%s.x-kubernetes-map-type: Forbidden: must be undefined to be structural", path);
    if (json_array_size(json_object_get(v, "x-kubernetes-validations")) > 0)
        serr(e, "%s.x-kubernetes-validations: Forbidden: must be empty to be structural", path);
    if (json_object_get(json_object_get(v, "properties"), "metadata") != NULL)
        serr(e, "%s.properties[metadata]: Forbidden: must not be specified in a nested context",
             path);
}

static void structural(const json_t *s, const char *path, enum level lvl, struct serrs *e,
                       int depth)
{
    if (!json_is_object(s) || depth > MAX_DEPTH)
        return;
    const char *type = json_string_value(json_object_get(s, "type"));
    bool ios = is_true(s, "x-kubernetes-int-or-string");
    bool pres = is_true(s, "x-kubernetes-preserve-unknown-fields");
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *items = json_object_get(s, "items");
    if (type && strcmp(type, "array") == 0 && !json_is_object(items))
        serr(e, "%s.items: Required value: must be specified", path);
    if (json_is_object(items)) {
        char *p = kd_xasprintf("%s.items", path);
        structural(items, p, LEVEL_ITEM, e, depth + 1);
        free(p);
    }
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)props, k, x)
    {
        char *p = kd_xasprintf("%s.properties[%s]", path, k);
        structural(x, p, LEVEL_FIELD, e, depth + 1);
        free(p);
    }
    if (props && addl && !json_is_false(addl))
        serr(e,
             "%s.additionalProperties: Forbidden: additionalProperties and properties are "
             "mutual exclusive",
             path);
    if (addl != NULL && lvl == LEVEL_ROOT)
        serr(e, "%s.additionalProperties: Forbidden: must not be used at the root", path);
    if (json_is_object(addl)) {
        char *p = kd_xasprintf("%s.additionalProperties", path);
        structural(addl, p, LEVEL_FIELD, e, depth + 1);
        free(p);
    }
    if (ios && pres)
        serr(e,
             "%s.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if "
             "x-kubernetes-int-or-string is true",
             path);
    if (ios && is_true(s, "x-kubernetes-embedded-resource"))
        serr(e,
             "%s.x-kubernetes-embedded-resource: Invalid value: true: must be false if "
             "x-kubernetes-int-or-string is true",
             path);
    junctors(s, path, int_or_string_anyof(json_object_get(s, "anyOf")), int_or_string_allof(s), e,
             depth);
    if ((type == NULL || type[0] == '\0') && !ios && !pres)
        serr(e, "%s.type: Required value: must not be empty %s", path,
             lvl == LEVEL_ROOT   ? "at the root"
             : lvl == LEVEL_ITEM ? "for specified array items"
                                 : "for specified object fields");
}

/*
 * Every property or items that a value validation at the root names must
 * also be in the structural schema (the API server checks this for the
 * root's junctors).
 */
static void complete(const json_t *v, const json_t *s, const char *spath, const char *vpath,
                     struct serrs *e, int depth)
{
    if (!json_is_object(v) || depth > MAX_DEPTH)
        return;
    if (!json_is_object(s)) {
        serr(e, "%s: Required value: because it is defined in %s", spath, vpath);
        return;
    }
    static const char *const logic[] = {"allOf", "anyOf", "oneOf"};
    if (json_object_get(v, "not") != NULL) {
        char *p = kd_xasprintf("%s.not", vpath);
        complete(json_object_get(v, "not"), s, spath, p, e, depth + 1);
        free(p);
    }
    for (size_t j = 0; j < sizeof(logic) / sizeof(logic[0]); j++) {
        const json_t *arr = json_object_get(v, logic[j]);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char *p = kd_xasprintf("%s.%s[%zu]", vpath, logic[j], i);
            complete(json_array_get(arr, i), s, spath, p, e, depth + 1);
            free(p);
        }
    }
    if (depth == 0)
        return; /* the root itself is the structural schema */
    if (json_object_get(v, "items") != NULL) {
        char *sp = kd_xasprintf("%s.items", spath), *vp = kd_xasprintf("%s.items", vpath);
        complete(json_object_get(v, "items"), json_object_get(s, "items"), sp, vp, e, depth + 1);
        free(sp);
        free(vp);
    }
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)json_object_get(v, "properties"), k, x)
    {
        char *sp = kd_xasprintf("%s.properties[%s]", spath, k);
        char *vp = kd_xasprintf("%s.properties[%s]", vpath, k);
        const json_t *sx = json_object_get(json_object_get(s, "properties"), k);
        if (sx == NULL)
            serr(e, "%s: Required value: because it is defined in %s", sp, vp);
        else
            complete(x, sx, sp, vp, e, depth + 1);
        free(sp);
        free(vp);
    }
}

/* Split "FIELD: Forbidden: detail" lines into causes as the API server sends them. */
static json_t *structural_causes(const char *lines)
{
    static const struct {
        const char *sep, *reason;
    } kinds[] = {{": Forbidden: ", "FieldValueForbidden"},
                 {": Required value", "FieldValueRequired"},
                 {": Invalid value: ", "FieldValueInvalid"}};
    json_t *out = json_array();
    char *copy = kd_xstrdup(lines), *next;
    for (char *line = copy; line != NULL && *line; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        const char *reason = "FieldValueInvalid";
        char *sep = NULL;
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
            char *at = strstr(line, kinds[i].sep);
            if (at != NULL && (sep == NULL || at < sep)) {
                sep = at;
                reason = kinds[i].reason;
            }
        }
        if (sep != NULL)
            *sep = '\0';
        json_t *c = json_pack("{s:s,s:s,s:s}", "reason", reason, "field", sep ? line : "",
                              "message", sep ? sep + 2 : line);
        if (c == NULL || json_array_append_new(out, c) != 0)
            kd_oom(strlen(line));
    }
    free(copy);
    return out;
}

int kd_openapi_structural_causes(const json_t *schema, const char *root_path, json_t **causes)
{
    char err[KD_ERRLEN] = "";
    int rc = kd_openapi_check_structural(schema, root_path, err);
    if (causes != NULL)
        *causes = rc == KD_EINVALID ? structural_causes(err) : NULL;
    return rc;
}

int kd_openapi_check_structural(const json_t *schema, const char *root_path, char *err)
{
    int rc = 0;
    struct serrs e = {NULL, 0, 0};
    struct kd_buf b = KD_BUF_INIT(KD_ERRLEN - 1);
    const char *root = root_path ? root_path : "openAPIV3Schema";
    if (!json_is_object(schema)) {
        rc = kd_seterr(err, KD_EINVALID, "%s: Required value: a schema object", root);
        goto out;
    }
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type == NULL || strcmp(type, "object") != 0) {
        rc = kd_seterr(err, KD_EINVALID, "%s.type: Invalid value: \"%s\": must be object", root,
                       type ? type : "");
        goto out;
    }
    structural(schema, root, LEVEL_ROOT, &e, 0);
    complete(schema, schema, root, root, &e, 0);
    if (e.n > 0) {
        qsort(e.v, e.n, sizeof(*e.v), cmp_str);
        for (size_t i = 0; i < e.n; i++)
            bprintf(&b, "%s%s", i ? "\n" : "", e.v[i]);
        rc = kd_seterr(err, KD_EINVALID, "%s", kd_buf_str(&b));
        goto out;
    }
out:
    for (size_t i = 0; i < e.n; i++)
        free(e.v[i]);
    free(e.v);
    kd_buf_free(&b);
    return rc;
}

char *kd_openapi_causes_str(const json_t *causes)
{
    struct kd_buf b = KD_BUF_INIT(SIZE_MAX / 2);
    for (size_t i = 0; i < json_array_size(causes); i++) {
        const json_t *c = json_array_get(causes, i);
        if (kd_buf_printf(&b, "%s* %s: %s", i ? "\n" : "",
                          json_string_value(json_object_get(c, "field")),
                          json_string_value(json_object_get(c, "message"))) != 0)
            kd_oom(b.len);
    }
    char *s = kd_buf_steal(&b);
    if (s == NULL)
        kd_oom(1);
    return s;
}
