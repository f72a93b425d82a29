/*
 * Checkpoint downloads through the API (controller/api/download.c) against
 * a real PostgreSQL, kdet-local and s3rver: a checkpoint uploaded to S3 and
 * registered by its trial's worker, then a model version of it, downloaded
 * as a tar archive (by version and by uuid) whose members are compared
 * byte for byte with the files uploaded; its headers (length, type, a safe
 * file name); the process's memory while a large one streams; one-minute
 * download links (good, forged, for another path, after the token's
 * revocation); the refusals (401, 403, 400, 404 naming the model or the
 * version, 410 for a deleted checkpoint, 404 without a manifest, 502 for
 * a storage that is down or refuses the keys, without the keys); a file
 * whose bytes changed in storage cuts the transfer off short of its
 * Content-Length; no more than max_downloads stream at once (503 for one
 * more, served again once they end); and the log names every download
 * without a secret.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>
#include <curl/curl.h>

#include "core/fs.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "fx.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "storage/ckpt_tar.h"

#define NSP "/api/v1/namespaces/default/"
#define UUID1 "d0d0d0d0-0000-4000-8000-000000000001" /* uploaded, registered, version 1 */
#define UUID2 "d0d0d0d0-0000-4000-8000-000000000002" /* registered, never uploaded */
#define UUID3 "d0d0d0d0-0000-4000-8000-000000000003" /* uploaded, then DELETED in the registry */
#define UUID4 "d0d0d0d0-0000-4000-8000-000000000004" /* uploaded, then one file changed */
#define BIG (10 * KD_CKPT_TAR_PIECE + 4321)
#define SECRET "very-secret-key-0123456789"

static struct s3srv srv;
static char tmp[256], logpath[300];
static int saved_stderr = -1;
static char tok_alice[128], tok_bob[128], tok_trial[64];
static long long alice_token_id;

static const struct {
    const char *rel;
    size_t size;
} files[] = {
    {"model.bin", 100000},
    {"empty", 0},
    {"sub/optimizer.pt", 1025},
    {"weights/big.bin", BIG},
};
#define NFILES (sizeof(files) / sizeof(files[0]))

static void write_file(const char *dir, const char *rel, size_t size, unsigned seed)
{
    char path[1024], parent[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    snprintf(parent, sizeof(parent), "%s", path);
    *strrchr(parent, '/') = '\0';
    assert_int_equal(kd_mkdir_p(parent, 0755), 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < size; i++)
        fputc((int)((i * 131 + seed * 17 + (i >> 11)) & 0xff), f);
    fclose(f);
}

static struct kd_storage *open_st(void)
{
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    s3srv_config(&srv, "dl", &cfg);
    if (kd_storage_open(&cfg, &st, err) != 0)
        fail_msg("open: %s", err);
    return st;
}

/* The trial's worker registers checkpoint uuid (POST .../checkpoints with its token). */
static void register_ckpt(const char *uuid, int batches)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"uuid\":\"%s\",\"batches\":%d,\"storage_path\":\"s3://ckpt/dl/%s\",\"size\":1}",
             uuid, batches, uuid);
    assert_int_equal(fx_http("POST", NSP "trials/d-exp-1/checkpoints", tok_trial, body, NULL), 200);
}

static void make_user(const char *name, const char *namespaces, char *tok, size_t len,
                      long long *token_id)
{
    char body[256];
    json_t *out = NULL;
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"namespaces\":%s}", name, namespaces);
    assert_int_equal(fx_http("POST", "/api/v1/users", FX_USER_TOKEN, body, &out), 201);
    snprintf(tok, len, "%s", json_string_value(json_object_get(out, "token")));
    json_decref(out);
    if (token_id != NULL) {
        assert_int_equal(fx_http("GET", "/api/v1/tokens", tok, NULL, &out), 200);
        *token_id = json_integer_value(
            json_object_get(json_array_get(json_object_get(out, "tokens"), 0), "id"));
        assert_true(*token_id > 0);
        json_decref(out);
    }
}

