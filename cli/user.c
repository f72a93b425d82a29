/*
 * `det user create|list|update|whoami|login|logout` and `det token
 * create|list|revoke`: kdet-controller's users, the namespaces each may
 * use, and their tokens (docs/cli.md, docs/security.md). A new token is
 * printed once, alone on stdout (or written to --token-file, mode 0600);
 * `det user login` keeps one in a file of mode 0600 that later commands
 * read. Tokens never reach stderr or the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"

/* A token read from a file or stdin, at most. */
#define TOKEN_MAX 1024

static const char user_usage[] =
    "usage: det user VERB ...\n"
    "\n"
    "verbs:\n"
    "  create NAME [--namespaces NS,...] [--admin] [--description TEXT] [--token-file FILE]\n"
    "                        add a user (administrators only) and print its first token\n"
    "  list [-o table|json|yaml]   every user (administrators only)\n"
    "  update NAME [--namespaces NS,...] [--admin | --no-admin]\n"
    "                        change what a user may use (administrators only)\n"
    "  whoami [-o ...]       the user of the token det uses\n"
    "  login [--token-file FILE]   check a token (FILE, or the first line of stdin) and\n"
    "                        keep it for later commands in ~/.kdet/user-token (mode 0600)\n"
    "  logout                forget that token (det token revoke ends it for good)\n"
    "\n"
    "A user may use the namespaces listed (\"*\": all) and no others; an administrator\n"
    "uses all and manages users. The token of 'det deploy local' (and of the chart's\n"
    "Secret kdet-user-token) is the bootstrap administrator \"admin\".\n";

static const char token_usage[] =
    "usage: det token VERB ...\n"
    "\n"
    "verbs:\n"
    "  create [--user NAME] [--description TEXT] [--token-file FILE]\n"
    "                        a new token for yourself (or, for an administrator, NAME),\n"
    "                        printed once on stdout or written to FILE (mode 0600)\n"
    "  list [--user NAME] [-o table|json|yaml]   your tokens (an administrator: everyone's\n"
    "                        or NAME's); never the tokens themselves\n"
    "  revoke ID             end a token (yours; an administrator: anyone's)\n";

#define USER_SPEC(c, f, p, n, fmt)                                                                 \
    {                                                                                              \
        .cmd = c, .usage = user_usage, .flags = f, .pos = p, .minpos = n, .format = fmt,           \
        .api = true                                                                                \
    }
#define TOKEN_SPEC(c, f, p, n, fmt)                                                                \
    {                                                                                              \
        .cmd = c, .usage = token_usage, .flags = f, .pos = p, .minpos = n, .format = fmt,          \
        .api = true                                                                                \
    }

/* "a,b, c" as a JSON array of names; NULL and an error printed for an empty name. */
static json_t *namespaces_arg(const char *s)
{
    json_t *arr = json_array();
    char *copy = kd_xstrdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        size_t n = strlen(t);
        while (n > 0 && t[n - 1] == ' ')
            t[--n] = '\0';
        if (n == 0)
            continue;
        json_array_append_new(arr, json_string(t));
    }
    free(copy);
    return arr;
}

/* Write the token to FILE (0600, replacing it) or print it alone on stdout. */
static int give_token(const char *token, const char *file)
{
    int rc = DET_EXIT_OK;
    if (file == NULL) {
        printf("%s\n", token);
        goto out;
    }
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    size_t n = strlen(token);
    if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, token, n) != (ssize_t)n ||
        write(fd, "\n", 1) != 1) {
        det_err("cannot write the token to %s: %s", file, strerror(errno));
        rc = DET_EXIT_ERROR;
    }
    if (fd >= 0)
        close(fd);
out:
    return rc;
}

static const char *bool_s(const json_t *v)
{
    return json_is_true(v) ? "yes" : "no";
}

static void join_ns(const json_t *ns, char *buf, size_t len)
{
    size_t i;
    json_t *v;
    buf[0] = '\0';
    json_array_foreach(ns, i, v)
    {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s", i ? "," : "", json_string_value(v) ?: "");
    }
}

