/* Fixtures for the store tests (see fx.h). */
#include "fx.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"

struct kd_pg fx_pg;
static int fx_dbs;

int fx_group_setup(void **state)
{
    char err[KD_ERRLEN] = "";
    (void)state;
    kd_log_init("test-store", -1, -1);
    if (kd_pg_start(&fx_pg, err) != 0) {
        fprintf(stderr, "cannot start PostgreSQL: %s\n", err);
        return -1;
    }
    return 0;
}

int fx_group_teardown(void **state)
{
    (void)state;
    kd_pg_destroy(&fx_pg);
    return 0;
}

const char *fx_newdb(char *buf, size_t len)
{
    char name[64], err[KD_ERRLEN] = "";
    snprintf(name, sizeof(name), "t%d_%d", (int)getpid(), ++fx_dbs);
    if (kd_pg_createdb(&fx_pg, name, err) != 0)
        fail_msg("createdb: %s", err);
    return kd_pg_conninfo(&fx_pg, name, buf, len);
}

struct kd_store *fx_store(const struct kd_store_opts *o, char *conninfo, size_t len)
{
    struct kd_store_opts d = {0};
    struct kd_store *s = NULL;
    char err[KD_ERRLEN] = "";
    if (o)
        d = *o;
    d.conninfo = fx_newdb(conninfo, len);
    if (kd_store_open(&d, &s, err) != 0)
        fail_msg("kd_store_open: %s", err);
    return s;
}

PGconn *fx_conn(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect %s: %s", conninfo, PQerrorMessage(c));
    return c;
}

long long fx_int(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

int64_t fx_trial(struct kd_store *s, const char *tag, int64_t *exp)
{
    char uid[128], err[KD_ERRLEN] = "";
    int64_t eid = 0, tid = 0;
    json_t *cfg = json_pack("{ss}", "searcher", "random");
    snprintf(uid, sizeof(uid), "exp-%s", tag);
    struct kd_store_experiment e = {uid, "default", uid, cfg, "ACTIVE"};
    if (kd_store_experiment_upsert(s, &e, &eid, err) != 0)
        fail_msg("experiment: %s", err);
    json_t *hp = json_pack("{sf}", "lr", 0.01);
    snprintf(uid, sizeof(uid), "trial-%s", tag);
    struct kd_store_trial t = {uid, eid, "req-1", hp, 7, "ACTIVE"};
    if (kd_store_trial_upsert(s, &t, &tid, err) != 0)
        fail_msg("trial: %s", err);
    json_decref(cfg);
    json_decref(hp);
    if (exp)
        *exp = eid;
    return tid;
}
