/*
 * Hand-written parser for label and field selectors: the grammar is tiny
 * (comma-separated requirements, parenthesised value sets) and the error
 * messages must name the position, which no library here offers.
 */
#include "selector.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#define MAX_REQS 64
#define MAX_VALUES 64
#define MAX_SELECTOR 4096

enum op { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOTEXISTS };

struct req {
    char *key;
    enum op op;
    char **values;
    size_t nvalues;
};

struct kd_selector {
    bool fields;
    struct req reqs[MAX_REQS];
    size_t nreqs;
};

void kd_selector_free(struct kd_selector *sel)
{
    if (sel == NULL)
        return;
    for (size_t i = 0; i < sel->nreqs; i++) {
        free(sel->reqs[i].key);
        for (size_t j = 0; j < sel->reqs[i].nvalues; j++)
            free(sel->reqs[i].values[j]);
        free(sel->reqs[i].values);
    }
    free(sel);
}

static bool key_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.' || c == '/';
}

static bool value_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

static char *read_token(const char **p, bool (*ok)(char))
{
    const char *start = *p;
    while (**p != '\0' && ok(**p))
        (*p)++;
    return kd_xstrndup(start, (size_t)(*p - start));
}

static void add_value(struct req *r, char *v)
{
    r->values = kd_xrealloc(r->values, (r->nvalues + 1) * sizeof(char *));
    r->values[r->nvalues++] = v;
}

static int parse_label_req(const char *s, const char **p, struct req *r, char *err)
{
    int rc = 0;
    skip_ws(p);
    bool neg = false;
    if (**p == '!') {
        neg = true;
        (*p)++;
        skip_ws(p);
    }
    r->key = read_token(p, key_char);
    if (r->key[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL,
                       "unable to parse requirement: position %d: a label key is required",
                       (int)(*p - s));
        goto out;
    }
    skip_ws(p);
    if (neg) {
        r->op = OP_NOTEXISTS;
        goto out;
    }
    if (**p == '\0' || **p == ',') {
        r->op = OP_EXISTS;
        goto out;
    }
    if ((*p)[0] == '=' && (*p)[1] == '=') {
        r->op = OP_EQ;
        *p += 2;
    } else if ((*p)[0] == '=') {
        r->op = OP_EQ;
        *p += 1;
    } else if ((*p)[0] == '!' && (*p)[1] == '=') {
        r->op = OP_NE;
        *p += 2;
    } else if (strncmp(*p, "in", 2) == 0 && !key_char((*p)[2])) {
        r->op = OP_IN;
        *p += 2;
    } else if (strncmp(*p, "notin", 5) == 0 && !key_char((*p)[5])) {
        r->op = OP_NOTIN;
        *p += 5;
    } else {
        rc = kd_seterr(err, KD_EINVAL,
                       "unable to parse requirement: position %d: found '%c', expected: "
                       "in, notin, =, ==, !=, gt, lt",
                       (int)(*p - s), **p);
        goto out;
    }
    skip_ws(p);
    if (r->op == OP_EQ || r->op == OP_NE) {
        add_value(r, read_token(p, value_char));
        goto out;
    }
    if (**p != '(') {
        rc = kd_seterr(err, KD_EINVAL,
                       "unable to parse requirement: position %d: found '%c', "
                       "expected: '('",
                       (int)(*p - s), **p ? **p : ' ');
        goto out;
    }
    (*p)++;
    for (;;) {
        skip_ws(p);
        if (r->nvalues >= MAX_VALUES) {
            rc = kd_seterr(err, KD_EINVAL, "position %d: more than %d values in a set",
                           (int)(*p - s), MAX_VALUES);
            goto out;
        }
        add_value(r, read_token(p, value_char));
        skip_ws(p);
        if (**p == ',') {
            (*p)++;
            continue;
        }
        if (**p == ')') {
            (*p)++;
            break;
        }
        rc = kd_seterr(err, KD_EINVAL,
                       "unable to parse requirement: position %d: found '%c', "
                       "expected: ',' or ')'",
                       (int)(*p - s), **p ? **p : ' ');
        goto out;
    }
out:
    return rc;
}