static int setup(void **state)
{
    char err[KD_ERRLEN] = "", uid[64], dir[512], small[512], endpoint[64];
    /* The log (stderr) goes to a file, read at the end for secrets. */
    snprintf(tmp, sizeof(tmp), "%s/kd-dl-XXXXXX", getenv("TMPDIR") ?: "/tmp");
    if (mkdtemp(tmp) == NULL)
        return -1;
    snprintf(logpath, sizeof(logpath), "%s/log", tmp);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    saved_stderr = dup(2);
    if (fd < 0 || saved_stderr < 0 || dup2(fd, 2) < 0)
        return -1;
    close(fd);
    setenv("KDET_LOG_LEVEL", "info", 1);
    fx_max_downloads = 2;
    if (s3srv_start(&srv, "ckpt") != 0) {
        printf("FAILED: cannot start s3rver (make deps)\n");
        return -1;
    }
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", srv.port);
    if (fx_setup(state) != 0)
        return -1;
    /* An experiment whose checkpoints go to s3rver, its trial, the trial's token. */
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:{s:s,s:s,s:b,s:i},s:{s:s,s:s,s:s,s:s,s:b}}}",
                          "apiVersion", "kdet.io/v1alpha1", "kind", "Experiment", "metadata",
                          "name", "d-exp", "spec", "entrypoint", "train", "searcher", "name",
                          "single", "metric", "loss", "smaller_is_better", 1, "max_length", 1000,
                          "checkpoint_storage", "type", "s3", "bucket", "ckpt", "prefix", "dl",
                          "endpoint_url", endpoint, "path_style", 1);
    if (kd_k8s_create(fx.k8s, &KD_K8S_EXPERIMENTS, "default", o, NULL, NULL, err) != 0)
        fail_msg("create experiment: %s", err);
    json_decref(o);
    fx_trial("d-exp", "d-exp-1", 100, uid, sizeof(uid));
    fx_token("d-exp-1", uid, tok_trial, sizeof(tok_trial));
    make_user("alice", "[\"default\"]", tok_alice, sizeof(tok_alice), &alice_token_id);
    make_user("bob", "[\"team-b\"]", tok_bob, sizeof(tok_bob), NULL);

    /* The files, uploaded as checkpoint 1; the small ones as 3 and 4; 2 never; all four
     * registered. */
    snprintf(dir, sizeof(dir), "%s/src", tmp);
    snprintf(small, sizeof(small), "%s/small", tmp);
    for (size_t i = 0; i < NFILES; i++) {
        write_file(dir, files[i].rel, files[i].size, (unsigned)i + 1);
        if (files[i].size < BIG)
            write_file(small, files[i].rel, files[i].size, (unsigned)i + 1);
    }
    struct kd_storage *st = open_st();
    if (kd_ckpt_upload(st, UUID1, dir, NULL, NULL, NULL, err) != 0 ||
        kd_ckpt_upload(st, UUID3, small, NULL, NULL, NULL, err) != 0 ||
        kd_ckpt_upload(st, UUID4, small, NULL, NULL, NULL, err) != 0)
        fail_msg("upload: %s", err);
    kd_storage_close(st);
    for (int i = 0;
         i < 100 && fx_http("GET", NSP "trials/d-exp-1", FX_USER_TOKEN, NULL, NULL) != 200; i++)
        kd_sleep_ms(50);
    register_ckpt(UUID1, 10);
    register_ckpt(UUID2, 20);
    register_ckpt(UUID3, 30);
    register_ckpt(UUID4, 40);
    assert_int_equal(fx_http("POST", NSP "models", FX_USER_TOKEN, "{\"name\":\"dl-model\"}", NULL),
                     201);
    const char *reg[] = {UUID1, UUID2, UUID3, UUID4};
    for (int i = 0; i < 4; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"checkpoint_uuid\":\"%s\"}", reg[i]);
        assert_int_equal(fx_http("POST", NSP "models/dl-model/versions", FX_USER_TOKEN, body, NULL),
                         201);
    }
    /* Checkpoint 3 was deleted since (as checkpoint GC marks it). */
    assert_int_equal(fx_sql_int("UPDATE checkpoints SET state = 'DELETED', deleted_at = now() "
                                "WHERE uuid = '" UUID3 "' RETURNING 1"),
                     1);
    return 0;
}

