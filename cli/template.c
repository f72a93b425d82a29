/*
 * `det template set|list|describe|rm`: experiment config templates stored
 * in the cluster as ConfigMaps labelled kdet.io/template=NAME, the YAML
 * under the key template.yaml, so that kdet-controller (for spec.template)
 * and `det experiment create --template NAME` read the same thing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "yaml/yaml.h"

/* A ConfigMap holds 1 MiB in all; leave room for the metadata. */
#define TEMPLATE_MAX (1000u * 1024)
#define CM_PREFIX "kdet-template-"

static const struct kd_k8s_gvr cm_gvr = KD_K8S_CONFIGMAPS;

#define KUBE_FLAGS "--kubeconfig", "--context", "--namespace"

static const char template_usage[] =
    "usage: det template VERB ...\n"
    "\n"
    "verbs:\n"
    "  set NAME FILE   store (or replace) template NAME from a YAML file\n"
    "  list            the templates of the namespace\n"
    "  describe NAME   print the template's YAML\n"
    "  rm NAME         delete the template\n"
    "\n"
    "Templates are ConfigMaps named kdet-template-NAME, labelled kdet.io/template=NAME,\n"
    "with the YAML under the key template.yaml, in the namespace given by -n (default:\n"
    "the kubeconfig context's). Use one with 'det experiment create --template NAME' or\n"
    "spec.template in an Experiment. Every verb takes -n, --kubeconfig and --context.\n";

static bool is_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 - strlen(CM_PREFIX) || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static int check_name(const char *s)
{
    if (is_name(s))
        return 0;
    det_err("template name \"%s\": must be lowercase letters, digits and '-', at most %zu "
            "characters, starting and ending with a letter or digit",
            s, 63 - strlen(CM_PREFIX));
    return DET_EXIT_USAGE;
}

/* The ConfigMap of template NAME (by label), new reference; exit code. */
static int find(struct det_kube *k, const char *name, json_t **cm)
{
    json_t *list = NULL;
    struct kd_k8s_status st = {0};
    char sel[128], err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK, r;
    *cm = NULL;
    snprintf(sel, sizeof(sel), DET_TEMPLATE_LABEL "=%s", name);
    struct kd_k8s_query q = {.label_selector = sel};
    r = kd_k8s_list_all(k->c, &cm_gvr, k->ns, &q, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &cm_gvr, "template", NULL);
        goto out;
    }
    json_t *items = json_object_get(list, "items");
    if (json_array_size(items) == 0) {
        det_err("template \"%s\" not found in namespace \"%s\" (see 'det template list')", name,
                k->ns);
        rc = DET_EXIT_NOTFOUND;
        goto out;
    }
    if (json_array_size(items) > 1)
        det_err("warning: %zu ConfigMaps carry " DET_TEMPLATE_LABEL "=%s; using %s",
                json_array_size(items), name, kd_k8s_meta_str(json_array_get(items, 0), "name"));
    *cm = json_incref(json_array_get(items, 0));
out:
    json_decref(list);
    kd_k8s_status_free(&st);
    return rc;
}

int det_template_fetch(struct det_kube *k, const char *name, char **yaml)
{
    json_t *cm = NULL;
    int rc = find(k, name, &cm);
    *yaml = NULL;
    if (rc != 0)
        goto out;
    const char *s =
        json_string_value(json_object_get(json_object_get(cm, "data"), DET_TEMPLATE_KEY));
    if (s == NULL) {
        det_err("template \"%s\": ConfigMap %s has no data key " DET_TEMPLATE_KEY, name,
                kd_k8s_meta_str(cm, "name"));
        rc = DET_EXIT_INVALID;
        goto out;
    }
    *yaml = kd_xstrdup(s);
out:
    json_decref(cm);
    return rc;
}

