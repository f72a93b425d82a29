/*
 * YAML documents to jansson trees with a parallel tree of source positions,
 * built from libyaml's event stream; and jansson values back to YAML
 * through libyaml's emitter, choosing quoting so the text re-reads the same.
 */
#include "yaml/yaml.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#include "core/alloc.h"
#define uthash_fatal(msg) kd_oom(0)
#include <uthash.h>

#include "core/str.h"

/*
 * One node of the position tree. It mirrors the JSON tree: a mapping's
 * kids are its entries in insertion order (with their keys), a sequence's
 * kids its items. `val` is borrowed from the JSON tree.
 */
struct ynode {
    json_t *val;
    int line, col;   /* of the value, 1-based */
    int kline, kcol; /* of the key, when this node is a mapping value */
    char *key;       /* the key, when this node is a mapping value (owned) */
    bool merge;      /* the value of a `<<` merge key, applied when the mapping ends */
    struct ynode *kids;
    size_t nkids, capkids;
};

struct kd_yaml_doc {
    char *name;
    json_t *root;
    struct ynode top; /* top.val == root */
};

/* An anchored node, kept as a finished copy for later aliases. */
struct anchor {
    char *name;
    json_t *val;       /* reference held */
    struct ynode *pos; /* deep copy (owned) */
    size_t nodes;      /* nodes in the subtree, for the expansion budget */
    size_t bytes;      /* expanded bytes of the subtree, for the byte budget */
    size_t uses;       /* aliases that expanded it so far, for the error message */
    UT_hash_handle hh; /* by name: an alias finds its anchor in O(1) */
};

/* A mapping or sequence being built. */
struct frame {
    struct ynode *node; /* points into the parent's kids (stable while open) */
    char *anchor;       /* anchor to register when the node ends (owned) */
    size_t start_nodes; /* node count when the node started */
    size_t start_bytes; /* byte count when the node started */
    /* mapping state: the pending key */
    bool is_map;
    bool have_key;
    char *key;
    int kline, kcol;
    bool key_is_merge;
};

struct builder {
    const char *name;
    char *err;
    int rc;
    struct frame stack[KD_YAML_MAX_DEPTH + 1];
    int depth;
    size_t nodes;
    size_t bytes;           /* expanded size so far: see count_node */
    struct anchor *anchors; /* uthash table */
    struct ynode *docnode;  /* the document being built */
    bool doc_done;
};

static void ynode_clear(struct ynode *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        ynode_clear(&n->kids[i]);
    if (n->merge) /* a pending << value is owned by its node, not by a container */
        json_decref(n->val);
    n->merge = false;
    free(n->kids);
    free(n->key);
    n->kids = NULL;
    n->key = NULL;
    n->nkids = n->capkids = 0;
}

static struct ynode *ynode_add(struct ynode *parent)
{
    if (parent->nkids == parent->capkids) {
        parent->capkids = parent->capkids ? parent->capkids * 2 : 4;
        parent->kids = kd_xrealloc(parent->kids, parent->capkids * sizeof(*parent->kids));
    }
    struct ynode *k = &parent->kids[parent->nkids++];
    memset(k, 0, sizeof(*k));
    return k;
}

/* Deep-copy src's positions onto dst, whose val is the matching node of a copied tree. */
static void ynode_copy(struct ynode *dst, const struct ynode *src, json_t *val)
{
    dst->val = val;
    dst->line = src->line;
    dst->col = src->col;
    dst->nkids = dst->capkids = 0;
    dst->kids = NULL;
    if (src->nkids == 0)
        return;
    dst->kids = kd_xcalloc(src->nkids, sizeof(*dst->kids));
    dst->capkids = src->nkids;
    for (size_t i = 0; i < src->nkids; i++) {
        const struct ynode *s = &src->kids[i];
        struct ynode *d = &dst->kids[i];
        json_t *kv = NULL;
        if (json_is_object(val) && s->key)
            kv = json_object_get(val, s->key);
        else if (json_is_array(val))
            kv = json_array_get(val, i);
        ynode_copy(d, s, kv);
        d->kline = s->kline;
        d->kcol = s->kcol;
        d->key = s->key ? kd_xstrdup(s->key) : NULL;
        d->merge = false;
        dst->nkids++;
    }
}

static int berr(struct builder *b, int code, yaml_mark_t m, const char *fmt, ...) KD_PRINTF(4, 5);
static int berr(struct builder *b, int code, yaml_mark_t m, const char *fmt, ...)
{
    if (b->rc)
        return b->rc;
    b->rc = code;
    if (b->err) {
        char msg[KD_ERRLEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        kd_seterr(b->err, code, "%s:%zu:%zu: %s", b->name, m.line + 1, m.column + 1, msg);
    }
    return code;
}

/* ---- scalar typing (YAML 1.2 core schema) --------------------------------- */

enum stype { S_STR, S_NULL, S_BOOL, S_INT, S_FLOAT, S_INF };

static bool all_in(const char *s, size_t n, const char *set)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]) || s[i] == '\0')
            return false;
    return true;
}

