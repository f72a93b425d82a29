/*
 * libFuzzer target for the XML of S3 answers (lib/storage/s3xml.c): the
 * input is what a server sent back (a ListObjectsV2 page, an
 * InitiateMultipartUpload or CompleteMultipartUpload result, an Error
 * document, a DeleteObjects result). Checked on every input:
 *  - an element's text comes back whole: its length is what strlen says
 *    (no NUL from a reference cuts it short), it fits the buffer, a larger
 *    buffer gives the same text, and the text escaped again reads back
 *    unchanged; a failure leaves "";
 *  - a list page that parses, written out again as XML, parses to the same
 *    keys, sizes, truncation and continuation token; a truncated page
 *    always has a token; a refusal says why;
 *  - Error and DeleteObjects answers give NUL-terminated code, message and
 *    key within their buffers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "storage/s3xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_s3xml: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

static void check_get(const char *p, const char *end, const char *tag)
{
    char small[16], big[4096];
    size_t ns = 99, nb = 99;
    const char *rs = kd_storage__xml_get(p, end, tag, small, sizeof(small), &ns);
    const char *rb = kd_storage__xml_get(p, end, tag, big, sizeof(big), &nb);
    if (rb == NULL) {
        if (big[0] != '\0' || nb != 0)
            FAIL("<%s>: a failure leaves text behind", tag);
        if (rs != NULL)
            FAIL("<%s>: a small buffer takes what a large one does not", tag);
        return;
    }
    if (rb <= p || rb > end)
        FAIL("<%s>: the end is outside the input", tag);
    if (strlen(big) != nb || nb >= sizeof(big))
        FAIL("<%s>: %zu bytes decoded, strlen says %zu", tag, nb, strlen(big));
    if (rs != NULL && (rs != rb || ns != nb || strcmp(small, big) != 0))
        FAIL("<%s>: the buffer's size changed the text", tag);
    if (rs == NULL && nb < sizeof(small) - 4)
        FAIL("<%s>: %zu bytes do not fit %zu", tag, nb, sizeof(small));
    /* Escaped again, the text reads back unchanged. */
    struct kd_buf b = KD_BUF_INIT(64u << 10);
    char again[4096];
    size_t na = 0;
    if (kd_buf_printf(&b, "<%s>", tag) != 0 || kd_storage__xml_escape(&b, big) != 0 ||
        kd_buf_printf(&b, "</%s>", tag) != 0)
        FAIL("cannot escape");
    if (kd_storage__xml_get(b.data, b.data + b.len, tag, again, sizeof(again), &na) == NULL ||
        na != nb || strcmp(again, big) != 0)
        FAIL("<%s>: \"%s\" escaped as %s reads back as \"%s\"", tag, big, kd_buf_str(&b), again);
    kd_buf_free(&b);
}

static void list_free(struct kd_storage_list *l)
{
    kd_storage_list_free(l);
}

static void check_list(const char *p, size_t len, const char *pfx)
{
    struct kd_storage_list l = {0}, l2 = {0};
    struct kd_buf b = KD_BUF_INIT(64u << 20);
    char token[2048], token2[2048], err[KD_ERRLEN] = "";
    bool trunc = false, trunc2 = false;
    int rc = kd_storage__xml_list_page(p, len, pfx, &l, &trunc, token, sizeof(token), err);
    if (rc != 0) {
        if (err[0] == '\0' || (rc != KD_EPROTO && rc != KD_ENOMEM && rc != KD_ETOOBIG))
            FAIL("a list page refused with %d and no reason", rc);
        list_free(&l);
        return;
    }
    if (trunc && token[0] == '\0')
        FAIL("a truncated page without a token");
    /* Written out again, the page parses to the same. */
    int brc = kd_buf_printf(&b, "<ListBucketResult><IsTruncated>%s</IsTruncated>",
                            trunc ? "true" : "false");
    if (trunc) {
        brc |= kd_buf_puts(&b, "<NextContinuationToken>");
        brc |= kd_storage__xml_escape(&b, token);
        brc |= kd_buf_puts(&b, "</NextContinuationToken>");
    }
    for (size_t i = 0; i < l.n; i++) {
        brc |= kd_buf_puts(&b, "<Contents><Key>");
        brc |= kd_storage__xml_escape(&b, pfx);
        brc |= kd_storage__xml_escape(&b, l.objs[i].key);
        brc |= kd_buf_printf(&b, "</Key><Size>%llu</Size></Contents>",
                             (unsigned long long)l.objs[i].size);
    }
    brc |= kd_buf_puts(&b, "</ListBucketResult>");
    if (brc != 0)
        FAIL("cannot write the page again");
    rc = kd_storage__xml_list_page(b.data, b.len, pfx, &l2, &trunc2, token2, sizeof(token2), err);
    if (rc != 0)
        FAIL("a page written again does not parse: %s\n%s", err, kd_buf_str(&b));
    if (trunc2 != trunc || (trunc && strcmp(token, token2) != 0) || l2.n != l.n)
        FAIL("a page written again parses to another page:\n%s", kd_buf_str(&b));
    for (size_t i = 0; i < l.n; i++)
        if (strcmp(l.objs[i].key, l2.objs[i].key) != 0 || l.objs[i].size != l2.objs[i].size)
            FAIL("entry %zu changed: %s %llu", i, l.objs[i].key,
                 (unsigned long long)l.objs[i].size);
    kd_buf_free(&b);
    list_free(&l);
    list_free(&l2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tags[] = {"Key",      "Size",        "Code", "Message",
                                       "UploadId", "IsTruncated", "ETag", "NextContinuationToken"};
    static const char *const pfxs[] = {"", "ckpt/", "a&b'/"};
    static bool init;
    char code[128], msg[512], key[1024];
    if (!init) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        init = true;
    }
    const char *p = (const char *)data, *end = p + size;
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
        check_get(p, end, tags[i]);
    check_list(p, size, pfxs[size % 3]);
    kd_storage__xml_error(p, size, code, sizeof(code), msg, sizeof(msg));
    if (strnlen(code, sizeof(code)) == sizeof(code) || strnlen(msg, sizeof(msg)) == sizeof(msg))
        FAIL("an Error's code or message is not terminated");
    if (kd_storage__xml_delete_error(p, size, key, sizeof(key), code, sizeof(code)) &&
        (strnlen(key, sizeof(key)) == sizeof(key) || strnlen(code, sizeof(code)) == sizeof(code)))
        FAIL("a DeleteObjects error's key or code is not terminated");
    return 0;
}