static int user_create(int argc, char **argv)
{
    static const char *const flags[] = {"--namespaces", "--admin",  "--description",
                                        "--token-file", "--output", NULL};
    static const char *const pos[] = {"NAME", NULL};
    const struct det_verb_spec spec = USER_SPEC("det user create", flags, pos, 1, true);
    struct det_verb v = {0};
    json_t *body = NULL, *ans = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    body = json_pack("{s:s,s:b}", "name", v.a.pos[0], "admin", v.a.admin);
    if (v.a.namespaces != NULL)
        json_object_set_new(body, "namespaces", namespaces_arg(v.a.namespaces));
    if (v.a.description != NULL)
        json_object_set_new(body, "description", json_string(v.a.description));
    rc = det_api_send(&v.api, "POST", "/api/v1/users", body, &ans);
    if (rc != DET_EXIT_OK)
        goto out;
    if (v.fmt != DET_FMT_TABLE && v.a.token_file == NULL) {
        rc = det_print_obj(ans, v.fmt);
        goto out;
    }
    char ns[1024];
    join_ns(det_get(ans, "user_info.namespaces"), ns, sizeof(ns));
    fprintf(stderr, "det: created user %s (admin: %s, namespaces: %s)%s\n", v.a.pos[0],
            bool_s(det_get(ans, "user_info.admin")), ns[0] ? ns : "none",
            v.a.token_file ? "; its token is in the file" : "; its token (shown once):");
    rc = give_token(det_get_str(ans, "token", ""), v.a.token_file);
out:
    json_decref(body);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int user_list(int argc, char **argv)
{
    static const char *const flags[] = {"--output", NULL};
    static const char *const pos[] = {NULL};
    const struct det_verb_spec spec = USER_SPEC("det user list", flags, pos, 0, true);
    struct det_verb v = {0};
    json_t *ans = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if ((rc = det_api_get(&v.api, "/api/v1/users", &ans)) != DET_EXIT_OK)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(json_object_get(ans, "users"), v.fmt);
        goto out;
    }
    static const char *const hd[] = {"NAME", "ADMIN", "NAMESPACES", "TOKENS", "CREATED", NULL};
    struct det_table *t = det_table_new(hd);
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(ans, "users"), i, u)
    {
        char ns[1024], n[24], created[32];
        join_ns(json_object_get(u, "namespaces"), ns, sizeof(ns));
        snprintf(n, sizeof(n), "%lld", (long long)json_integer_value(json_object_get(u, "tokens")));
        det_fmt_time(det_get_str(u, "created_at", NULL), created, sizeof(created));
        const char *cells[] = {det_get_str(u, "name", ""), bool_s(json_object_get(u, "admin")), ns,
                               n, created};
        det_table_row(t, cells);
    }
    det_table_print(t);
    det_table_free(t);