static bool is_float_text(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    size_t intd = 0, fracd = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++, intd++;
    bool dot = false;
    if (i < n && s[i] == '.') {
        dot = true;
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, fracd++;
    }
    if (intd == 0 && fracd == 0)
        return false;
    if (intd == 0 && !dot)
        return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        size_t ed = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, ed++;
        if (ed == 0)
            return false;
    }
    return i == n;
}

static enum stype classify(const char *s, size_t n)
{
    if (n == 0)
        return S_NULL;
    if ((n == 1 && s[0] == '~') ||
        (n == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4))))
        return S_NULL;
    if ((n == 4 && (!memcmp(s, "true", 4) || !memcmp(s, "True", 4) || !memcmp(s, "TRUE", 4))) ||
        (n == 5 && (!memcmp(s, "false", 5) || !memcmp(s, "False", 5) || !memcmp(s, "FALSE", 5))))
        return S_BOOL;
    size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (all_in(s + i, n - i, "0123456789"))
        return S_INT;
    if (n > 2 && s[0] == '0' && s[1] == 'o' && all_in(s + 2, n - 2, "01234567"))
        return S_INT;
    if (n > 2 && s[0] == '0' && s[1] == 'x' && all_in(s + 2, n - 2, "0123456789abcdefABCDEF"))
        return S_INT;
    if (is_float_text(s, n))
        return S_FLOAT;
    i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (n - i == 4 &&
        (!memcmp(s + i, ".inf", 4) || !memcmp(s + i, ".Inf", 4) || !memcmp(s + i, ".INF", 4)))
        return S_INF;
    if (n == 4 && (!memcmp(s, ".nan", 4) || !memcmp(s, ".NaN", 4) || !memcmp(s, ".NAN", 4)))
        return S_INF;
    return S_STR;
}

