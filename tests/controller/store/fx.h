/*
 * Fixtures for the store tests: one private PostgreSQL per test program,
 * a fresh database per test, and small query helpers on a direct
 * connection (to look at what the store wrote, independently of its API).
 */
#ifndef KD_TESTS_STORE_FX_H
#define KD_TESTS_STORE_FX_H

#include <stdint.h>

#include <libpq-fe.h>

#include "store/store.h"
#include "support/pg.h"

extern struct kd_pg fx_pg;

/** cmocka group setup/teardown: start and remove the private server. */
int fx_group_setup(void **state);
int fx_group_teardown(void **state);

/** Create a new database with a unique name; its conninfo goes to buf. */
const char *fx_newdb(char *buf, size_t len);

/** Open a store on a new database (defaults for the other options when o is NULL). */
struct kd_store *fx_store(const struct kd_store_opts *o, char *conninfo, size_t len);

/** A direct connection; fails the test when it cannot connect. */
PGconn *fx_conn(const char *conninfo);

/** The single integer a query returns (fails the test on error). */
long long fx_int(PGconn *c, const char *sql);

/** Make an experiment and a trial; returns the trial id, *exp the experiment id. */
int64_t fx_trial(struct kd_store *s, const char *tag, int64_t *exp);

#endif