static int teardown(void **state)
{
    int rc = fx_teardown(state);
    /* What went to stderr (the log, and cmocka's failures) into the test's output. */
    fflush(stderr);
    FILE *f = fopen(logpath, "r");
    char line[8192];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        fputs(line, stdout);
    if (f != NULL)
        fclose(f);
    /* cmocka's summary, after this, goes where stderr went before */
    if (saved_stderr >= 0) {
        dup2(saved_stderr, 2);
        close(saved_stderr);
    }
    s3srv_stop(&srv);
    s3srv_rm_tree(tmp);
    return rc;
}

/* ---- a download with curl: the body into a file, the headers kept ---- */

struct got {
    long code;
    CURLcode cc;
    char headers[4096];
    size_t hlen;
    curl_off_t length; /* Content-Length, -1 when none */
    uint64_t bytes;
    char path[600];
};

static size_t on_head(char *p, size_t sz, size_t n, void *ud)
{
    struct got *g = ud;
    size_t k = sz * n;
    if (g->hlen + k < sizeof(g->headers)) {
        memcpy(g->headers + g->hlen, p, k);
        g->hlen += k;
        g->headers[g->hlen] = '\0';
    }
    return k;
}

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    FILE *f = ud;
    return fwrite(p, sz, n, f) * sz;
}

/* GET path (a token or none) into tmp/NAME; the outcome in g. */
static void get(const char *path, const char *token, const char *name, struct got *g)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hd = NULL;
    char url[2048], auth[512];
    memset(g, 0, sizeof(*g));
    snprintf(g->path, sizeof(g->path), "%s/%s", tmp, name);
    FILE *f = fopen(g->path, "wb");
    assert_non_null(f);
    snprintf(url, sizeof(url), "%s%s", fx.url, path);
    if (token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hd = curl_slist_append(hd, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_head);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, g);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    g->cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &g->code);
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &g->length);
    fclose(f);
    struct stat sb;
    assert_int_equal(stat(g->path, &sb), 0);
    g->bytes = (uint64_t)sb.st_size;
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
}

/* The file's text (an error's JSON), in a static buffer. */
static const char *text_of(const struct got *g)
{
    static char buf[8192];
    FILE *f = fopen(g->path, "rb");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = '\0';
    if (f != NULL)
        fclose(f);
    return buf;
}

/* The archive's members: TOP/ then every file with the bytes of tmp/src's. */
static void check_archive(const char *path, const char *top)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    char want[1024], src[1024];
    int seen = 0;
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, path, 65536), ARCHIVE_OK);
    assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_OK);
    snprintf(want, sizeof(want), "%s/", top);
    assert_string_equal(archive_entry_pathname(e), want);
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        size_t i = 0;
        for (; i < NFILES; i++) {
            snprintf(want, sizeof(want), "%s/%s", top, files[i].rel);
            if (strcmp(want, archive_entry_pathname(e)) == 0)
                break;
        }
        if (i == NFILES)
            fail_msg("unexpected member %s", archive_entry_pathname(e));
        assert_int_equal(archive_entry_size(e), (la_int64_t)files[i].size);
        snprintf(src, sizeof(src), "%s/src/%s", tmp, files[i].rel);
        FILE *f = fopen(src, "rb");
        char b1[65536], b2[65536];
        size_t total = 0;
        la_ssize_t n;
        while ((n = archive_read_data(a, b1, sizeof(b1))) > 0) {
            assert_int_equal(fread(b2, 1, (size_t)n, f), (size_t)n);
            assert_memory_equal(b1, b2, (size_t)n);
            total += (size_t)n;
        }
        assert_int_equal(n, 0);
        assert_int_equal(total, files[i].size);
        assert_int_equal(fgetc(f), EOF);
        fclose(f);
        seen++;
    }
    assert_int_equal(seen, (int)NFILES);
    archive_read_free(a);
}

