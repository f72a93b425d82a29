/*
 * kdet-search: run one of kdet's searchers outside a cluster, ask/tell
 * style. It prints operations as JSON lines on stdout and reads events as
 * JSON lines on stdin (formats in docs/searchers.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "searcher/searcher.h"
#include "config/config.h"

#define MAX_LINE (4 << 20)   /* one event or snapshot line */
#define MAX_FILE (256 << 20) /* a JSON config or snapshot file */

static void usage(FILE *f)
{
    fprintf(f, "usage: kdet-search CONFIG.(yaml|json) [--seed N]\n"
               "       kdet-search --restore SNAPSHOT.json\n"
               "Prints searcher operations as JSON lines on stdout; reads events as JSON lines\n"
               "on stdin: {\"event\":\"trial_created\",\"request_id\":ID},\n"
               "{\"event\":\"validation_completed\",\"request_id\":ID,\"metric\":X,\"length\":N},\n"
               "{\"event\":\"trial_exited_early\",\"request_id\":ID,\"reason\":\"errored\"},\n"
               "{\"event\":\"trial_closed\",\"request_id\":ID}, {\"event\":\"progress\"},\n"
               "{\"event\":\"snapshot\"}. Each line is answered by its operations, then one\n"
               "{\"ack\":LINE,\"progress\":P,\"done\":B} (or {\"line\":LINE,\"error\":MSG}).\n"
               "Exit status: 0, 1 when some input line was rejected, 2 on a bad config or usage.\n"
               "See docs/searchers.md.\n");
}

static int load_json_file(const char *path, json_t **out, char *err)
{
    struct stat st;
    json_error_t je;
    if (stat(path, &st) != 0)
        return kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
    if (st.st_size > MAX_FILE)
        return kd_seterr(err, KD_ETOOBIG, "%s: larger than %d MiB", path, MAX_FILE >> 20);
    *out = json_load_file(path, 0, &je);
    if (!*out)
        return kd_seterr(err, KD_EPARSE, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    return 0;
}

static int load_config(const char *path, json_t **out, char *err)
{
    if (kd_str_has_suffix(path, ".json"))
        return load_json_file(path, out, err);
    return kd_config_load(path, NULL, out, err);
}

/* Every input line (and the start) is answered by its operations, then one ack line. */
static void print_ack(struct kd_searcher *s, long lineno)
{
    printf("{\"ack\":%ld,\"progress\":%.6f,\"done\":%s}\n", lineno, kd_searcher_progress(s),
           kd_searcher_done(s) ? "true" : "false");
    fflush(stdout);
}

static void print_ops(struct kd_searcher *s, struct kd_search_ops *ops)
{
    for (size_t i = 0; i < ops->n; i++) {
        json_t *j = kd_search_op_to_json(&ops->v[i], kd_searcher_unit(s));
        char *line = json_dumps(j, JSON_COMPACT);
        if (line)
            printf("%s\n", line);
        free(line);
        json_decref(j);
    }
    kd_search_ops_free(ops);
}

static void print_error(long lineno, const char *msg)
{
    json_t *j = json_pack("{sIss}", "line", (json_int_t)lineno, "error", msg);
    char *line = json_dumps(j, JSON_COMPACT);
    fprintf(stderr, "kdet-search: line %ld: %s\n", lineno, msg);
    printf("%s\n", line ? line : "{\"error\":\"?\"}");
    fflush(stdout);
    free(line);
    json_decref(j);
}

int main(int argc, char **argv)
{
    const char *cfg_path = NULL, *restore_path = NULL;
    uint64_t seed = 0;
    bool have_seed = false;
    json_t *cfg = NULL, *snap = NULL;
    struct kd_searcher *s = NULL;
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN] = "";
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, bad = 0;
    int rc = 0, exit_code = 0;

    kd_log_init("kdet-search", -1, -1);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (kd_parse_u64(argv[++i], &seed) != 0) {
                fprintf(stderr,
                        "kdet-search: --seed: expected a non-negative integer, got \"%s\"\n",
                        argv[i]);
                exit_code = 2;
                goto out;
            }
            have_seed = true;
        } else if (strcmp(argv[i], "--restore") == 0 && i + 1 < argc) {
            restore_path = argv[++i];
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            goto out;
        } else if (argv[i][0] == '-' || cfg_path) {
            fprintf(stderr, "kdet-search: unexpected argument \"%s\"\n", argv[i]);
            usage(stderr);
            exit_code = 2;
            goto out;
        } else {
            cfg_path = argv[i];
        }
    }
    if (!cfg_path == !restore_path) {
        usage(stderr);
        exit_code = 2;
        goto out;
    }
    if (restore_path) {
        if ((rc = load_json_file(restore_path, &snap, err)) != 0 ||
            (rc = kd_searcher_restore(snap, &s, err)) != 0) {
            fprintf(stderr, "kdet-search: %s\n", err);
            exit_code = 2;
            goto out;
        }
    } else {
        if ((rc = load_config(cfg_path, &cfg, err)) != 0) {
            fprintf(stderr, "kdet-search: %s\n", err);
            exit_code = 2;
            goto out;
        }
        if (!have_seed) {
            const json_t *es =
                json_object_get(json_object_get(cfg, "reproducibility"), "experiment_seed");
            if (json_is_integer(es) && json_integer_value(es) >= 0)
                seed = (uint64_t)json_integer_value(es);
        }
        if ((rc = kd_searcher_new(cfg, seed, &s, err)) != 0) {
            fprintf(stderr, "kdet-search: %s: %s\n", cfg_path, err);
            exit_code = 2;
            goto out;
        }
        if ((rc = kd_searcher_initial(s, &ops, err)) != 0) {
            fprintf(stderr, "kdet-search: %s\n", err);
            exit_code = 2;
            goto out;
        }
        print_ops(s, &ops);
    }
    print_ack(s, 0);
    for (;;) {
        ssize_t n = getline(&line, &cap, stdin);
        json_error_t je;
        json_t *ev;
        const char *name;
        if (n < 0)
            break;
        lineno++;
        if (n > MAX_LINE) {
            print_error(lineno, "line longer than 4 MiB");
            bad++;
            continue;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        ev = json_loadb(line, (size_t)n, 0, &je);
        if (!ev) {
            snprintf(err, sizeof(err), "not JSON: column %d: %s", je.column, je.text);
            print_error(lineno, err);
            bad++;
            continue;
        }
        name = json_string_value(json_object_get(ev, "event"));
        if (name && strcmp(name, "snapshot") == 0) {
            json_t *sn = kd_searcher_snapshot(s);
            json_t *w = json_pack("{so}", "snapshot", sn);
            char *o = json_dumps(w, JSON_COMPACT);
            printf("%s\n", o ? o : "{}");
            print_ack(s, lineno);
            free(o);
            json_decref(w);
        } else if (name && strcmp(name, "progress") == 0) {
            print_ack(s, lineno);
        } else if ((rc = kd_searcher_event(s, ev, &ops, err)) != 0) {
            print_error(lineno, err);
            kd_search_ops_free(&ops);
            bad++;
        } else {
            print_ops(s, &ops);
            print_ack(s, lineno);
        }
        json_decref(ev);
    }
    if (bad > 0)
        exit_code = 1;
out:
    free(line);
    kd_search_ops_free(&ops);
    kd_searcher_free(s);
    json_decref(cfg);
    json_decref(snap);
    return exit_code;
}
