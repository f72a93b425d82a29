/*
 * The preamble every det verb shares: parse the command line, the output
 * format, open the Kubernetes client and resolve the ID the verb acts on,
 * each error printed once, in one place.
 */
#include <stdlib.h>

#include "cli.h"

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
}