static long vm_hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

static void test_download_version(void **state)
{
    (void)state;
    struct got g;
    long before = vm_hwm_kb();
    get(NSP "models/dl-model/versions/1/download", tok_alice, "v1.tar", &g);
    long after = vm_hwm_kb();
    assert_int_equal(g.cc, CURLE_OK);
    assert_int_equal(g.code, 200);
    printf("version 1: %llu bytes; peak RSS %ld -> %ld KiB\n", (unsigned long long)g.bytes, before,
           after);
    assert_true(g.bytes > BIG);
    assert_int_equal((uint64_t)g.length, g.bytes);
    assert_non_null(strstr(g.headers, "Content-Type: application/x-tar"));
    assert_non_null(
        strstr(g.headers, "Content-Disposition: attachment; filename=\"dl-model-v1.tar\""));
    assert_non_null(strstr(g.headers, "X-Kdet-Checkpoint: " UUID1));
    assert_non_null(strstr(g.headers, "Cache-Control: no-store"));
    assert_null(strstr(g.headers, "chunked"));
    check_archive(g.path, "dl-model-v1");
#ifndef KD_SANITIZE
    /* Streamed: the server side holds a piece or two, not the archive (25 MiB). */
    assert_true(after - before < (long)(2 * KD_CKPT_TAR_PIECE / 1024 + 8192));
#endif
    /* HEAD: the same length, no body */
    CURL *h = curl_easy_init();
    char url[512], auth[256];
    struct curl_slist *hd = NULL;
    curl_off_t len = -1;
    long code = 0;
    snprintf(url, sizeof(url), "%s" NSP "models/dl-model/versions/1/download", fx.url);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok_alice);
    hd = curl_slist_append(hd, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    assert_int_equal(code, 200);
    assert_int_equal((uint64_t)len, g.bytes);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
}

static void test_download_checkpoint(void **state)
{
    (void)state;
    struct got g;
    get(NSP "checkpoints/" UUID1 "/download", FX_USER_TOKEN, "c1.tar", &g);
    assert_int_equal(g.code, 200);
    assert_int_equal((uint64_t)g.length, g.bytes);
    assert_non_null(strstr(g.headers, "filename=\"" UUID1 ".tar\""));
    check_archive(g.path, UUID1);
}