out:
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int user_update(int argc, char **argv)
{
    static const char *const flags[] = {"--namespaces", "--admin", "--no-admin", NULL};
    static const char *const pos[] = {"NAME", NULL};
    const struct det_verb_spec spec = USER_SPEC("det user update", flags, pos, 1, false);
    struct det_verb v = {0};
    json_t *body = json_object(), *ans = NULL;
    struct kd_buf path = KD_BUF_INIT(1024);
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (v.a.admin && v.a.no_admin) {
        det_err("--admin and --no-admin exclude each other (see 'det user update --help')");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (v.a.namespaces == NULL && !v.a.admin && !v.a.no_admin) {
        det_err("nothing to change: give --namespaces, --admin or --no-admin");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (v.a.namespaces != NULL)
        json_object_set_new(body, "namespaces", namespaces_arg(v.a.namespaces));
    if (v.a.admin || v.a.no_admin)
        json_object_set_new(body, "admin", json_boolean(v.a.admin));
    if (kd_buf_puts(&path, "/api/v1/users/") != 0 || det_urlencode(&path, v.a.pos[0]) != 0) {
        det_err("user name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_send(&v.api, "PATCH", kd_buf_str(&path), body, &ans)) != DET_EXIT_OK)
        goto out;
    char ns[1024];
    join_ns(det_get(ans, "user.namespaces"), ns, sizeof(ns));
    printf("user %s: admin: %s, namespaces: %s\n", v.a.pos[0], bool_s(det_get(ans, "user.admin")),
           ns[0] ? ns : "none");
out:
    kd_buf_free(&path);
    json_decref(body);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

/* GET /api/v1/me and print it (table: one line per field). */
static int print_me(struct det_api *api, enum det_format fmt)
{
    json_t *ans = NULL;
    int rc = det_api_get(api, "/api/v1/me", &ans);
    if (rc != DET_EXIT_OK)
        goto out;
    if (fmt != DET_FMT_TABLE) {
        rc = det_print_obj(json_object_get(ans, "user"), fmt);
        goto out;
    }
    char ns[1024];
    join_ns(det_get(ans, "user.namespaces"), ns, sizeof(ns));
    printf("user:       %s\nadmin:      %s\nnamespaces: %s\n", det_get_str(ans, "user.name", ""),
           bool_s(det_get(ans, "user.admin")), ns[0] ? ns : "none");
out:
    json_decref(ans);
    return rc;
}

static int user_whoami(int argc, char **argv)
{
    static const char *const flags[] = {"--output", NULL};
    static const char *const pos[] = {NULL};
    const struct det_verb_spec spec = USER_SPEC("det user whoami", flags, pos, 0, true);
    struct det_verb v = {0};
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc < 0)
        rc = print_me(&v.api, v.fmt);
    det_verb_end(&v);
    return rc;
}

/* The first line of fd, trimmed, into buf; 0 or an exit code (said). */
static int read_token(int fd, const char *what, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char *s = buf;
    while (*s == ' ' || *s == '\t')
        s++;
    memmove(buf, s, strlen(s) + 1);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0 || strpbrk(buf, " \t") != NULL) {
        det_err("no token in %s (one line, no spaces)", what);
        return DET_EXIT_USAGE;
    }
    return DET_EXIT_OK;
}

/* Save the token in the login file (its directory 0700, the file 0600). */
static int save_login(const char *file, const char *token)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            det_err("cannot create %s: %s", dir, strerror(errno));
            return DET_EXIT_ERROR;
        }
    }
    return give_token(token, file);
}

