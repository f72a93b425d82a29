/*
 * Table-driven tests of the trial scheduler: every file in
 * tests/data/controller/sched/ describes nodes, trials and the expected
 * decisions (format in that folder's README), and is run through
 * kd_sched_decide.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/str.h"
#include "scheduler.h"

#define MAXN 32
#define MAXT 64

struct tcase {
    struct kd_sched_opts opts;
    struct kd_sched_node nodes[MAXN];
    size_t nn;
    struct kd_sched_trial trials[MAXT];
    char keys[MAXT][64], groups[MAXT][64];
    size_t nt;
};

static int node_idx(struct tcase *c, const char *name)
{
    for (size_t i = 0; i < c->nn; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return (int)i;
    return -1;
}

static struct kd_sched_trial *find(struct tcase *c, const char *key)
{
    for (size_t i = 0; i < c->nt; i++)
        if (strcmp(c->trials[i].key, key) == 0)
            return &c->trials[i];
    return NULL;
}

static int kv_int(const char *tok, const char *key, int *out)
{
    size_t n = strlen(key);
    if (strncmp(tok, key, n) != 0 || tok[n] != '=')
        return 0;
    if (kd_parse_int(tok + n + 1, out) != 0)
        fail_msg("bad integer in %s", tok);
    return 1;
}

static void parse_trial(struct tcase *c, char *save, const char *file, int line)
{
    struct kd_sched_trial *t = &c->trials[c->nt];
    char *key = strtok_r(NULL, " \t", &save), *group = strtok_r(NULL, " \t", &save), *tok;
    if (key == NULL || group == NULL || c->nt >= MAXT)
        fail_msg("%s:%d: trial KEY GROUP ...", file, line);
    kd_strlcpy(c->keys[c->nt], key, 64);
    kd_strlcpy(c->groups[c->nt], group, 64);
    t->key = c->keys[c->nt];
    t->group = c->groups[c->nt];
    t->priority = 42;
    t->weight = 1;
    t->index = (int64_t)c->nt;
    t->position = (double)c->nt;
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        int v;
        double d;
        if (kv_int(tok, "slots", &t->slots) || kv_int(tok, "prio", &t->priority) ||
            kv_int(tok, "max", &t->group_max_slots))
            continue;
        if (kv_int(tok, "pos", &v)) {
            t->position = v;
        } else if (strncmp(tok, "weight=", 7) == 0 && kd_parse_double(tok + 7, &d) == 0) {
            t->weight = d;
        } else if (strncmp(tok, "pool=", 5) == 0) {
            kd_strlcpy(t->pool, tok + 5, sizeof(t->pool));
        } else if (strcmp(tok, "stopping") == 0) {
            t->stopping = true;
        } else if (strcmp(tok, "no_preempt") == 0) {
            t->no_preempt = true;
        } else if (strcmp(tok, "single_node") == 0) {
            t->single_node = true;
        } else if (strncmp(tok, "exclude=", 8) == 0) {
            char *s2 = NULL, *nn;
            for (nn = strtok_r(tok + 8, ",", &s2); nn != NULL; nn = strtok_r(NULL, ",", &s2)) {
                int ni = node_idx(c, nn);
                if (ni < 0 || t->nexclude >= KD_SCHED_MAX_EXCLUDE)
                    fail_msg("%s:%d: exclude=NODE,...: unknown node %s", file, line, nn);
                t->exclude[t->nexclude++] = ni;
            }
        } else if (strncmp(tok, "running=", 8) == 0) {
            char *s2 = NULL, *pl;
            t->state = KD_SCHED_RUNNING;
            for (pl = strtok_r(tok + 8, ",", &s2); pl != NULL; pl = strtok_r(NULL, ",", &s2)) {
                char *colon = strchr(pl, ':');
                if (colon == NULL)
                    fail_msg("%s:%d: running=NODE:GPUS,...", file, line);
                *colon = '\0';
                int ni = node_idx(c, pl), g = 0;
                if (ni < 0 || kd_parse_int(colon + 1, &g) != 0)
                    fail_msg("%s:%d: unknown node %s", file, line, pl);
                t->place[t->nplace++] = (struct kd_sched_place){ni, g};
            }
        } else {
            fail_msg("%s:%d: unknown trial field %s", file, line, tok);
        }
    }
    c->nt++;
}

static void run_file(const char *path, const char *file)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int ln = 0, expects = 0;
    struct tcase *c = calloc(1, sizeof(*c));
    bool decided = false;
    assert_non_null(f);
    c->opts.preemption = true;
    while (fgets(line, sizeof(line), f) != NULL) {
        ln++;
        line[strcspn(line, "\r\n")] = '\0';
        char *save = NULL, *w = strtok_r(line, " \t", &save);
        if (w == NULL || w[0] == '#')
            continue;
        if (strcmp(w, "type") == 0) {
            assert_int_equal(kd_sched_type_parse(strtok_r(NULL, " \t", &save), &c->opts.type), 0);
        } else if (strcmp(w, "preemption") == 0) {
            c->opts.preemption = strcmp(strtok_r(NULL, " \t", &save), "on") == 0;
        } else if (strcmp(w, "delegate") == 0) {
            c->opts.delegate = strcmp(strtok_r(NULL, " \t", &save), "on") == 0;
        } else if (strcmp(w, "slot_type") == 0) {
            assert_int_equal(
                kd_sched_slot_type_parse(strtok_r(NULL, " \t", &save), &c->opts.slot_type), 0);
        } else if (strcmp(w, "cpu_per_slot") == 0) {
            assert_int_equal(
                kd_sched_cpu_milli(strtok_r(NULL, " \t", &save), &c->opts.cpu_per_slot_milli), 0);
        } else if (strcmp(w, "max_slots_per_pod") == 0) {
            assert_int_equal(kd_parse_int(strtok_r(NULL, " \t", &save), &c->opts.max_slots_per_pod),
                             0);
        } else if (strcmp(w, "node") == 0) {
            struct kd_sched_node *n = &c->nodes[c->nn++];
            char *tok;
            kd_strlcpy(n->name, strtok_r(NULL, " \t", &save), sizeof(n->name));
            kd_strlcpy(n->pool, "default", sizeof(n->pool));
            bool first = true;
            while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
                bool gpus = first && kd_parse_int(tok, &n->gpus) == 0;
                first = false;
                if (gpus)
                    ;
                else if (strncmp(tok, "pool=", 5) == 0)
                    kd_strlcpy(n->pool, tok + 5, sizeof(n->pool));
                else if (kv_int(tok, "other_gpus", &n->other_gpus))
                    ;
                else if (strncmp(tok, "cpu=", 4) == 0) {
                    if (kd_sched_cpu_milli(tok + 4, &n->cpu_milli) != 0)
                        fail_msg("%s:%d: bad cpu quantity %s", file, ln, tok);
                } else if (strncmp(tok, "other_cpu=", 10) == 0) {
                    if (kd_sched_cpu_milli(tok + 10, &n->other_cpu_milli) != 0)
                        fail_msg("%s:%d: bad cpu quantity %s", file, ln, tok);
                } else if (strcmp(tok, "unschedulable") == 0)
                    n->unschedulable = true;
                else
                    fail_msg("%s:%d: unknown node field %s", file, ln, tok);
            }
        } else if (strcmp(w, "trial") == 0) {
            parse_trial(c, save, file, ln);
        } else if (strcmp(w, "expect") == 0 || strcmp(w, "reason") == 0 ||
                   strcmp(w, "slots") == 0) {
            if (!decided) {
                assert_int_equal(kd_sched_decide(&c->opts, c->nodes, c->nn, c->trials, c->nt), 0);
                decided = true;
            }
            char *key = strtok_r(NULL, " \t", &save);
            struct kd_sched_trial *t = find(c, key);
            if (t == NULL)
                fail_msg("%s:%d: unknown trial %s", file, ln, key);
            if (strcmp(w, "slots") == 0) {
                const char *want = strtok_r(NULL, " \t", &save);
                if (want == NULL || strcmp(t->cpu ? "cpu" : "gpu", want) != 0)
                    fail_msg("%s:%d: %s: slot type %s, expected %s", file, ln, key,
                             t->cpu ? "cpu" : "gpu", want ? want : "(none)");
            } else if (strcmp(w, "reason") == 0) {
                const char *sub = save;
                if (strstr(t->reason, sub) == NULL)
                    fail_msg("%s:%d: %s: reason \"%s\" does not contain \"%s\"", file, ln, key,
                             t->reason, sub);
            } else {
                const char *want = strtok_r(NULL, " \t", &save);
                if (strcmp(kd_sched_decision_name(t->decision), want) != 0)
                    fail_msg("%s:%d: %s: decision %s (%s), expected %s", file, ln, key,
                             kd_sched_decision_name(t->decision), t->reason, want);
                char *nodes = strtok_r(NULL, " \t", &save);
                if (nodes != NULL) {
                    char got[512] = "";
                    for (int p = 0; p < t->nplace; p++) {
                        size_t l = strlen(got);
                        snprintf(got + l, sizeof(got) - l, "%s%s:%d", p ? "," : "",
                                 c->nodes[t->place[p].node].name, t->place[p].gpus);
                    }
                    if (strcmp(got, nodes) != 0)
                        fail_msg("%s:%d: %s placed on %s, expected %s", file, ln, key, got, nodes);
                }
            }
            expects++;
        } else {
            fail_msg("%s:%d: unknown directive %s", file, ln, w);
        }
    }
    fclose(f);
    free(c);
    if (expects == 0)
        fail_msg("%s: no expectations", file);
}

static void test_table(void **state)
{
    (void)state;
    const char *dir = "tests/data/controller/sched";
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        if (!kd_str_has_suffix(e->d_name, ".case"))
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        print_message("case %s\n", e->d_name);
        run_file(path, e->d_name);
        n++;
    }
    closedir(d);
    assert_true(n >= 8);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct kd_sched_opts o = {0};
    struct kd_sched_node n = {.name = "a", .pool = "default", .gpus = 4};
    struct kd_sched_trial t = {.key = "x", .group = "g", .slots = -1};
    assert_int_equal(kd_sched_decide(&o, &n, 1, &t, 1), KD_EINVAL);
    t.slots = 1;
    t.state = KD_SCHED_RUNNING;
    t.nplace = 1;
    t.place[0].node = 3;
    assert_int_equal(kd_sched_decide(&o, &n, 1, &t, 1), KD_EINVAL);
    enum kd_sched_type ty;
    assert_int_equal(kd_sched_type_parse("fifo", &ty), KD_EINVAL);
    enum kd_sched_slot_type st = KD_SCHED_SLOT_AUTO;
    assert_int_equal(kd_sched_slot_type_parse("tpu", &st), KD_EINVAL);
    assert_int_equal(kd_sched_slot_type_parse(NULL, &st), KD_EINVAL);
    assert_int_equal(kd_sched_slot_type_parse("cpu", &st), 0);
    assert_int_equal(st, KD_SCHED_SLOT_CPU);
}

/* CPU quantities and the CPU slots a node of that many CPUs offers. */
static void test_cpu_slots(void **state)
{
    (void)state;
    static const struct {
        const char *q;
        int rc;
        int64_t milli;
    } qs[] = {
        {"1", 0, 1000},         {"2", 0, 2000},
        {"500m", 0, 500},       {"1.5", 0, 1500},
        {"0.25", 0, 250},       {".5", 0, 500},
        {"0", KD_EINVAL, 0},    {"0m", KD_EINVAL, 0},
        {"", KD_EINVAL, 0},     {"-1", KD_EINVAL, 0},
        {"1.5m", KD_EINVAL, 0}, {"1.0001", KD_EINVAL, 0},
        {"2k", KD_EINVAL, 0},   {"1.", KD_EINVAL, 0},
        {"m", KD_EINVAL, 0},    {"99999999999999", KD_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        int64_t m = -1;
        int rc = kd_sched_cpu_milli(qs[i].q, &m);
        if (rc != qs[i].rc || (rc == 0 && m != qs[i].milli))
            fail_msg("cpu %s: rc %d milli %lld, expected rc %d milli %lld", qs[i].q, rc,
                     (long long)m, qs[i].rc, (long long)qs[i].milli);
    }
    assert_int_equal(kd_sched_cpu_milli(NULL, &(int64_t){0}), KD_EINVAL);
    assert_int_equal(kd_sched_cpu_slots(2000, 1000), 2);
    assert_int_equal(kd_sched_cpu_slots(3999, 2000), 1);
    assert_int_equal(kd_sched_cpu_slots(16000, 4000), 4);
    assert_int_equal(kd_sched_cpu_slots(500, 1000), 1); /* any CPU: at least one slot */
    assert_int_equal(kd_sched_cpu_slots(0, 1000), 0);
    assert_int_equal(kd_sched_cpu_slots(2000, 0), 0);
    assert_int_equal(kd_sched_cpu_slots(4000, 1500), 2);
}

/* Fair share with 10,000 waiting trials of four experiments weighted 4, 3, 2 and 1: the 40
 * free GPUs go 16, 12, 8 and 4, each experiment first-come first-served. (A pass used to rescan
 * the queue for every experiment's head and held slots, quadratic in the trials waiting.) */
static void test_fair_share_many(void **state)
{
    (void)state;
    enum { NT = 10000, NG = 4 };
    struct kd_sched_opts o = {.type = KD_SCHED_FAIR_SHARE};
    struct kd_sched_node n[2] = {{.name = "a", .pool = "default", .gpus = 20},
                                 {.name = "b", .pool = "default", .gpus = 20}};
    struct kd_sched_trial *t = calloc(NT, sizeof(*t));
    char(*keys)[32] = calloc(NT, 32);
    static const char *const groups[NG] = {"g4", "g3", "g2", "g1"};
    int admitted[NG] = {0}, first_waiting[NG];
    assert_non_null(t);
    assert_non_null(keys);
    for (int i = 0; i < NT; i++) {
        snprintf(keys[i], 32, "t%d", i);
        t[i].key = keys[i];
        t[i].group = groups[i % NG];
        kd_strlcpy(t[i].pool, "default", sizeof(t[i].pool));
        t[i].slots = 1;
        t[i].priority = 42;
        t[i].weight = NG - i % NG;
        t[i].position = i % NG; /* an experiment's trials queue together, as in the controller */
        t[i].index = i;
    }
    assert_int_equal(kd_sched_decide(&o, n, 2, t, NT), 0);
    for (int g = 0; g < NG; g++)
        first_waiting[g] = -1;
    for (int i = 0; i < NT; i++) {
        int g = i % NG;
        if (t[i].decision == KD_SCHED_ADMIT) {
            admitted[g]++;
            assert_int_equal(first_waiting[g], -1); /* FIFO within the experiment */
        } else {
            assert_int_equal(t[i].decision, KD_SCHED_WAIT);
            if (first_waiting[g] < 0)
                first_waiting[g] = i;
        }
    }
    assert_int_equal(admitted[0], 16);
    assert_int_equal(admitted[1], 12);
    assert_int_equal(admitted[2], 8);
    assert_int_equal(admitted[3], 4);
    free(keys);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_cpu_slots),
        cmocka_unit_test(test_fair_share_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
