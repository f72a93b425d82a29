/*
 * libFuzzer target for lib/http's screening of what a client sends, before
 * libmicrohttpd frames anything: the input is the bytes of a connection.
 * Checked against rules written out again here:
 *  - the front door's verdict on the request line (door.c screen_line):
 *    a complete first line is let in exactly when it is METHOD SP TARGET
 *    SP HTTP/d.d; an incomplete one waits exactly when some ending would
 *    make it one; a verdict on a prefix never changes as bytes arrive;
 *  - the head (http.c screen_head): exactly one framing of the body
 *    passes (one Content-Length of 1 to 18 digits, or Transfer-Encoding:
 *    chunked on HTTP/1.1, or neither); two lengths, CL with TE, an unknown
 *    coding, a header name that is not a token, too many lines are refused
 *    with the status the rules give;
 *  - the request target (screen_target): raw control bytes, spaces and
 *    %00 anywhere, or encoded control bytes in the path, are refused; a
 *    target let through decodes (with libmicrohttpd's own decoder) to a
 *    path with no NUL or control byte;
 *  - every reason given is printable ASCII (it is logged and sent back).
 */
#include "../../lib/http/door.c"
#include "../../lib/http/gzip.c"
#include "../../lib/http/http.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_http: " __VA_ARGS__);                                                \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define MAX_HEADERS 100

static void printable_why(const char *what, const char *why, bool refused)
{
    if (refused && why[0] == '\0')
        FAIL("%s refused without a reason", what);
    if (!refused && why[0] != '\0')
        FAIL("%s let through with a reason: %s", what, why);
    for (const char *p = why; *p != '\0'; p++)
        if (*p < 0x20 || *p > 0x7e)
            FAIL("%s: the reason holds byte 0x%02X", what, (unsigned char)*p);
}

/* ---- the request line ------------------------------------------------------------------------ */