static void test_refusals(void **state)
{
    (void)state;
    struct got g;
    const struct {
        const char *path, *token;
        long code;
        const char *says;
    } cases[] = {
        {NSP "models/dl-model/versions/1/download", NULL, 401, "token"},
        {NSP "models/dl-model/versions/1/download", "kdet_1_wrong", 401, "token"},
        {NSP "models/dl-model/versions/1/download", tok_trial, 401, "token"},
        {NSP "models/dl-model/versions/1/download", tok_bob, 403, "namespace default"},
        {NSP "checkpoints/" UUID1 "/download", tok_bob, 403, "namespace default"},
        {NSP "models/no-model/versions/1/download", tok_alice, 404, "model no-model"},
        {NSP "models/dl-model/versions/9/download", tok_alice, 404, "no version 9"},
        {NSP "models/dl-model/versions/x/download", tok_alice, 400, "version"},
        {NSP "checkpoints/d0d0d0d0-0000-4000-8000-0000000000ff/download", tok_alice, 404, "not"},
        {NSP "models/dl-model/versions/2/download", tok_alice, 404, "no manifest"},
        {NSP "checkpoints/" UUID2 "/download", tok_alice, 404, "no manifest"},
        {NSP "models/dl-model/versions/3/download", tok_alice, 410, "DELETED"},
        {NSP "checkpoints/" UUID3 "/download", tok_alice, 410, "DELETED"},
        {NSP "models/dl-model/versions/1/download-link", tok_bob, 403, "namespace default"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strstr(cases[i].path, "download-link") != NULL) {
            json_t *out = NULL;
            assert_int_equal(fx_http("POST", cases[i].path, cases[i].token, "{}", &out),
                             cases[i].code);
            json_decref(out);
            continue;
        }
        get(cases[i].path, cases[i].token, "err.json", &g);
        const char *t = text_of(&g);
        printf("%s: %ld %s\n", cases[i].path, g.code, t);
        assert_int_equal(g.code, cases[i].code);
        assert_non_null(strstr(g.headers, "application/json"));
        assert_non_null(strstr(t, "\"error\""));
        assert_non_null(strstr(t, cases[i].says));
    }
}

static void test_storage_failures(void **state)
{
    (void)state;
    struct got g;
    /* Refused keys: 502 naming the refusal, never the keys. */
    char *id = strdup(getenv("AWS_ACCESS_KEY_ID")), *key = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
    setenv("AWS_ACCESS_KEY_ID", "AKIDWRONGWRONGWRONG", 1);
    setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
    get(NSP "models/dl-model/versions/1/download", tok_alice, "err.json", &g);
    const char *t = text_of(&g);
    printf("wrong keys: %ld %s\n", g.code, t);
    assert_int_equal(g.code, 502);
    assert_non_null(strstr(t, "InvalidAccessKeyId"));
    assert_null(strstr(t, SECRET));
    assert_null(strstr(t, "AKIDWRONGWRONGWRONG"));
    setenv("AWS_ACCESS_KEY_ID", id, 1);
    setenv("AWS_SECRET_ACCESS_KEY", key, 1);
    free(id);
    free(key);
    /* The storage down: 502 naming the connection. */
    s3srv_kill(&srv);
    get(NSP "models/dl-model/versions/1/download-link", tok_alice, "err.json", &g);
    assert_int_equal(g.code, 405); /* a link is asked for with POST */
    json_t *out = NULL;
    int code =
        fx_http("POST", NSP "models/dl-model/versions/1/download-link", tok_alice, "{}", &out);
    printf("storage down: %d %s\n", code, json_string_value(json_object_get(out, "error")));
    assert_int_equal(code, 502);
    assert_non_null(
        strstr(json_string_value(json_object_get(out, "error")), "model dl-model version 1"));
    json_decref(out);
    get(NSP "checkpoints/" UUID1 "/download", tok_alice, "err.json", &g);
    assert_int_equal(g.code, 502);
    assert_int_equal(s3srv_restart(&srv), 0);

    /* A file whose bytes changed in storage since: the transfer is cut off short of its
     * Content-Length, never a complete archive. */
    struct kd_storage *st = open_st();
    char err[KD_ERRLEN] = "", junk[1025];
    memset(junk, 'j', sizeof(junk));
    assert_int_equal(kd_storage_put_mem(st, UUID4 "/sub/optimizer.pt", junk, sizeof(junk), err), 0);
    kd_storage_close(st);
    get(NSP "models/dl-model/versions/4/download", tok_alice, "v4.tar", &g);
    printf("a changed file: %ld, curl %s, %llu of %lld bytes\n", g.code, curl_easy_strerror(g.cc),
           (unsigned long long)g.bytes, (long long)g.length);
    assert_int_equal(g.code, 200);
    assert_int_equal(g.cc, CURLE_PARTIAL_FILE);
    assert_true(g.length > 0 && g.bytes < (uint64_t)g.length);
}