/* Integer text (already classified S_INT) to int64; false on overflow. */
static bool int_value(const char *s, size_t n, int64_t *out)
{
    bool neg = false;
    size_t i = 0;
    int base = 10;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        i = 1;
    } else if (n > 2 && s[0] == '0' && s[1] == 'o') {
        base = 8;
        i = 2;
    } else if (n > 2 && s[0] == '0' && s[1] == 'x') {
        base = 16;
        i = 2;
    }
    uint64_t v = 0;
    uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        int d = s[i] >= 'a' ? s[i] - 'a' + 10 : s[i] >= 'A' ? s[i] - 'A' + 10 : s[i] - '0';
        if (v > (lim - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/*
 * The JSON value of a scalar event, or NULL with the error set. Plain
 * scalars are typed; quoted and block ones are strings; tags override.
 */
static json_t *scalar_value(struct builder *b, const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    yaml_mark_t m = ev->start_mark;
    enum stype t = S_STR;
    bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    json_t *v = NULL;

    if (tag && strcmp(tag, "!") != 0) {
        if (!strcmp(tag, YAML_STR_TAG)) {
            t = S_STR;
        } else if (!strcmp(tag, YAML_NULL_TAG) || !strcmp(tag, YAML_BOOL_TAG) ||
                   !strcmp(tag, YAML_INT_TAG) || !strcmp(tag, YAML_FLOAT_TAG)) {
            t = classify(s, n);
            enum stype want = !strcmp(tag, YAML_NULL_TAG)   ? S_NULL
                              : !strcmp(tag, YAML_BOOL_TAG) ? S_BOOL
                              : !strcmp(tag, YAML_INT_TAG)  ? S_INT
                                                            : S_FLOAT;
            if (want == S_FLOAT && t == S_INT)
                t = S_FLOAT;
            if (t != want && !(want == S_FLOAT && t == S_INF)) {
                berr(b, KD_EPARSE, m, "value does not match its tag %s", tag);
                return NULL;
            }
        } else {
            berr(b, KD_EPARSE, m, "unsupported tag %s (only the YAML core tags such as !!str)",
                 tag);
            return NULL;
        }
    } else if (plain && !tag) {
        t = classify(s, n);
    }

    switch (t) {
    case S_NULL: v = json_null(); break;
    case S_BOOL: v = json_boolean(s[0] == 't' || s[0] == 'T'); break;
    case S_INT: {
        int64_t iv;
        if (!int_value(s, n, &iv)) {
            berr(b, KD_EPARSE, m, "integer %.*s is out of range (64-bit)", (int)(n > 40 ? 40 : n),
                 s);
            return NULL;
        }
        v = json_integer((json_int_t)iv);
        break;
    }
    case S_FLOAT: {
        char tmp[128];
        double d;
        if (n >= sizeof(tmp)) {
            berr(b, KD_EPARSE, m, "number too long");
            return NULL;
        }
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        errno = 0;
        d = strtod(tmp, NULL);
        if (!isfinite(d)) {
            berr(b, KD_EPARSE, m, "number %s is out of range", tmp);
            return NULL;
        }
        v = json_real(d);
        break;
    }
    case S_INF:
        berr(b, KD_EPARSE, m,
             "%.*s (infinity or NaN) cannot be represented in JSON; quote it to make it a string",
             (int)n, s);
        return NULL;
    case S_STR:
        v = json_stringn(s, n);
        if (!v) {
            berr(b, KD_EPARSE, m, "string is not valid UTF-8");
            return NULL;
        }
        break;
    }
    if (!v)
        kd_oom(n);
    return v;
}

/* ---- building the tree ------------------------------------------------------ */

static struct anchor *find_anchor(struct builder *b, const char *name)
{
    struct anchor *a = NULL;
    HASH_FIND_STR(b->anchors, name, a);
    return a;
}

static void anchor_free(struct anchor *a)
{
    free(a->name);
    json_decref(a->val);
    ynode_clear(a->pos);
    free(a->pos);
    free(a);
}

/* Register (or redefine: the latest definition wins) an anchor; takes `name`. */
static void add_anchor(struct builder *b, char *name, const struct ynode *n, size_t nodes,
                       size_t bytes)
{
    struct anchor *old = find_anchor(b, name);
    if (old) {
        HASH_DEL(b->anchors, old);
        anchor_free(old);
    }
    struct anchor *a = kd_xcalloc(1, sizeof(*a));
    a->name = name;
    a->val = json_incref(n->val);
    a->pos = kd_xcalloc(1, sizeof(*a->pos));
    ynode_copy(a->pos, n, a->val);
    a->nodes = nodes;
    a->bytes = bytes;
    HASH_ADD_KEYPTR(hh, b->anchors, a->name, strlen(a->name), a);
}

/*
 * Place a finished value `v` (reference stolen) at the current position:
 * into the open mapping (as key or value) or sequence, or as the document.
 * Returns the position node, or NULL on error (v released).
 */
static struct ynode *place(struct builder *b, json_t *v, yaml_mark_t m, const yaml_event_t *ev)
{
    struct ynode *pos = NULL;
    if (b->depth == 0) {
        pos = b->docnode;
        pos->val = v;
    } else {
        struct frame *f = &b->stack[b->depth - 1];
        struct ynode *parent = f->node;
        if (f->is_map && !f->have_key) {
            /* v is a key: it must be a scalar. */
            if (!ev || ev->type != YAML_SCALAR_EVENT) {
                json_decref(v);
                berr(b, KD_EPARSE, m, "mapping keys must be scalars (strings)");
                return NULL;
            }
            size_t n = ev->data.scalar.length;
            const char *s = (const char *)ev->data.scalar.value;
            json_decref(v);
            if (memchr(s, '\0', n)) {
                berr(b, KD_EPARSE, m, "mapping key contains a NUL character");
                return NULL;
            }
            f->key = kd_xstrndup(s, n);
            f->have_key = true;
            f->kline = (int)m.line + 1;
            f->kcol = (int)m.column + 1;
            f->key_is_merge =
                ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !strcmp(f->key, "<<");
            /* The object finds duplicates in O(1); the scan only runs to name the first. */
            if (!f->key_is_merge && json_object_get(parent->val, f->key)) {
                for (size_t i = 0; i < parent->nkids; i++) {
                    if (!parent->kids[i].merge && !strcmp(parent->kids[i].key, f->key)) {
                        berr(b, KD_EPARSE, m, "duplicate key \"%s\" (first at %d:%d)", f->key,
                             parent->kids[i].kline, parent->kids[i].kcol);
                        return NULL;
                    }
                }
            } else if (f->key_is_merge) {
                for (size_t i = 0; i < parent->nkids; i++) {
                    if (parent->kids[i].merge) {
                        berr(b, KD_EPARSE, m, "duplicate merge key << (first at %d:%d)",
                             parent->kids[i].kline, parent->kids[i].kcol);
                        return NULL;
                    }
                }
            }
            return parent; /* any non-NULL */
        }
        pos = ynode_add(parent);
        pos->val = v;
        if (f->is_map) {
            pos->key = f->key;
            f->key = NULL;
            pos->kline = f->kline;
            pos->kcol = f->kcol;
            pos->merge = f->key_is_merge;
            f->have_key = false;
            /* A << value stays owned by its node until the mapping ends. */
            if (!pos->merge && json_object_set_new(parent->val, pos->key, v))
                kd_oom(64);
        } else {
            if (json_array_append_new(parent->val, v))
                kd_oom(64);
        }
    }
    pos->line = (int)m.line + 1;
    pos->col = (int)m.column + 1;
    return pos;
}

/* Apply the `<<` entries of a finished mapping: keys not set explicitly are added. */
static int apply_merges(struct builder *b, struct ynode *map, yaml_mark_t m)
{
    size_t mi = map->nkids;
    for (size_t i = 0; i < map->nkids; i++)
        if (map->kids[i].merge)
            mi = i;
    if (mi == map->nkids)
        return 0;
    struct ynode merge = map->kids[mi];
    memmove(&map->kids[mi], &map->kids[mi + 1], (map->nkids - mi - 1) * sizeof(*map->kids));
    map->nkids--;

    struct ynode *srcs = NULL;
    size_t nsrc = 0;
    if (json_is_object(merge.val)) {
        srcs = &merge;
        nsrc = 1;
    } else if (json_is_array(merge.val)) {
        srcs = merge.kids;
        nsrc = merge.nkids;
        for (size_t i = 0; i < nsrc; i++) {
            if (!json_is_object(srcs[i].val)) {
                yaml_mark_t pm = {0, (size_t)srcs[i].line - 1, (size_t)srcs[i].col - 1};
                berr(b, KD_EPARSE, pm, "a << merge list must hold only mappings");
                goto out;
            }
        }
    } else {
        yaml_mark_t pm = {0, (size_t)merge.line - 1, (size_t)merge.col - 1};
        (void)m;
        berr(b, KD_EPARSE, pm, "the value of a << merge key must be a mapping or a list of them");
        goto out;
    }
    for (size_t s = 0; s < nsrc; s++) {
        struct ynode *src = &srcs[s];
        for (size_t k = 0; k < src->nkids; k++) {
            struct ynode *e = &src->kids[k];
            if (json_object_get(map->val, e->key))
                continue;
            if (json_object_set(map->val, e->key, e->val))
                kd_oom(64);
            struct ynode *d = ynode_add(map);
            *d = *e;
            memset(e, 0, sizeof(*e));
            e->key = kd_xstrdup(d->key); /* keep src consistent for ynode_clear */
        }
    }
out:
    ynode_clear(&merge); /* releases merge.val */
    return b->rc;
}

static void free_anchors(struct builder *b)
{
    struct anchor *a, *tmp;
    HASH_ITER(hh, b->anchors, a, tmp)
    {
        HASH_DEL(b->anchors, a);
        anchor_free(a);
    }
    b->anchors = NULL;
}

/*
 * Count `add` nodes of `bytes` expanded bytes against both budgets. The node
 * cap alone lets a few aliases of one long string grow the tree by
 * gigabytes, so the bytes count too: a scalar costs its length plus one, a
 * mapping or sequence one. Text without aliases never costs more than its
 * own length, which is under KD_YAML_MAX_INPUT. `alias` (NULL for a node
 * written out) is named in the error when its expansion passed a budget.
 */
static int count_node(struct builder *b, size_t add, size_t bytes, const struct anchor *alias,
                      yaml_mark_t m)
{
    b->nodes += add;
    b->bytes += bytes;
    if (b->nodes > KD_YAML_MAX_NODES && alias)
        return berr(b, KD_ETOOBIG, m,
                    "document too large: more than %d nodes (alias *%s of %zu nodes used %zu "
                    "times)",
                    KD_YAML_MAX_NODES, alias->name, alias->nodes, alias->uses);
    if (b->nodes > KD_YAML_MAX_NODES)
        return berr(b, KD_ETOOBIG, m, "document too large: more than %d nodes (aliases counted)",
                    KD_YAML_MAX_NODES);
    if (b->bytes > KD_YAML_MAX_BYTES && alias)
        return berr(b, KD_ETOOBIG, m,
                    "expands to more than %u bytes (alias *%s of %zu bytes used %zu times)",
                    (unsigned)KD_YAML_MAX_BYTES, alias->name, alias->bytes, alias->uses);
    if (b->bytes > KD_YAML_MAX_BYTES)
        return berr(b, KD_ETOOBIG, m, "expands to more than %u bytes", (unsigned)KD_YAML_MAX_BYTES);
    return 0;
}

/* Feed one event to the builder. */
static int on_event(struct builder *b, const yaml_event_t *ev)
{
    yaml_mark_t m = ev->start_mark;
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        size_t sbytes = ev->data.scalar.length + 1;
        if (count_node(b, 1, sbytes, NULL, m))
            return b->rc;
        json_t *v = scalar_value(b, ev);
        if (!v)
            return b->rc;
        bool is_key =
            b->depth > 0 && b->stack[b->depth - 1].is_map && !b->stack[b->depth - 1].have_key;
        struct ynode *pos = place(b, v, m, ev);
        if (!pos)
            return b->rc;
        if (ev->data.scalar.anchor && !is_key)
            add_anchor(b, kd_xstrdup((const char *)ev->data.scalar.anchor), pos, 1, sbytes);
        return 0;
    }
    case YAML_ALIAS_EVENT: {
        const char *name = (const char *)ev->data.alias.anchor;
        struct anchor *a = find_anchor(b, name);
        if (!a)
            return berr(b, KD_EPARSE, m, "alias *%s refers to no complete anchor", name);
        a->uses++;
        if (count_node(b, a->nodes, a->bytes, a, m))
            return b->rc;
        bool is_key =
            b->depth > 0 && b->stack[b->depth - 1].is_map && !b->stack[b->depth - 1].have_key;
        if (is_key)
            return berr(b, KD_EPARSE, m, "aliases cannot be used as mapping keys");
        json_t *copy = json_deep_copy(a->val);
        if (!copy)
            kd_oom(64);
        struct ynode *pos = place(b, copy, m, NULL);
        if (!pos)
            return b->rc;
        struct ynode tmp;
        memset(&tmp, 0, sizeof(tmp));
        ynode_copy(&tmp, a->pos, pos->val);
        pos->kids = tmp.kids;
        pos->nkids = tmp.nkids;
        pos->capkids = tmp.capkids;
        return 0;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        const yaml_char_t *tag = is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
        const yaml_char_t *anchor =
            is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
        if (tag && strcmp((const char *)tag, is_map ? YAML_MAP_TAG : YAML_SEQ_TAG) &&
            strcmp((const char *)tag, "!"))
            return berr(b, KD_EPARSE, m, "unsupported tag %s", (const char *)tag);
        if (b->depth >= KD_YAML_MAX_DEPTH)
            return berr(b, KD_ETOOBIG, m, "nesting deeper than %d levels", KD_YAML_MAX_DEPTH);
        if (count_node(b, 1, 1, NULL, m))
            return b->rc;
        json_t *v = is_map ? json_object() : json_array();
        if (!v)
            kd_oom(64);
        struct ynode *pos = place(b, v, m, ev);
        if (!pos)
            return b->rc;
        struct frame *f = &b->stack[b->depth++];
        memset(f, 0, sizeof(*f));
        f->node = pos;
        f->is_map = is_map;
        f->anchor = anchor ? kd_xstrdup((const char *)anchor) : NULL;
        f->start_nodes = b->nodes;
        f->start_bytes = b->bytes;
        return 0;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        struct frame *f = &b->stack[b->depth - 1];
        if (f->is_map && apply_merges(b, f->node, m))
            return b->rc;
        if (f->anchor) {
            add_anchor(b, f->anchor, f->node, b->nodes - f->start_nodes + 1,
                       b->bytes - f->start_bytes + 1);
            f->anchor = NULL;
        }
        free(f->key);
        f->key = NULL;
        b->depth--;
        return 0;
    }
    case YAML_DOCUMENT_END_EVENT: b->doc_done = true; return 0;
    default: return 0;
    }
}

