/*
 * libFuzzer target for kdet-local's validation of the built-in kinds
 * (local/validate.c) and of object names (reply.c): the input is a JSON
 * object, validated as the kind its "kind" names (or, when that is no
 * built-in kind, as one picked by the input's size). Checked:
 *  - a refusal is a non-empty array of causes, each with a reason, a
 *    field and a message; an object passes with no causes at all;
 *  - the verdict is the same for the object serialised and read again;
 *  - what the rules say, checked apart: annotations past 256 KiB, a
 *    ConfigMap's or Secret's data past 1 MiB, a config key outside
 *    [-._a-zA-Z0-9] (or ".", ".."), a container or volume name that is no
 *    DNS-1123 label (so never "../x") are refused; and the byte budgets
 *    hold at their edge: the object grown to exactly the limit passes that
 *    rule, one byte more is refused by it;
 *  - metadata.name is accepted by each name rule exactly when it has that
 *    rule's form.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../local/apiint.h"
#include "../../local/validate.h"
#include "core/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_local_validate: " __VA_ARGS__);                                      \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

static struct kd_registry *reg;

/* The causes of validating obj as rt: NULL when it passes; checks their form. */
static json_t *validate(const struct kd_restype *rt, const json_t *obj)
{
    json_t *causes = NULL;
    int rc = kd_local_validate(rt, obj, &causes);
    if (rc == 0 && causes != NULL)
        FAIL("%s passed with causes", rt->kind);
    if (rc != 0 && (rc != KD_EINVALID || !json_is_array(causes) || json_array_size(causes) == 0))
        FAIL("%s refused (%d) without causes", rt->kind, rc);
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        static const char *const keys[] = {"reason", "field", "message"};
        for (int k = 0; k < 3; k++) {
            const char *v = json_string_value(json_object_get(c, keys[k]));
            if (v == NULL || v[0] == '\0')
                FAIL("%s: cause %zu has no %s", rt->kind, i, keys[k]);
        }
    }
    return causes;
}

/* Whether causes hold one with this field (and reason, when not NULL). */
static bool has_cause(const json_t *causes, const char *field, const char *reason)
{
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "field")) ?: "", field) == 0 &&
            (reason == NULL ||
             strcmp(json_string_value(json_object_get(c, "reason")) ?: "", reason) == 0))
            return true;
    }
    return false;
}

static bool label_form(const char *s, size_t max, bool letter_first)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
        return false;
    if (letter_first && !(s[0] >= 'a' && s[0] <= 'z'))
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static bool subdomain_form(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    char *copy = strdup(s), *save = NULL;
    bool ok = copy != NULL && s[0] != '.' && s[n - 1] != '.' && strstr(s, "..") == NULL;
    for (char *p = ok ? strtok_r(copy, ".", &save) : NULL; p != NULL && ok;
         p = strtok_r(NULL, ".", &save))
        ok = label_form(p, 253, false);
    free(copy);
    return ok;
}

static bool config_key_form(const char *k)
{
    size_t n = strlen(k);
    return n > 0 && n <= 253 && strncmp(k, "..", 2) != 0 && strcmp(k, ".") != 0 &&
           strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* Bytes of a map of strings as the limits count them: keys, and values that are strings. */
static size_t map_bytes(const json_t *m)
{
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) total +=
        strlen(k) + (json_is_string(v) ? json_string_length(v) : 0);
    return total;
}

/* The rules checked apart from validate.c, on obj as validated (causes). */
static void check_rules(const struct kd_restype *rt, const json_t *obj, const json_t *causes)
{
    const json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
    if (json_is_object(ann) && map_bytes(ann) > KD_LOCAL_MAX_ANNOTATION_BYTES && causes == NULL)
        FAIL("%s passed with %zu bytes of annotations", rt->kind, map_bytes(ann));
    bool cm = strcmp(rt->kind, "ConfigMap") == 0, secret = strcmp(rt->kind, "Secret") == 0;
    if (cm || secret) {
        static const char *const cm_maps[] = {"data", "binaryData", NULL};
        static const char *const s_maps[] = {"data", "stringData", NULL};
        size_t total = 0;
        for (const char *const *m = cm ? cm_maps : s_maps; *m != NULL; m++) {
            const json_t *map = json_object_get(obj, *m);
            const char *k;
            json_t *v;
            if (json_is_object(map))
                total += map_bytes(map);
            json_object_foreach((json_t *)map, k, v)
            {
                if (!config_key_form(k) && causes == NULL)
                    FAIL("%s passed with the key \"%s\"", rt->kind, k);
            }
        }
        if (total > KD_LOCAL_MAX_DATA_BYTES && causes == NULL)
            FAIL("%s passed with %zu bytes of data", rt->kind, total);
    }
    if (strcmp(rt->kind, "Pod") == 0) {
        static const char *const lists[] = {"containers", "initContainers", "volumes"};
        const json_t *spec = json_object_get(obj, "spec");
        for (int l = 0; l < 3; l++) {
            size_t i;
            json_t *c;
            json_array_foreach(json_object_get(spec, lists[l]), i, c)
            {
                const char *name = json_string_value(json_object_get(c, "name"));
                if (name != NULL && !label_form(name, 63, false) && causes == NULL)
                    FAIL("a pod passed with %s[%zu].name \"%s\"", lists[l], i, name);
            }
        }
    }
}