static void test_links(void **state)
{
    (void)state;
    json_t *out = NULL;
    struct got g;
    char path[1024];
    assert_int_equal(
        fx_http("POST", NSP "models/dl-model/versions/1/download-link", tok_alice, "{}", &out),
        200);
    const char *url = json_string_value(json_object_get(out, "url"));
    assert_non_null(url);
    assert_string_equal(json_string_value(json_object_get(out, "filename")), "dl-model-v1.tar");
    assert_string_equal(json_string_value(json_object_get(out, "checkpoint_uuid")), UUID1);
    assert_int_equal(json_integer_value(json_object_get(out, "files")), NFILES);
    int64_t exp_ms = 0;
    assert_int_equal(
        kd_time_parse_rfc3339(json_string_value(json_object_get(out, "expires")), &exp_ms), 0);
    assert_true(exp_ms > kd_wall_ms() && exp_ms <= kd_wall_ms() + 61000);
    const char *want = NSP "models/dl-model/versions/1/download?kdet_ticket=";
    assert_int_equal(strncmp(url, want, strlen(want)), 0);
    snprintf(path, sizeof(path), "%s", url);
    json_int_t size = json_integer_value(json_object_get(out, "size"));
    json_decref(out);

    /* the link alone, as a browser's download manager follows it */
    get(path, NULL, "link.tar", &g);
    assert_int_equal(g.code, 200);
    assert_int_equal(g.bytes, (uint64_t)size);
    check_archive(g.path, "dl-model-v1");
    /* ... again within its minute */
    get(path, NULL, "link.tar", &g);
    assert_int_equal(g.code, 200);

    /* for another path, forged, cut: 401 */
    const char *ticket = strstr(path, "kdet_ticket=") + 12;
    char other[1024], forged[1024];
    snprintf(other, sizeof(other), NSP "checkpoints/" UUID1 "/download?kdet_ticket=%s", ticket);
    get(other, NULL, "err.json", &g);
    assert_int_equal(g.code, 401);
    assert_non_null(strstr(text_of(&g), "download link is not valid"));
    snprintf(other, sizeof(other), NSP "models/dl-model/versions/4/download?kdet_ticket=%s",
             ticket);
    get(other, NULL, "err.json", &g);
    assert_int_equal(g.code, 401);
    snprintf(forged, sizeof(forged), "%s", path);
    forged[strlen(forged) - 2] = forged[strlen(forged) - 2] == 'A' ? 'B' : 'A';
    get(forged, NULL, "err.json", &g);
    assert_int_equal(g.code, 401);
    get(NSP "models/dl-model/versions/1/download?kdet_ticket=1.2.3.abc", NULL, "err.json", &g);
    assert_int_equal(g.code, 401);
    /* a link only works for a download: not for the version's JSON */
    snprintf(other, sizeof(other), NSP "models/dl-model/versions/1?kdet_ticket=%s", ticket);
    get(other, NULL, "err.json", &g);
    assert_int_equal(g.code, 401);

    /* a trial's checkpoint by uuid */
    assert_int_equal(
        fx_http("POST", NSP "checkpoints/" UUID1 "/download-link", tok_alice, "{}", &out), 200);
    snprintf(path, sizeof(path), "%s", json_string_value(json_object_get(out, "url")));
    json_decref(out);
    get(path, NULL, "c1link.tar", &g);
    assert_int_equal(g.code, 200);
    check_archive(g.path, UUID1);

    /* the token that made it revoked: the link is dead */
    char rv[128];
    snprintf(rv, sizeof(rv), "/api/v1/tokens/%lld/revoke", alice_token_id);
    assert_int_equal(fx_http("POST", rv, tok_alice, "{}", NULL), 200);
    get(path, NULL, "err.json", &g);
    assert_int_equal(g.code, 401);
}