static void builder_free(struct builder *b)
{
    for (int i = 0; i < b->depth; i++) {
        free(b->stack[i].anchor);
        free(b->stack[i].key);
    }
    b->depth = 0;
    free_anchors(b);
}

static int parser_error(struct builder *b, const yaml_parser_t *p)
{
    const char *problem = p->problem ? p->problem : "syntax error";
    yaml_mark_t m = p->problem_mark;
    if (p->error == YAML_READER_ERROR) {
        m.line = 0;
        m.column = 0;
        return berr(b, KD_EPARSE, m, "%s (at byte %zu)", problem, p->problem_offset);
    }
    if (p->context)
        return berr(b, KD_EPARSE, m, "%s %s (started at %zu:%zu)", problem, p->context,
                    p->context_mark.line + 1, p->context_mark.column + 1);
    return berr(b, KD_EPARSE, m, "%s", problem);
}

/*
 * Run the parser over text. With multi == NULL exactly one document goes
 * into *top; otherwise every non-empty document's root is appended to multi.
 */
static int run_parser(struct builder *b, const char *text, size_t len, struct ynode *top,
                      json_t *multi)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int ndocs = 0;
    bool done = false;
    struct ynode doc;

    memset(&doc, 0, sizeof(doc));
    if (!yaml_parser_initialize(&p))
        kd_oom(sizeof(p));
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    while (!done && !b->rc) {
        if (!yaml_parser_parse(&p, &ev)) {
            parser_error(b, &p);
            break;
        }
        if (ev.type == YAML_DOCUMENT_START_EVENT) {
            ndocs++;
            if (!multi && ndocs > 1) {
                berr(b, KD_EPARSE, ev.start_mark,
                     "expected a single YAML document, found a second one (---)");
            } else if (ndocs > KD_YAML_MAX_DOCS) {
                berr(b, KD_ETOOBIG, ev.start_mark, "more than %d documents", KD_YAML_MAX_DOCS);
            }
            b->docnode = multi ? &doc : top;
            b->doc_done = false;
            b->nodes = multi ? b->nodes : 0;
            b->bytes = multi ? b->bytes : 0;
            free_anchors(b);
        } else if (ev.type == YAML_STREAM_END_EVENT) {
            done = true;
        } else {
            on_event(b, &ev);
            if (!b->rc && ev.type == YAML_DOCUMENT_END_EVENT && multi) {
                if (doc.val && !json_is_null(doc.val) && json_array_append(multi, doc.val))
                    kd_oom(64);
                json_decref(doc.val);
                ynode_clear(&doc);
                memset(&doc, 0, sizeof(doc));
            }
        }
        yaml_event_delete(&ev);
    }
    if (multi) {
        json_decref(doc.val);
        ynode_clear(&doc);
    }
    builder_free(b);
    yaml_parser_delete(&p);
    return b->rc;
}