/* Read FILE (capped) and check it is a YAML mapping. *text malloc'd. */
static int read_template(const char *path, char **text)
{
    struct kd_yaml_doc *doc = NULL;
    struct kd_buf b = KD_BUF_INIT(TEMPLATE_MAX);
    char err[KD_ERRLEN] = "", chunk[8192];
    FILE *f = fopen(path, "r");
    int rc = DET_EXIT_OK;
    size_t n;
    *text = NULL;
    if (f == NULL) {
        det_err("%s: %s", path, strerror(errno));
        rc = DET_EXIT_INVALID;
        goto out;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (kd_buf_append(&b, chunk, n) != 0) {
            det_err("%s: a template is at most %u bytes (it is stored in a ConfigMap)", path,
                    TEMPLATE_MAX);
            rc = DET_EXIT_INVALID;
            goto out;
        }
    }
    if (ferror(f)) {
        det_err("%s: read error", path);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (kd_yaml_parse(path, kd_buf_str(&b), b.len, &doc, err) != 0) {
        det_err("%s", err);
        rc = DET_EXIT_INVALID;
        goto out;
    }
    if (!json_is_object(kd_yaml_root(doc))) {
        det_err("%s: a template must be a YAML mapping of experiment config fields", path);
        rc = DET_EXIT_INVALID;
        goto out;
    }
    *text = kd_buf_steal(&b);
out:
    if (f != NULL)
        fclose(f);
    kd_yaml_free(doc);
    kd_buf_free(&b);
    return rc;
}

static int cmd_set(int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"NAME", "FILE", NULL};
    static const struct det_verb_spec spec = {.cmd = "det template set",
                                              .usage = template_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 2};
    struct det_verb v = {0};
    struct det_kube *k = &v.k;
    const struct det_args *a = &v.a;
    struct kd_k8s_status st = {0};
    json_t *cm = NULL, *obj = NULL;
    char *text = NULL, *cmname = NULL, err[KD_ERRLEN] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    /* the name and the file are checked before the cluster is asked */
    rc = check_name(a->pos[0]);
    if (rc != 0)
        goto out;
    rc = read_template(a->pos[1], &text);
    if (rc != 0)
        goto out;
    rc = det_kube_open(a, k);
    if (rc != 0)
        goto out;
    cmname = kd_xasprintf(CM_PREFIX "%s", a->pos[0]);
    obj = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:{s:s}}", "apiVersion", "v1", "kind",
                    "ConfigMap", "metadata", "name", cmname, "namespace", k->ns, "labels",
                    DET_TEMPLATE_LABEL, a->pos[0], "app.kubernetes.io/managed-by", "det", "data",
                    DET_TEMPLATE_KEY, text);
    if (obj == NULL)
        kd_oom(strlen(text));
    r = kd_k8s_create(k->c, &cm_gvr, k->ns, obj, NULL, &st, err);
    if (r == KD_EEXIST) {
        /* replace it: an unconditional update of the whole ConfigMap */
        r = kd_k8s_update(k->c, &cm_gvr, k->ns, NULL, obj, NULL, &st, err);
        if (r == 0)
            printf("template %s updated (ConfigMap %s in namespace %s)\n", a->pos[0], cmname,
                   k->ns);
    } else if (r == 0) {
        printf("template %s created (ConfigMap %s in namespace %s)\n", a->pos[0], cmname, k->ns);
    }
    if (r != 0)
        rc = det_kube_fail(k, r, &st, err, "create", &cm_gvr, "template", a->pos[0]);
out:
    free(text);
    free(cmname);
    json_decref(cm);
    json_decref(obj);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