static int parse(const char *s, bool fields, const char *const *allowed, struct kd_selector **out,
                 char *err)
{
    int rc = 0;
    struct kd_selector *sel = kd_xcalloc(1, sizeof(*sel));
    sel->fields = fields;
    *out = NULL;
    if (s == NULL)
        s = "";
    if (strlen(s) > MAX_SELECTOR) {
        rc = kd_seterr(err, KD_EINVAL, "selector longer than %d bytes", MAX_SELECTOR);
        goto out;
    }
    const char *p = s;
    skip_ws(&p);
    while (*p != '\0') {
        if (sel->nreqs >= MAX_REQS) {
            rc = kd_seterr(err, KD_EINVAL, "more than %d requirements in a selector", MAX_REQS);
            goto out;
        }
        struct req *r = &sel->reqs[sel->nreqs++];
        if (!fields) {
            rc = parse_label_req(s, &p, r, err);
            if (rc != 0)
                goto out;
        } else {
            const char *start = p;
            while (*p != '\0' && *p != '=' && *p != '!' && *p != ',')
                p++;
            r->key = kd_xstrndup(start, (size_t)(p - start));
            if (p[0] == '=' && p[1] == '=') {
                r->op = OP_EQ;
                p += 2;
            } else if (p[0] == '=') {
                r->op = OP_EQ;
                p += 1;
            } else if (p[0] == '!' && p[1] == '=') {
                r->op = OP_NE;
                p += 2;
            } else {
                rc = kd_seterr(err, KD_EINVAL, "invalid selector: '%s'; can't understand '%s'", s,
                               r->key);
                goto out;
            }
            start = p;
            while (*p != '\0' && *p != ',')
                p++;
            add_value(r, kd_xstrndup(start, (size_t)(p - start)));
            bool ok =
                strcmp(r->key, "metadata.name") == 0 || strcmp(r->key, "metadata.namespace") == 0;
            for (const char *const *a = allowed; !ok && a != NULL && *a != NULL; a++)
                ok = strcmp(r->key, *a) == 0;
            if (!ok) {
                rc = kd_seterr(err, KD_EINVAL, "field label not supported: %s", r->key);
                goto out;
            }
        }
        skip_ws(&p);
        if (*p == ',') {
            p++;
            skip_ws(&p);
            if (*p == '\0') {
                rc = kd_seterr(err, KD_EINVAL, "position %d: a requirement is missing after ','",
                               (int)(p - s));
                goto out;
            }
        } else if (*p != '\0') {
            rc = kd_seterr(err, KD_EINVAL, "position %d: found '%c', expected: ',' or end",
                           (int)(p - s), *p);
            goto out;
        }
    }
    *out = sel;
    sel = NULL;
out:
    kd_selector_free(sel);
    return rc;
}

int kd_selector_parse_labels(const char *s, struct kd_selector **out, char *err)
{
    return parse(s, false, NULL, out, err);
}

int kd_selector_parse_fields(const char *s, const char *const *allowed, struct kd_selector **out,
                             char *err)
{
    return parse(s, true, allowed, out, err);
}

/* The value of a dotted path as a string ("" when absent, as the API server treats it). */
static const char *field_value(const json_t *obj, const char *path, char *buf, size_t len)
{
    const json_t *cur = obj;
    const char *p = path;
    while (cur != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
        char key[128];
        if (n >= sizeof(key))
            return "";
        memcpy(key, p, n);
        key[n] = '\0';
        cur = json_object_get(cur, key);
        p += n + (dot != NULL ? 1 : 0);
        if (dot == NULL)
            break;
    }
    if (json_is_string(cur))
        return json_string_value(cur);
    if (json_is_true(cur))
        return "true";
    if (json_is_false(cur))
        return "false";
    if (json_is_integer(cur)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(cur));
        return buf;
    }
    return "";
}

bool kd_selector_match(const struct kd_selector *sel, const json_t *obj)
{
    if (sel == NULL)
        return true;
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    for (size_t i = 0; i < sel->nreqs; i++) {
        const struct req *r = &sel->reqs[i];
        const char *v;
        char buf[32];
        if (sel->fields) {
            v = field_value(obj, r->key, buf, sizeof(buf));
            if (strcmp(r->key, "spec.unschedulable") == 0 && v[0] == '\0')
                v = "false";
        } else {
            v = json_string_value(json_object_get(labels, r->key));
        }
        bool in = false;
        for (size_t j = 0; v != NULL && j < r->nvalues; j++)
            in = in || strcmp(v, r->values[j]) == 0;
        bool ok;
        switch (r->op) {
        case OP_EQ:
        case OP_IN: ok = v != NULL && in; break;
        case OP_NE:
        case OP_NOTIN: ok = v == NULL || !in; break;
        case OP_EXISTS: ok = v != NULL; break;
        case OP_NOTEXISTS: ok = v == NULL; break;
        default: ok = false;
        }
        if (!ok)
            return false;
    }
    return true;
}