int kd_yaml_parse(const char *name, const char *text, size_t len, struct kd_yaml_doc **out,
                  char *err)
{
    struct kd_yaml_doc *doc = NULL;
    struct builder b;
    int rc = 0;

    if (!out || (!text && len)) {
        rc = kd_seterr(err, KD_EINVAL, "kd_yaml_parse: invalid arguments");
        goto out;
    }
    *out = NULL;
    if (!name)
        name = "<input>";
    if (len > KD_YAML_MAX_INPUT) {
        rc = kd_seterr(err, KD_ETOOBIG, "%s: %zu bytes is over the %u-byte limit for YAML input",
                       name, len, (unsigned)KD_YAML_MAX_INPUT);
        goto out;
    }
    memset(&b, 0, sizeof(b));
    b.name = name;
    b.err = err;
    doc = kd_xcalloc(1, sizeof(*doc));
    doc->name = kd_xstrdup(name);
    rc = run_parser(&b, text ? text : "", len, &doc->top, NULL);
    if (rc)
        goto out;
    if (!doc->top.val) {
        doc->top.val = json_null();
        doc->top.line = doc->top.col = 1;
    }
    doc->root = doc->top.val;
    *out = doc;
    doc = NULL;
out:
    kd_yaml_free(doc);
    return rc;
}