/*
 * Grow obj's map (at the path "metadata.annotations", "data"...) with one key so that the map
 * counts exactly limit + over bytes, validate, and say whether the rule's cause is there.
 */
static void check_edge(const struct kd_restype *rt, const json_t *obj, const char *parent,
                       const char *map, size_t limit, int over, const char *field)
{
    static const char key[] = "kd-fuzz-pad";
    json_t *copy = json_deep_copy(obj);
    json_t *p = parent != NULL ? json_object_get(copy, parent) : copy;
    json_t *m = json_object_get(p, map);
    if (!json_is_object(p) || (m != NULL && !json_is_object(m))) {
        json_decref(copy);
        return;
    }
    if (m == NULL) {
        m = json_object();
        json_object_set_new(p, map, m);
    }
    json_object_del(m, key);
    size_t have = map_bytes(m) + strlen(key);
    if (have > limit) {
        json_decref(copy);
        return;
    }
    size_t pad = limit - have + (size_t)over;
    char *v = malloc(pad + 1);
    if (v == NULL)
        abort();
    memset(v, 'x', pad);
    v[pad] = '\0';
    json_object_set_new(m, key, json_string(v));
    free(v);
    json_t *causes = validate(rt, copy);
    bool refused = has_cause(causes, field, "FieldValueTooLong");
    if (over > 0 && causes == NULL)
        FAIL("%s passed %s at %zu bytes (limit %zu)", rt->kind, field, limit + 1, limit);
    if (over == 0 && refused)
        FAIL("%s refused %s at exactly %zu bytes", rt->kind, field, limit);
    json_decref(causes);
    json_decref(copy);
}

static void check_names(const json_t *obj)
{
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    if (name == NULL)
        return;
    static const struct {
        enum kd_name_rule rule;
        const char *what;
    } rules[] = {
        {KD_NAME_SUBDOMAIN, "subdomain"}, {KD_NAME_LABEL, "label"}, {KD_NAME_DNS1035, "DNS-1035"}};
    for (size_t i = 0; i < 3; i++) {
        json_t *cause = kd_api__check_name(rules[i].rule, name);
        bool want = rules[i].rule == KD_NAME_SUBDOMAIN ? subdomain_form(name)
                    : rules[i].rule == KD_NAME_LABEL   ? label_form(name, 63, false)
                                                       : label_form(name, 63, true);
        if ((cause == NULL) != want)
            FAIL("the name \"%s\" is %s as a %s", name, cause == NULL ? "accepted" : "refused",
                 rules[i].what);
        if (cause != NULL &&
            strcmp(json_string_value(json_object_get(cause, "field")) ?: "", "metadata.name") != 0)
            FAIL("a name's cause does not name metadata.name");
        json_decref(cause);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (reg == NULL) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        reg = kd_registry_new(NULL);
    }
    json_t *obj = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return 0;
    }
    /* The kind the object names, or one picked by the input's size. */
    const char *kind = json_string_value(json_object_get(obj, "kind"));
    struct kd_restype *rt = NULL, *pick = NULL;
    size_t n = 0;
    for (struct kd_restype *t = kd_registry_first(reg); t != NULL; t = t->next) {
        if (!t->builtin || strcmp(t->kind, "CustomResourceDefinition") == 0)
            continue;
        if (kind != NULL && strcmp(t->kind, kind) == 0)
            rt = t;
        if (n++ == size % 10)
            pick = t;
    }
    if (rt == NULL)
        rt = pick != NULL ? pick : kd_registry_first(reg);
    json_t *causes = validate(rt, obj);
    /* The same verdict for the object written out and read again. */
    char *text = json_dumps(obj, JSON_COMPACT);
    json_t *again = text != NULL ? json_loads(text, 0, NULL) : NULL;
    if (again == NULL || !json_equal(again, obj))
        FAIL("an object does not read back");
    json_t *causes2 = validate(rt, again);
    if (!json_equal(causes, causes2) && !(causes == NULL && causes2 == NULL))
        FAIL("%s: another verdict once written out and read again", rt->kind);
    check_rules(rt, obj, causes);
    int over = size % 2;
    check_edge(rt, obj, "metadata", "annotations", KD_LOCAL_MAX_ANNOTATION_BYTES, over,
               "metadata.annotations");
    if (strcmp(rt->kind, "ConfigMap") == 0 && json_object_get(obj, "binaryData") == NULL)
        check_edge(rt, obj, NULL, "data", KD_LOCAL_MAX_DATA_BYTES, over, "[]");
    if (strcmp(rt->kind, "Secret") == 0 && json_object_get(obj, "stringData") == NULL)
        check_edge(rt, obj, NULL, "data", KD_LOCAL_MAX_DATA_BYTES, over, "data");
    check_names(obj);
    free(text);
    json_decref(causes);
    json_decref(causes2);
    json_decref(again);
    json_decref(obj);
    return 0;
}
