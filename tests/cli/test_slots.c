/* det's view of slots (cli/slots.c): Node facts, pools and their slot types, and whether a
 * trial could ever fit, table-tested against the scheduler's rules (docs/scheduling.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cli/cli.h"

/* det_err and det_usage_suggest live in cli/main.c. */
void det_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd)
{
    (void)what;
    (void)word;
    (void)cands;
    (void)help_cmd;
}

static void test_node_facts(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        const char *pool;
        int gpus;
        long long cpu;
        bool unschedulable;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"allocatable\":{\"cpu\":\"4\","
         "\"nvidia.com/gpu\":\"8\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}",
         "default", 8, 4000, false},
        {"{\"metadata\":{\"name\":\"b\",\"labels\":{\"kdet.io/resource-pool\":\"cpu\"}},"
         "\"status\":{\"allocatable\":{\"cpu\":\"1500m\"},\"conditions\":[{\"type\":\"Ready\","
         "\"status\":\"True\"}]}}",
         "cpu", 0, 1500, false},
        {"{\"metadata\":{\"name\":\"c\"},\"spec\":{\"unschedulable\":true},\"status\":{"
         "\"allocatable\":{\"cpu\":2,\"nvidia.com/gpu\":\"x\"},\"conditions\":[{\"type\":"
         "\"Ready\",\"status\":\"True\"}]}}",
         "default", 0, 2000, true},
        {"{\"metadata\":{\"name\":\"d\"},\"status\":{\"allocatable\":{\"cpu\":\"0.5\"},"
         "\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}]}}",
         "default", 0, 500, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_error_t je;
        json_t *n = json_loads(cases[i].json, 0, &je);
        assert_non_null(n);
        struct det_node f;
        det_node_facts(n, &f);
        assert_string_equal(f.pool, cases[i].pool);
        assert_int_equal(f.gpus, cases[i].gpus);
        assert_int_equal(f.cpu_milli, cases[i].cpu);
        assert_int_equal(f.unschedulable, cases[i].unschedulable);
        json_decref(n);
    }
    assert_int_equal(det_cpu_milli("2"), 2000);
    assert_int_equal(det_cpu_milli("250m"), 250);
    assert_int_equal(det_cpu_milli("1.25"), 1250);
    assert_int_equal(det_cpu_milli("-1"), 0);
    assert_int_equal(det_cpu_milli("2Ki"), 0);
    assert_int_equal(det_cpu_milli(""), 0);
}

/* The cluster of each case: "pool:gpus:cpu_milli" per node, space-separated. */
static size_t nodes_of(const char *spec, struct det_node *out)
{
    size_t n = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok != NULL;
         tok = strtok_r(NULL, " ", &save)) {
        memset(&out[n], 0, sizeof(out[n]));
        char pool[64];
        int gpus;
        long long cpu;
        if (sscanf(tok, "%63[^:]:%d:%lld", pool, &gpus, &cpu) != 3)
            fail_msg("bad node spec %s", tok);
        snprintf(out[n].name, sizeof(out[n].name), "n%zu", n);
        snprintf(out[n].pool, sizeof(out[n].pool), "%s", pool);
        out[n].gpus = gpus;
        out[n].cpu_milli = cpu;
        n++;
    }
    return n;
}