int kd_yaml_parse_file(const char *path, struct kd_yaml_doc **out, char *err)
{
    struct kd_buf buf = KD_BUF_INIT(KD_YAML_MAX_INPUT);
    int fd = -1;
    int rc = 0;

    if (!path || !out) {
        rc = kd_seterr(err, KD_EINVAL, "kd_yaml_parse_file: invalid arguments");
        goto out;
    }
    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        kd_seterr(err, rc, "%s: %s", path, strerror(-rc));
        goto out;
    }
    for (;;) {
        char chunk[65536];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            kd_seterr(err, rc, "%s: %s", path, strerror(-rc));
            goto out;
        }
        if (n == 0)
            break;
        rc = kd_buf_append(&buf, chunk, (size_t)n);
        if (rc == KD_ETOOBIG) {
            kd_seterr(err, rc, "%s: file is larger than the %u-byte limit for YAML input", path,
                      (unsigned)KD_YAML_MAX_INPUT);
            goto out;
        }
        if (rc)
            goto out;
    }
    rc = kd_yaml_parse(path, kd_buf_str(&buf), buf.len, out, err);
out:
    if (fd >= 0)
        close(fd);
    kd_buf_free(&buf);
    return rc;
}

int kd_yaml_parse_stream(const char *name, const char *text, size_t len, json_t **docs, char *err)
{
    struct builder b;
    json_t *arr = NULL;
    int rc = 0;

    if (!docs || (!text && len)) {
        rc = kd_seterr(err, KD_EINVAL, "kd_yaml_parse_stream: invalid arguments");
        goto out;
    }
    *docs = NULL;
    if (!name)
        name = "<input>";
    if (len > KD_YAML_MAX_INPUT) {
        rc = kd_seterr(err, KD_ETOOBIG, "%s: %zu bytes is over the %u-byte limit for YAML input",
                       name, len, (unsigned)KD_YAML_MAX_INPUT);
        goto out;
    }
    arr = json_array();
    if (!arr)
        kd_oom(64);
    memset(&b, 0, sizeof(b));
    b.name = name;
    b.err = err;
    rc = run_parser(&b, text ? text : "", len, NULL, arr);
    if (rc)
        goto out;
    *docs = arr;
    arr = NULL;
out:
    json_decref(arr);
    return rc;
}

json_t *kd_yaml_root(const struct kd_yaml_doc *doc)
{
    return doc ? doc->root : NULL;
}

const char *kd_yaml_name(const struct kd_yaml_doc *doc)
{
    return doc ? doc->name : NULL;
}