static int cmd_list(int argc, char **argv)
{
    static const char *const flags[] = {"--output", KUBE_FLAGS, NULL};
    static const char *const pos[] = {NULL};
    static const struct det_verb_spec spec = {.cmd = "det template list",
                                              .usage = template_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .format = true,
                                              .kube = true};
    struct det_verb v = {0};
    struct det_kube *k = &v.k;
    struct kd_k8s_status st = {0};
    struct det_table *t = NULL;
    json_t *list = NULL;
    char err[KD_ERRLEN] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    struct kd_k8s_query q = {.label_selector = DET_TEMPLATE_LABEL};
    r = kd_k8s_list_all(k->c, &cm_gvr, k->ns, &q, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &cm_gvr, "template", NULL);
        goto out;
    }
    json_t *items = json_object_get(list, "items");
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(list, v.fmt);
        goto out;
    }
    if (json_array_size(items) == 0) {
        fprintf(stderr,
                "det: no templates in namespace \"%s\" (add one with 'det template set "
                "NAME FILE')\n",
                k->ns);
        goto out;
    }
    t = det_table_new((const char *const[]){"NAME", "FIELDS", "CREATED", NULL});
    size_t i;
    json_t *cm;
    json_array_foreach(items, i, cm)
    {
        const char *name = json_string_value(json_object_get(
            json_object_get(json_object_get(cm, "metadata"), "labels"), DET_TEMPLATE_LABEL));
        const char *y =
            json_string_value(json_object_get(json_object_get(cm, "data"), DET_TEMPLATE_KEY));
        struct kd_yaml_doc *doc = NULL;
        struct kd_buf keys = KD_BUF_INIT(256);
        char created[32];
        if (y != NULL && kd_yaml_parse("template", y, strlen(y), &doc, NULL) == 0) {
            const char *key;
            json_t *val;
            json_object_foreach(kd_yaml_root(doc), key, val)
            {
                if (kd_buf_printf(&keys, "%s%s", keys.len ? "," : "", key) != 0)
                    break;
            }
        }
        det_fmt_time(kd_k8s_meta_str(cm, "creationTimestamp"), created, sizeof(created));
        const char *row[] = {name ? name : kd_k8s_meta_str(cm, "name"),
                             y ? kd_buf_str(&keys) : "(no " DET_TEMPLATE_KEY ")", created};
        det_table_row(t, row);
        kd_yaml_free(doc);
        kd_buf_free(&keys);
    }
    det_table_print(t);
out:
    det_table_free(t);
    json_decref(list);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

static int cmd_describe_rm(bool rm, int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"NAME", NULL};
    const struct det_verb_spec spec = {.cmd = rm ? "det template rm" : "det template describe",
                                       .usage = template_usage,
                                       .flags = flags,
                                       .pos = pos,
                                       .minpos = 1};
    struct det_verb v = {0};
    struct det_kube *k = &v.k;
    const struct det_args *a = &v.a;
    struct kd_k8s_status st = {0};
    json_t *cm = NULL;
    char err[KD_ERRLEN] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = check_name(a->pos[0]);
    if (rc != 0)
        goto out;
    rc = det_kube_open(a, k);
    if (rc != 0)
        goto out;
    rc = find(k, a->pos[0], &cm);
    if (rc != 0)
        goto out;
    if (!rm) {
        const char *y =
            json_string_value(json_object_get(json_object_get(cm, "data"), DET_TEMPLATE_KEY));
        fputs(y ? y : "", stdout);
        if (y && y[0] && y[strlen(y) - 1] != '\n')
            fputc('\n', stdout);
        fflush(stdout);
        goto out;
    }
    r = kd_k8s_delete(k->c, &cm_gvr, k->ns, kd_k8s_meta_str(cm, "name"), NULL, NULL, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "delete", &cm_gvr, "template", a->pos[0]);
        goto out;
    }
    printf("template %s deleted\n", a->pos[0]);
out:
    json_decref(cm);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

static int cmd_describe(int argc, char **argv)
{
    return cmd_describe_rm(false, argc, argv);
}

static int cmd_rm(int argc, char **argv)
{
    return cmd_describe_rm(true, argc, argv);
}

int det_cmd_template(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"set", NULL, cmd_set},   {"list", "ls", cmd_list}, {"describe", NULL, cmd_describe},
        {"rm", "delete", cmd_rm}, {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, template_usage, "det template");
}
