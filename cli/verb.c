/*
 * What every det verb shares: finding the verb of a noun (help, "did you
 * mean"), and the preamble of each verb: parse the command line and the
 * output format, open the Kubernetes client and resolve the ID the verb
 * acts on, each error printed once, in one place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/str.h"
#include "k8s/config.h"

int det_verb_begin(struct det_verb *v, int argc, char **argv, const struct det_verb_spec *s)
{
    int rc = -1, r;
    r = det_parse_args(argc, argv, s->flags, s->pos, s->minpos, s->usage, s->cmd, &v->a);
    if (r != 0) {
        rc = det_args_exit(r);
        goto out;
    }
    if (s->format && det_format_parse(v->a.output, &v->fmt) != 0) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (s->api) {
        r = det_api_open(&v->a, s->cmd, &v->api);
        if (r != 0) {
            rc = r;
            goto out;
        }
    }
    if (!s->kube)
        goto out;
    r = det_kube_open(&v->a, &v->k);
    if (r != 0) {
        rc = r;
        goto out;
    }
    if (s->gvr != NULL) {
        r = det_resolve(&v->k, s->gvr, s->what, v->a.pos[0], &v->name, s->obj ? &v->obj : NULL);
        if (r != 0)
            rc = r;
    }
out:
    return rc;
}

void det_verb_end(struct det_verb *v)
{
    free(v->name);
    v->name = NULL;
    json_decref(v->obj);
    v->obj = NULL;
    det_kube_close(&v->k);
    det_api_close(&v->api);
}

int det_dispatch(int argc, char **argv, const struct det_sub *subs, const char *usage,
                 const char *noun)
{
    const char *names[DET_MAX_SUBS + 1];
    size_t n = 0;
    int rc = DET_EXIT_USAGE;
    if (argc < 2) {
        fputs(usage, stderr);
        goto out;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0 || strcmp(verb, "help") == 0) {
        fputs(usage, stdout);
        rc = DET_EXIT_OK;
        goto out;
    }
    for (const struct det_sub *s = subs; s->name != NULL; s++) {
        if (strcmp(verb, s->name) == 0 || (s->alias != NULL && strcmp(verb, s->alias) == 0)) {
            rc = s->run(argc - 1, argv + 1);
            goto out;
        }
        if (n < DET_MAX_SUBS)
            names[n++] = s->name;
    }
    names[n] = NULL;
    char what[64];
    snprintf(what, sizeof(what), "%s verb", strncmp(noun, "det ", 4) == 0 ? noun + 4 : noun);
    det_usage_suggest(what, verb, names, noun);
out:
    return rc;
}

int det_resolve_if_kube(struct det_verb *v, const struct kd_k8s_gvr *gvr, const char *what,
                        const char *id, char **name)
{
    struct kd_k8s_config_opts o = {.kubeconfig = v->a.kubeconfig, .context = v->a.context};
    struct kd_k8s_config cfg = {0};
    int rc = DET_EXIT_OK;
    *name = NULL;
    if (v->k.c == NULL && kd_k8s_config_load(&o, &cfg, NULL) != 0) {
        bool trial = strcmp(gvr->resource, "trials") == 0;
        if (det_is_id(id) && (trial || strcmp(gvr->resource, "experiments") == 0)) {
            /* no cluster at hand: the controller API knows names and integer ids */
            v->k.a = &v->a;
            kd_strlcpy(v->k.ns, v->a.ns ? v->a.ns : "default", sizeof(v->k.ns));
            rc = det_id_resolve(&v->k, trial, id, name);
        } else {
            *name = kd_xstrdup(id); /* the name as given */
        }
        goto out;
    }
    if (v->k.c == NULL)
        rc = det_kube_open(&v->a, &v->k);
    if (rc == 0)
        rc = det_resolve(&v->k, gvr, what, id, name, NULL);
out:
    kd_k8s_config_free(&cfg);
    return rc;
}