static bool is_tchar(unsigned char c)
{
    return isalnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A whole request line, without its line end: METHOD SP TARGET SP HTTP/d.d (RFC 9112). */
static bool line_ok(const char *b, size_t n)
{
    size_t i = 0, m, t;
    if (n > 0 && b[n - 1] == '\r')
        n--;
    for (m = 0; i < n && is_tchar((unsigned char)b[i]); i++, m++)
        ;
    if (m == 0 || m > DOOR_METHOD_MAX || i >= n || b[i++] != ' ')
        return false;
    for (t = 0; i < n && (unsigned char)b[i] > 0x20 && b[i] != 0x7f; i++, t++)
        ;
    if (t == 0 || i >= n || b[i++] != ' ')
        return false;
    return n - i == 8 && memcmp(b + i, "HTTP/", 5) == 0 && isdigit((unsigned char)b[i + 5]) &&
           b[i + 6] == '.' && isdigit((unsigned char)b[i + 7]);
}

/* Whether the first line of b (after empty lines) is complete and valid: 1, complete and
 * invalid: 0, not complete: -1. */
static int first_line(const char *b, size_t n)
{
    size_t s = 0;
    while (s < n && (b[s] == '\r' || b[s] == '\n'))
        s++;
    const char *nl = memchr(b + s, '\n', n - s);
    if (nl == NULL)
        return -1;
    return line_ok(b + s, (size_t)(nl - (b + s)));
}

static void check_line(const char *b, size_t n)
{
    static const char ending[] = "GET / HTTP/1.1\r\n";
    char why[200];
    if (n > DOOR_PEEK)
        n = DOOR_PEEK;
    enum line_verdict v = screen_line(b, n, why, sizeof(why));
    printable_why("the request line", why, v == LINE_BAD);
    int ref = first_line(b, n);
    if (ref == 1 && v != LINE_OK)
        FAIL("a valid request line is not let in (verdict %d: %s)", v, why);
    if (ref == 0 && v != LINE_BAD)
        FAIL("an invalid request line is not refused (verdict %d)", v);
    if (ref == -1) {
        /* Incomplete: it waits when one of the endings of a request line completes it. */
        bool completes = false;
        char *tmp = malloc(n + sizeof(ending));
        if (tmp == NULL)
            return;
        memcpy(tmp, b, n);
        for (size_t k = 0; k < sizeof(ending) - 1 && !completes; k++) {
            memcpy(tmp + n, ending + k, sizeof(ending) - 1 - k);
            completes = first_line(tmp, n + sizeof(ending) - 1 - k) == 1;
        }
        free(tmp);
        if (v == LINE_OK)
            FAIL("an incomplete request line is let in");
        if (completes != (v == LINE_MORE))
            FAIL("an incomplete request line %s, yet %s", completes ? "can be completed" : "cannot",
                 v == LINE_MORE ? "it waits" : "it is refused");
    }
    /* A verdict never changes as more bytes arrive. */
    enum line_verdict before = LINE_MORE;
    for (size_t k = 0; k <= n && k <= 300; k++) {
        enum line_verdict now = screen_line(b, k, why, sizeof(why));
        if (before != LINE_MORE && now != before)
            FAIL("the verdict changed from %d to %d at byte %zu", before, now, k);
        before = now;
    }
}

/* ---- the head ------------------------------------------------------------------------------ */

/* The rules of the head, once more: the status to refuse with, or 0. */
static int head_rules(const char *version, const struct head_line *h, size_t n)
{
    size_t ncl = 0, nte = 0;
    const char *cl = NULL, *te = NULL;
    if (n > MAX_HEADERS)
        return 431;
    for (size_t i = 0; i < n; i++) {
        if (h[i].name[0] == '\0')
            return 400;
        for (const char *c = h[i].name; *c != '\0'; c++)
            if (!is_tchar((unsigned char)*c))
                return 400;
        if (strcasecmp(h[i].name, "content-length") == 0)
            ncl++, cl = h[i].value;
        if (strcasecmp(h[i].name, "transfer-encoding") == 0)
            nte++, te = h[i].value;
    }
    if (ncl > 1 || nte > 1 || (cl != NULL && te != NULL))
        return 400;
    if (cl != NULL) {
        size_t len = strlen(cl);
        if (len == 0 || len > 18)
            return 400;
        for (size_t i = 0; i < len; i++)
            if (!isdigit((unsigned char)cl[i]))
                return 400;
    }
    if (te != NULL && strcmp(version, "HTTP/1.0") == 0)
        return 400;
    if (te != NULL && strcasecmp(te, "chunked") != 0)
        return 501;
    return 0;
}

static void check_head(char *text, size_t n)
{
    struct head_line h[MAX_HEADERS + 2] = {{0}};
    size_t nh = 0;
    char *end = text + n, *p, *nl, why[WHY_LEN];
    /* The request line's third word is the version. */
    nl = memchr(text, '\n', n);
    if (nl == NULL)
        return;
    *nl = '\0';
    char *sp = strchr(text, ' '), *version = sp != NULL ? strchr(sp + 1, ' ') : NULL;
    version = version != NULL ? version + 1 : "HTTP/1.1";
    size_t vl = strlen(version);
    if (vl > 0 && version[vl - 1] == '\r')
        version[vl - 1] = '\0';
    /* Header lines as libmicrohttpd hands them: name, and value without surrounding blanks. */
    for (p = nl + 1; p < end && nh < MAX_HEADERS + 2; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            nl = end;
        *nl = '\0';
        if (nl > p && nl[-1] == '\r')
            nl[-1] = '\0';
        if (*p == '\0')
            break;
        char *colon = strchr(p, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t l = strlen(v);
        while (l > 0 && (v[l - 1] == ' ' || v[l - 1] == '\t'))
            v[--l] = '\0';
        h[nh].name = p;
        h[nh].value = v;
        nh++;
    }
    int got = screen_head(version, h, nh, MAX_HEADERS, why, sizeof(why));
    int want = head_rules(version, h, nh);
    printable_why("the head", why, got != 0);
    if (got != want)
        FAIL("the head gets %d, the rules say %d (%s)", got, want, why);
    for (size_t i = 0; got == 0 && i < nh; i++) {
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            unsigned long long v = 0;
            for (const char *c = h[i].value; *c != '\0'; c++)
                v = v * 10 + (unsigned)(*c - '0');
            if (strtoull(h[i].value, NULL, 10) != v)
                FAIL("Content-Length %s reads as another number", h[i].value);
        }
    }
}

/* ---- the target ---------------------------------------------------------------------------- */

static void check_target(const char *b, size_t n)
{
    char why[WHY_LEN];
    /* The second word of the first line, as libmicrohttpd hands it to the URI callback. */
    const char *sp = memchr(b, ' ', n);
    if (sp == NULL)
        return;
    const char *t = sp + 1, *tend = t;
    while (tend < b + n && *tend != ' ' && *tend != '\n')
        tend++;
    char *raw = strndup(t, (size_t)(tend - t));
    if (raw == NULL)
        return;
    int got = screen_target(raw, why, sizeof(why));
    printable_why("the target", why, got != 0);
    if (got != 0 && got != 400)
        FAIL("the target gets %d", got);
    /* The rules: no raw byte <= 0x20 or 0x7f; in the path no %XX below 0x20 or 0x7f; no %00. */
    bool query = false, bad = false;
    size_t len = strlen(raw);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)raw[i];
        query |= c == '?';
        if (c <= 0x20 || c == 0x7f)
            bad = true;
        if (c == '%' && isxdigit((unsigned char)raw[i + 1]) &&
            isxdigit((unsigned char)raw[i + 2])) {
            unsigned v = (unsigned)(hexval(raw[i + 1]) * 16 + hexval(raw[i + 2]));
            if (v == 0 || (!query && (v < 0x20 || v == 0x7f)))
                bad = true;
        }
    }
    if (bad != (got != 0))
        FAIL("target \"%.80s\": %s, the rules say %s", raw, got ? "refused" : "let through",
             bad ? "refuse" : "let through");
    if (got == 0) {
        /* The path as libmicrohttpd decodes it is whole: no NUL cut it, no control byte. */
        char *q = strchr(raw, '?');
        if (q != NULL)
            *q = '\0';
        size_t dl = MHD_http_unescape(raw);
        if (strlen(raw) != dl)
            FAIL("a decoded path is cut short by a NUL");
        for (size_t i = 0; i < dl; i++)
            if ((unsigned char)raw[i] < 0x20 || raw[i] == 0x7f)
                FAIL("a decoded path holds byte 0x%02X", (unsigned char)raw[i]);
    }
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        init = true;
    }
    char *b = malloc(size + 1);
    if (b == NULL)
        return 0;
    memcpy(b, data, size);
    b[size] = '\0';
    check_line(b, size);
    check_target(b, size);
    check_head(b, size);
    free(b);
    return 0;
}