void kd_yaml_free(struct kd_yaml_doc *doc)
{
    if (!doc)
        return;
    ynode_clear(&doc->top);
    json_decref(doc->top.val);
    free(doc->name);
    free(doc);
}

/* ---- positions -------------------------------------------------------------- */

/* Walk `path` from the top; the node or NULL. */
static const struct ynode *lookup(const struct kd_yaml_doc *doc, const char *path)
{
    const struct ynode *n = &doc->top;
    const char *p = path;
    char key[1024];

    while (n && *p) {
        size_t kl = 0;
        if (*p == '[' && p[1] == '"') {
            const char *e = strstr(p + 2, "\"]");
            if (!e || (size_t)(e - (p + 2)) >= sizeof(key))
                return NULL;
            kl = (size_t)(e - (p + 2));
            memcpy(key, p + 2, kl);
            key[kl] = '\0';
            p = e + 2;
        } else if (*p == '[') {
            char *end = NULL;
            errno = 0;
            unsigned long long idx = strtoull(p + 1, &end, 10);
            if (errno || end == p + 1 || *end != ']' || !json_is_array(n->val) || idx >= n->nkids)
                return NULL;
            n = &n->kids[idx];
            p = end + 1;
            if (*p == '.')
                p++;
            continue;
        } else {
            while (p[kl] && p[kl] != '.' && p[kl] != '[')
                kl++;
            if (kl >= sizeof(key))
                return NULL;
            memcpy(key, p, kl);
            key[kl] = '\0';
            p += kl;
        }
        if (*p == '.')
            p++;
        if (!json_is_object(n->val))
            return NULL;
        const struct ynode *found = NULL;
        for (size_t i = 0; i < n->nkids; i++) {
            if (n->kids[i].key && !strcmp(n->kids[i].key, key)) {
                found = &n->kids[i];
                break;
            }
        }
        n = found;
    }
    return n;
}

int kd_yaml_where(const struct kd_yaml_doc *doc, const char *path, int *line, int *col)
{
    const struct ynode *n = doc && path ? lookup(doc, path) : NULL;
    if (!n || !n->line)
        return KD_ENOTFOUND;
    if (line)
        *line = n->line;
    if (col)
        *col = n->col;
    return 0;
}

int kd_yaml_where_key(const struct kd_yaml_doc *doc, const char *path, int *line, int *col)
{
    const struct ynode *n = doc && path ? lookup(doc, path) : NULL;
    if (!n || !n->kline)
        return KD_ENOTFOUND;
    if (line)
        *line = n->kline;
    if (col)
        *col = n->kcol;
    return 0;
}

static const struct ynode *find_node(const struct ynode *n, const json_t *v)
{
    if (n->val == v)
        return n;
    for (size_t i = 0; i < n->nkids; i++) {
        const struct ynode *f = find_node(&n->kids[i], v);
        if (f)
            return f;
    }
    return NULL;
}

static bool is_singleton(const json_t *v)
{
    return json_is_true(v) || json_is_false(v) || json_is_null(v);
}

int kd_yaml_where_node(const struct kd_yaml_doc *doc, const json_t *node, int *line, int *col)
{
    const struct ynode *n = doc && node && !is_singleton(node) ? find_node(&doc->top, node) : NULL;
    if (!n || !n->line)
        return KD_ENOTFOUND;
    if (line)
        *line = n->line;
    if (col)
        *col = n->col;
    return 0;
}

int kd_yaml_where_node_key(const struct kd_yaml_doc *doc, const json_t *node, int *line, int *col)
{
    const struct ynode *n = doc && node && !is_singleton(node) ? find_node(&doc->top, node) : NULL;
    if (!n || !n->kline)
        return KD_ENOTFOUND;
    if (line)
        *line = n->kline;
    if (col)
        *col = n->kcol;
    return 0;
}

/* ---- emitting ----------------------------------------------------------------- */

struct emit_ctx {
    struct kd_buf *out;
    int rc;
};

static int write_handler(void *data, unsigned char *buffer, size_t size)
{
    struct emit_ctx *e = data;
    int rc = kd_buf_append(e->out, buffer, size);
    if (rc) {
        e->rc = rc;
        return 0;
    }
    return 1;
}

/* Would a plain scalar with this text read back as something other than this string? */
static bool needs_quotes(const char *s, size_t n)
{
    if (n == 0 || classify(s, n) != S_STR)
        return true;
    /* YAML 1.1 readers (PyYAML, Go yaml.v2) type these too: keep them strings everywhere. */
    static const char *const yaml11[] = {"y",   "Y",   "yes", "Yes", "YES", "n",  "N",
                                         "no",  "No",  "NO",  "on",  "On",  "ON", "off",
                                         "Off", "OFF", "<<",  "=",   NULL};
    for (size_t i = 0; yaml11[i]; i++)
        if (strlen(yaml11[i]) == n && !memcmp(yaml11[i], s, n))
            return true;
    /* Anything number-like in some schema (1_000, 0b11, 1:30, .5e3, 0777). */
    if ((s[0] >= '0' && s[0] <= '9') || ((s[0] == '-' || s[0] == '+' || s[0] == '.') && n > 1 &&
                                         ((s[1] >= '0' && s[1] <= '9') || s[1] == '.')))
        return true;
    if (s[0] == '.' && n > 1)
        return true;
    return false;
}

