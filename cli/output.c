/*
 * det's output: kubectl-style tables, -o json|yaml, and the human forms of
 * durations and timestamps that the tables and progress lines share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"
#include "yaml/yaml.h"

#define TABLE_MAX_COLS 12
/* YAML/JSON printed for one object or list: a generous cap. */
#define PRINT_MAX (64u << 20)

struct det_table {
    size_t ncols, nrows, cap;
    char **cells; /* nrows+1 rows (headers first) of ncols */
};

int det_format_parse(const char *s, enum det_format *out)
{
    int rc = 0;
    if (s == NULL || strcmp(s, "table") == 0)
        *out = DET_FMT_TABLE;
    else if (strcmp(s, "json") == 0)
        *out = DET_FMT_JSON;
    else if (strcmp(s, "yaml") == 0)
        *out = DET_FMT_YAML;
    else {
        det_err("-o %s: expected table, json or yaml", s);
        rc = KD_EINVAL;
    }
    return rc;
}

int det_print_obj(const json_t *v, enum det_format f)
{
    int rc = DET_EXIT_ERROR;
    struct kd_buf b = KD_BUF_INIT(PRINT_MAX);
    char *s = NULL;
    if (f == DET_FMT_YAML) {
        if (kd_yaml_emit(v, &b) != 0) {
            det_err("the output is larger than %u bytes of YAML", PRINT_MAX);
            goto out;
        }
        fputs(kd_buf_str(&b), stdout);
    } else {
        s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (s == NULL)
            kd_oom(4096);
        puts(s);
    }
    rc = fflush(stdout) == 0 ? DET_EXIT_OK : DET_EXIT_ERROR;
out:
    free(s);
    kd_buf_free(&b);
    return rc;
}

struct det_table *det_table_new(const char *const *headers)
{
    struct det_table *t = kd_xcalloc(1, sizeof(*t));
    while (headers[t->ncols] != NULL && t->ncols < TABLE_MAX_COLS)
        t->ncols++;
    det_table_row(t, headers);
    return t;
}

void det_table_row(struct det_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cells = kd_xrealloc(t->cells, t->cap * t->ncols * sizeof(char *));
    }
    for (size_t i = 0; i < t->ncols; i++)
        t->cells[t->nrows * t->ncols + i] = kd_xstrdup(cells[i] ? cells[i] : "");
    t->nrows++;
}

void det_table_print(struct det_table *t)
{
    size_t w[TABLE_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t n = strlen(t->cells[r * t->ncols + c]);
            if (n > w[c])
                w[c] = n;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            if (c + 1 == t->ncols)
                printf("%s\n", s);
            else
                printf("%-*s   ", (int)w[c], s);
        }
    }
    fflush(stdout);
}

void det_table_free(struct det_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

void det_fmt_duration(int64_t ms, char *buf, size_t len)
{
    int64_t s = ms / 1000;
    if (ms < 0)
        snprintf(buf, len, "-");
    else if (s < 60)
        snprintf(buf, len, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(buf, len, "%lldm%llds", (long long)(s / 60), (long long)(s % 60));
    else if (s < 86400)
        snprintf(buf, len, "%lldh%lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
    else
        snprintf(buf, len, "%lldd%lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
}

void det_fmt_time(const char *rfc3339, char *buf, size_t len)
{
    int64_t ms;
    char tmp[32];
    if (rfc3339 == NULL || kd_time_parse_rfc3339(rfc3339, &ms) != 0) {
        snprintf(buf, len, "%s", "");
        return;
    }
    kd_time_rfc3339(ms, 0, tmp, sizeof(tmp));
    /* "2026-11-21T17:30:00Z" → "2026-11-21 17:30:00" */
    tmp[10] = ' ';
    tmp[19] = '\0';
    snprintf(buf, len, "%s", tmp);
}

int det_parse_duration(const char *s, int64_t *ms)
{
    char num[32];
    size_t n = strlen(s);
    int64_t mult = 1000, v;
    int rc = 0;
    if (n == 0 || n >= sizeof(num)) {
        rc = KD_EINVAL;
        goto out;
    }
    kd_strlcpy(num, s, sizeof(num));
    switch (num[n - 1]) {
    case 's':
        mult = 1000;
        num[n - 1] = '\0';
        break;
    case 'm':
        mult = 60000;
        num[n - 1] = '\0';
        break;
    case 'h':
        mult = 3600000;
        num[n - 1] = '\0';
        break;
    default: break;
    }
    if (kd_parse_i64(num, &v) != 0 || v < 0 || v > 365LL * 86400) {
        rc = KD_EINVAL;
        goto out;
    }
    *ms = v * mult;
out:
    return rc;
}

json_t *det_get(const json_t *obj, const char *path)
{
    char key[128];
    const json_t *cur = obj;
    while (cur != NULL && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        cur = json_object_get(cur, key);
        path += n;
        if (*path == '.')
            path++;
    }
    return (json_t *)cur;
}

const char *det_get_str(const json_t *obj, const char *path, const char *def)
{
    const char *s = json_string_value(det_get(obj, path));
    return s ? s : def;
}