static void test_fits(void **state)
{
    (void)state;
    static const struct {
        const char *nodes;
        const char *slot_type;
        long long cpu_per_slot;
        int per_pod;
        const char *pool;
        int slots;
        const char *want; /* "" fits, else a piece of the reason */
        const char *type; /* the pool's slot type: "gpu", "cpu" */
        bool single_node; /* resources.is_single_node */
    } cases[] = {
        /* resources.is_single_node: never more slots than the largest node */
        {"default:4:8000 default:4:8000", "auto", 1000, 0, "default", 8,
         "slots_per_trial=8 exceeds the largest node of resource pool default (4 GPUs) and "
         "resources.is_single_node keeps a trial on one node",
         "gpu", true},
        {"default:4:8000 default:4:8000", "auto", 1000, 2, "default", 4, "", "gpu", true},
        {"default:4:8000 default:4:8000", "auto", 1000, 2, "default", 6, "exceeds the largest node",
         "gpu", true},
        /* GPU pools (auto: a node has GPUs) */
        {"default:4:8000", "auto", 1000, 0, "default", 4, "", "gpu", false},
        {"default:4:8000", "auto", 1000, 0, "default", 5,
         "slots_per_trial=5 needs 5 GPUs; resource pool default has 4", "gpu", false},
        {"default:4:8000 default:4:8000", "auto", 1000, 0, "default", 8, "", "gpu", false},
        {"default:4:8000 default:4:8000", "auto", 1000, 0, "default", 6,
         "exceeds the largest node of resource pool default (4 GPUs) and is not a multiple", "gpu",
         false},
        {"default:4:8000 default:2:8000 default:2:8000", "auto", 1000, 0, "default", 8,
         "needs 2 nodes with 4 GPUs; resource pool default has 1", "gpu", false},
        /* a pool of CPU nodes next to a GPU pool: each pool decides for itself */
        {"default:0:2000 gpu:2:4000", "auto", 1000, 0, "default", 2, "", "cpu", false},
        {"default:0:2000 gpu:2:4000", "auto", 1000, 0, "default", 4,
         "needs 4 CPU slots; resource pool default has 2", "cpu", false},
        {"default:0:5000", "auto", 2000, 0, "default", 2, "", "cpu", false}, /* 5 CPUs: 2 of 2 */
        {"default:0:5000", "auto", 2000, 0, "default", 3, "has 2", "cpu", false},
        {"default:0:500", "auto", 1000, 0, "default", 1, "", "cpu",
         false}, /* half a CPU: one slot */
        /* forced slot types */
        {"default:0:8000", "gpu", 1000, 0, "default", 1,
         "resource pool default has no GPUs; the trial needs 1", "gpu", false},
        {"default:2:8000", "cpu", 1000, 0, "default", 8, "", "cpu", false},
        /* max_slots_per_pod */
        {"default:0:2000 default:0:2000", "auto", 1000, 1, "default", 4, "", "cpu", false},
        {"default:0:2000 default:0:2000", "auto", 1000, 1, "default", 5,
         "needs 5 pods of 1 CPU slots (max_slots_per_pod); resource pool default holds 4", "cpu",
         false},
        {"default:4:0", "auto", 1000, 2, "default", 3,
         "slots_per_trial=3 is not a multiple of max_slots_per_pod=2", "gpu", false},
        /* no such pool; no slot needed */
        {"default:4:8000", "auto", 1000, 0, "big", 1, "the pool has no nodes", "", false},
        {"default:0:0", "auto", 1000, 0, "nope", 0, "", "", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct det_node nodes[8];
        struct det_pool pools[8];
        size_t n = nodes_of(cases[i].nodes, nodes), np = 0;
        struct det_slot_settings s = {.cpu_per_slot_milli = cases[i].cpu_per_slot,
                                      .max_slots_per_pod = cases[i].per_pod};
        snprintf(s.slot_type, sizeof(s.slot_type), "%s", cases[i].slot_type);
        assert_int_equal(det_pools_count(nodes, n, &s, pools, 8, &np), 0);
        const struct det_pool *p = NULL;
        for (size_t k = 0; k < np; k++)
            if (strcmp(pools[k].name, cases[i].pool) == 0)
                p = &pools[k];
        char why[512];
        bool fits =
            det_pool_fits(p, nodes, n, cases[i].slots, cases[i].single_node, &s, why, sizeof(why));
        if (cases[i].want[0] == '\0' ? !fits : (fits || strstr(why, cases[i].want) == NULL))
            fail_msg("case %zu (%s, %d slots in %s): fits=%d why=\"%s\", want \"%s\"", i,
                     cases[i].nodes, cases[i].slots, cases[i].pool, fits, why, cases[i].want);
        if (p != NULL && strcmp(p->cpu ? "cpu" : "gpu", cases[i].type) != 0)
            fail_msg("case %zu: pool %s has %s slots, want %s", i, p->name, p->cpu ? "cpu" : "gpu",
                     cases[i].type);
    }
    /* More pools than room is an error, not an overflow. */
    struct det_node nodes[4];
    struct det_pool pools[2];
    size_t n = nodes_of("a:1:0 b:1:0 c:1:0", nodes), np = 0;
    struct det_slot_settings s = {.slot_type = "auto", .cpu_per_slot_milli = 1000};
    assert_int_equal(det_pools_count(nodes, n, &s, pools, 2, &np), KD_ETOOBIG);
}

static void test_assumption(void **state)
{
    (void)state;
    char buf[256];
    struct det_slot_settings s = {.slot_type = "auto", .cpu_per_slot_milli = 1000, .assumed = true};
    det_slot_assumption(&s, buf, sizeof(buf));
    assert_non_null(strstr(buf, "assuming kdet-controller's defaults (--slot-type auto, "
                                "--cpu-per-slot 1"));
    struct det_slot_settings t = {
        .slot_type = "cpu", .cpu_per_slot_milli = 2500, .max_slots_per_pod = 1};
    det_slot_assumption(&t, buf, sizeof(buf));
    assert_string_equal(buf, "kdet-controller counts with --slot-type cpu, --cpu-per-slot "
                             "2500m, --max-slots-per-pod 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_facts),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_assumption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