static int user_login(int argc, char **argv)
{
    static const char *const flags[] = {"--token-file", NULL};
    static const char *const pos[] = {NULL};
    const struct det_verb_spec spec = {
        .cmd = "det user login", .usage = user_usage, .flags = flags, .pos = pos};
    struct det_verb v = {0};
    char tok[TOKEN_MAX + 2], file[4096];
    int fd = -1, rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    det_login_file(file, sizeof(file));
    if (file[0] == '\0') {
        det_err("no home directory to keep the token in: set HOME or KDET_LOGIN_FILE");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (v.a.token_file != NULL) {
        fd = open(v.a.token_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            det_err("cannot read %s: %s", v.a.token_file, strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
    } else if (isatty(STDIN_FILENO)) {
        fprintf(stderr, "token: ");
    }
    rc = read_token(fd >= 0 ? fd : STDIN_FILENO, v.a.token_file ? v.a.token_file : "stdin", tok,
                    sizeof(tok));
    if (rc != DET_EXIT_OK)
        goto out;
    /* Check it before keeping it: this process only, no child sees the variable. */
    setenv("KDET_API_TOKEN", tok, 1);
    rc = det_api_open(&v.a, spec.cmd, &v.api);
    unsetenv("KDET_API_TOKEN");
    if (rc != DET_EXIT_OK || (rc = print_me(&v.api, DET_FMT_TABLE)) != DET_EXIT_OK)
        goto out;
    if ((rc = save_login(file, tok)) == DET_EXIT_OK)
        fprintf(stderr, "det: logged in; the token is kept in %s\n", file);
out:
    memset(tok, 0, sizeof(tok));
    if (fd >= 0)
        close(fd);
    det_verb_end(&v);
    return rc;
}

static int user_logout(int argc, char **argv)
{
    static const char *const flags[] = {NULL};
    static const char *const pos[] = {NULL};
    struct det_args a = {0};
    char file[4096];
    int r = det_parse_args(argc, argv, flags, pos, 0, user_usage, "det user logout", &a);
    if (r != 0)
        return det_args_exit(r);
    det_login_file(file, sizeof(file));
    if (file[0] == '\0' || (unlink(file) != 0 && errno == ENOENT)) {
        fprintf(stderr, "det: not logged in\n");
        return DET_EXIT_OK;
    }
    if (access(file, F_OK) == 0) {
        det_err("cannot remove %s: %s", file, strerror(errno));
        return DET_EXIT_ERROR;
    }
    fprintf(stderr, "det: logged out (%s removed)\n", file);
    return DET_EXIT_OK;
}

int det_cmd_user(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"create", NULL, user_create},
        {"list", "ls", user_list},
        {"update", NULL, user_update},
        {"whoami", NULL, user_whoami},
        {"login", NULL, user_login},
        {"logout", NULL, user_logout},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, user_usage, "det user");
}

static int token_create(int argc, char **argv)
{
    static const char *const flags[] = {"--user", "--description", "--token-file", NULL};
    static const char *const pos[] = {NULL};
    const struct det_verb_spec spec = TOKEN_SPEC("det token create", flags, pos, 0, false);
    struct det_verb v = {0};
    json_t *body = json_object(), *ans = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (v.a.user != NULL)
        json_object_set_new(body, "user", json_string(v.a.user));
    if (v.a.description != NULL)
        json_object_set_new(body, "description", json_string(v.a.description));
    if ((rc = det_api_send(&v.api, "POST", "/api/v1/tokens", body, &ans)) != DET_EXIT_OK)
        goto out;
    fprintf(stderr, "det: token %lld of user %s%s\n",
            (long long)json_integer_value(json_object_get(ans, "id")), det_get_str(ans, "user", ""),
            v.a.token_file ? " written to the file" : " (shown once):");
    rc = give_token(det_get_str(ans, "token", ""), v.a.token_file);
out:
    json_decref(body);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int token_list(int argc, char **argv)
{
    static const char *const flags[] = {"--user", "--output", NULL};
    static const char *const pos[] = {NULL};
    const struct det_verb_spec spec = TOKEN_SPEC("det token list", flags, pos, 0, true);
    struct det_verb v = {0};
    json_t *ans = NULL;
    struct kd_buf path = KD_BUF_INIT(1024);
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (kd_buf_puts(&path, "/api/v1/tokens") != 0 ||
        (v.a.user != NULL &&
         (kd_buf_puts(&path, "?user=") != 0 || det_urlencode(&path, v.a.user) != 0))) {
        det_err("user name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_get(&v.api, kd_buf_str(&path), &ans)) != DET_EXIT_OK)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(json_object_get(ans, "tokens"), v.fmt);
        goto out;
    }
    static const char *const hd[] = {"ID", "USER", "DESCRIPTION", "CREATED", "REVOKED", NULL};
    struct det_table *t = det_table_new(hd);
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(ans, "tokens"), i, k)
    {
        char id[24], created[32], revoked[32];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(k, "id")));
        det_fmt_time(det_get_str(k, "created_at", NULL), created, sizeof(created));
        det_fmt_time(det_get_str(k, "revoked_at", NULL), revoked, sizeof(revoked));
        const char *cells[] = {id, det_get_str(k, "user", ""), det_get_str(k, "description", ""),
                               created, revoked};
        det_table_row(t, cells);
    }
    det_table_print(t);
    det_table_free(t);
out:
    kd_buf_free(&path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int token_revoke(int argc, char **argv)
{
    static const char *const flags[] = {NULL};
    static const char *const pos[] = {"ID", NULL};
    const struct det_verb_spec spec = TOKEN_SPEC("det token revoke", flags, pos, 1, false);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char path[96];
    int64_t id = 0;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (kd_parse_i64(v.a.pos[0], &id) != 0 || id <= 0) {
        det_err("token ID \"%s\": a positive integer, as 'det token list' shows", v.a.pos[0]);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    snprintf(path, sizeof(path), "/api/v1/tokens/%lld/revoke", (long long)id);
    if ((rc = det_api_request(&v.api, "POST", path, &ans)) != DET_EXIT_OK)
        goto out;
    printf("token %lld of user %s revoked\n", (long long)id, det_get_str(ans, "user", ""));
out:
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

int det_cmd_token(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"create", NULL, token_create},
        {"list", "ls", token_list},
        {"revoke", NULL, token_revoke},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, token_usage, "det token");
}