static size_t hold(char *p, size_t sz, size_t n, void *ud)
{
    (void)p;
    (void)sz;
    (void)n;
    (void)ud;
    return CURL_WRITEFUNC_PAUSE;
}

/* At most max_downloads (2 here) stream at once: a third waits for its turn (503); once the
 * two go away, downloads are served again. */
static void test_concurrency(void **state)
{
    (void)state;
    CURLM *m = curl_multi_init();
    CURL *e[2];
    char url[512], auth[256];
    struct curl_slist *hd = NULL;
    struct got g;
    snprintf(url, sizeof(url), "%s" NSP "models/dl-model/versions/1/download", fx.url);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", FX_USER_TOKEN);
    hd = curl_slist_append(hd, auth);
    for (int i = 0; i < 2; i++) {
        e[i] = curl_easy_init();
        curl_easy_setopt(e[i], CURLOPT_URL, url);
        curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, hold); /* paused at its first bytes */
        curl_multi_add_handle(m, e[i]);
    }
    long c0 = 0, c1 = 0;
    for (int i = 0; i < 500 && (c0 != 200 || c1 != 200); i++) {
        int running = 0;
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 20, NULL);
        curl_easy_getinfo(e[0], CURLINFO_RESPONSE_CODE, &c0);
        curl_easy_getinfo(e[1], CURLINFO_RESPONSE_CODE, &c1);
    }
    assert_int_equal(c0, 200);
    assert_int_equal(c1, 200);
    get(NSP "checkpoints/" UUID1 "/download", FX_USER_TOKEN, "err.json", &g);
    printf("a third download while two stream: %ld %s\n", g.code, text_of(&g));
    assert_int_equal(g.code, 503);
    assert_non_null(strstr(g.headers, "Retry-After"));
    assert_non_null(strstr(text_of(&g), "2 checkpoint downloads are running"));
    /* a link is still made: it streams nothing */
    json_t *out = NULL;
    assert_int_equal(
        fx_http("POST", NSP "checkpoints/" UUID1 "/download-link", FX_USER_TOKEN, "{}", &out), 200);
    json_decref(out);
    for (int i = 0; i < 2; i++) {
        curl_multi_remove_handle(m, e[i]);
        curl_easy_cleanup(e[i]); /* the client goes away mid-archive */
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hd);
    long code = 0;
    for (int i = 0; i < 100 && code != 200; i++) {
        get(NSP "checkpoints/" UUID1 "/download", FX_USER_TOKEN, "c1.tar", &g);
        code = g.code;
        if (code != 200)
            kd_sleep_ms(50);
    }
    assert_int_equal(code, 200);
    check_archive(g.path, UUID1);
}

/* The log: one line per download with the user and the outcome; no key, no link. */
static void test_log(void **state)
{
    (void)state;
    fflush(stderr);
    FILE *f = fopen(logpath, "r");
    assert_non_null(f);
    char line[8192];
    int started = 0, complete = 0, cut = 0, gone = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, SECRET) != NULL || strstr(line, "kdet_ticket=") != NULL)
            fail_msg("a secret in the log: %s", line);
        if (strstr(line, "msg=\"checkpoint download\"") != NULL && strstr(line, "by=alice") != NULL)
            started++;
        if (strstr(line, "msg=\"checkpoint download ended\"") != NULL) {
            complete += strstr(line, "result=complete") != NULL;
            cut += strstr(line, "result=failed") != NULL;
            gone += strstr(line, "result=cut-off") != NULL && strstr(line, "by=admin") != NULL;
        }
    }
    fclose(f);
    printf("log: %d downloads started by alice, %d complete, %d failed, %d cut off\n", started,
           complete, cut, gone);
    assert_true(started >= 4);
    assert_true(complete >= 5);
    assert_true(cut >= 1);
    assert_true(gone >= 2); /* the two held downloads of test_concurrency */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_download_version),
        cmocka_unit_test(test_download_checkpoint),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_storage_failures),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_log),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