static int emit_scalar(yaml_emitter_t *em, struct emit_ctx *e, const char *s, size_t n,
                       bool typed_plain)
{
    yaml_event_t ev;
    yaml_scalar_style_t style = YAML_PLAIN_SCALAR_STYLE;
    if (!typed_plain) {
        if (memchr(s, '\n', n))
            style = YAML_LITERAL_SCALAR_STYLE;
        else if (needs_quotes(s, n))
            style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    }
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)n, 1, 1, style))
        return KD_ENOMEM;
    if (!yaml_emitter_emit(em, &ev))
        return e->rc ? e->rc : KD_EINTERNAL;
    return 0;
}

static void real_text(double d, char *buf, size_t len)
{
    int start = 1;
    /* Enough digits for the integer part, so that 10.0 prints as 10.0, not 1e+01. */
    if (fabs(d) >= 1 && fabs(d) < 1e16)
        start = (int)floor(log10(fabs(d))) + 1;
    for (int prec = start; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    if (!strpbrk(buf, ".eEn"))
        kd_strlcpy(buf + strlen(buf), ".0", len - strlen(buf));
}

static int emit_value(yaml_emitter_t *em, struct emit_ctx *e, const json_t *v, int depth)
{
    yaml_event_t ev;
    char num[64];
    int rc = 0;

    if (depth > 1000)
        return KD_ETOOBIG;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *c;
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE))
            return KD_ENOMEM;
        if (!yaml_emitter_emit(em, &ev))
            return e->rc ? e->rc : KD_EINTERNAL;
        json_object_foreach((json_t *)v, k, c)
        {
            rc = emit_scalar(em, e, k, strlen(k), false);
            if (!rc)
                rc = emit_value(em, e, c, depth + 1);
            if (rc)
                return rc;
        }
        if (!yaml_mapping_end_event_initialize(&ev))
            return KD_ENOMEM;
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *c;
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE))
            return KD_ENOMEM;
        if (!yaml_emitter_emit(em, &ev))
            return e->rc ? e->rc : KD_EINTERNAL;
        json_array_foreach(v, i, c)
        {
            rc = emit_value(em, e, c, depth + 1);
            if (rc)
                return rc;
        }
        if (!yaml_sequence_end_event_initialize(&ev))
            return KD_ENOMEM;
        break;
    }
    case JSON_STRING: return emit_scalar(em, e, json_string_value(v), json_string_length(v), false);
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return emit_scalar(em, e, num, strlen(num), true);
    case JSON_REAL:
        real_text(json_real_value(v), num, sizeof(num));
        return emit_scalar(em, e, num, strlen(num), true);
    case JSON_TRUE: return emit_scalar(em, e, "true", 4, true);
    case JSON_FALSE: return emit_scalar(em, e, "false", 5, true);
    case JSON_NULL: return emit_scalar(em, e, "null", 4, true);
    }
    if (!yaml_emitter_emit(em, &ev))
        return e->rc ? e->rc : KD_EINTERNAL;
    return 0;
}

int kd_yaml_emit(const json_t *value, struct kd_buf *out)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    struct emit_ctx e = {out, 0};
    size_t start_len;
    int rc = 0;

    if (!value || !out)
        return KD_EINVAL;
    start_len = out->len;
    if (!yaml_emitter_initialize(&em))
        return KD_ENOMEM;
    yaml_emitter_set_output(&em, write_handler, &e);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_indent(&em, 2);
    yaml_emitter_set_width(&em, -1);
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) ||
        !yaml_emitter_emit(&em, &ev)) {
        rc = e.rc ? e.rc : KD_ENOMEM;
        goto out;
    }
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) ||
        !yaml_emitter_emit(&em, &ev)) {
        rc = e.rc ? e.rc : KD_ENOMEM;
        goto out;
    }
    rc = emit_value(&em, &e, value, 0);
    if (rc)
        goto out;
    if (!yaml_document_end_event_initialize(&ev, 1) || !yaml_emitter_emit(&em, &ev) ||
        !yaml_stream_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev) ||
        !yaml_emitter_flush(&em)) {
        rc = e.rc ? e.rc : KD_EINTERNAL;
        goto out;
    }
out:
    yaml_emitter_delete(&em);
    if (rc && out->len > start_len) {
        out->len = start_len;
        out->data[start_len] = '\0';
    }
    return rc;
}
