/* Helpers shared by the det tests (see run.h). */
#define _XOPEN_SOURCE 700
#include "run.h"

#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "yaml/yaml.h"

static char *slurp(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    rewind(f);
    for (;;) {
        if (n + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

void det_run(struct det_run *r, const char *const *args)
{
    const char *build = getenv("KD_BUILD");
    char det[1024];
    const char *argv[64];
    size_t n = 0;
    snprintf(det, sizeof(det), "%s/bin/det", build ? build : "build");
    argv[n++] = det;
    for (size_t i = 0; args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    FILE *out = tmpfile(), *err = tmpfile();
    assert_non_null(out);
    assert_non_null(err);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        execv(det, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    r->code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->out = slurp(out, &r->out_len);
    r->err = slurp(err, NULL);
    fclose(out);
    fclose(err);
}

void det_run_free(struct det_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

void put_file(const char *dir, const char *rel, const char *content)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

void make_tmp(char *buf)
{
    snprintf(buf, 64, "/tmp/kd-det-XXXXXX");
    assert_non_null(mkdtemp(buf));
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

json_t *crd_schema_file(const char *path)
{
    struct kd_yaml_doc *doc = NULL;
    char err[1024];
    if (kd_yaml_parse_file(path, &doc, err) != 0)
        fail_msg("%s", err);
    json_t *s = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(kd_yaml_root(doc), "spec"), "versions"),
                           0),
            "schema"),
        "openAPIV3Schema");
    assert_non_null(s);
    json_incref(s);
    kd_yaml_free(doc);
    return s;
}

json_t *parse_docs(const char *text, size_t len)
{
    json_t *docs = NULL;
    char err[1024];
    if (kd_yaml_parse_stream("<det stdout>", text, len, &docs, err) != 0)
        fail_msg("det's output does not parse: %s", err);
    return docs;
}
