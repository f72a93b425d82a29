/*
 * The XML of S3's answers and request bodies (internal to lib/storage):
 * one element's text with its entities decoded, text escaped for a body,
 * a ListObjectsV2 page, an Error document's code and message, the first
 * <Error> of a DeleteObjects answer. Pure functions over bytes from the
 * network: whatever a server sends, they fail cleanly or keep to the
 * caller's buffers. tests/lib/storage/fuzz_s3xml.c feeds them arbitrary
 * answers.
 */
#ifndef KD_STORAGE_S3XML_H
#define KD_STORAGE_S3XML_H

#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"
#include "storage/storage.h"

/**
 * The text of the first <tag>...</tag> in [p, end) into out (len bytes,
 * NUL-terminated), with the five predefined entities and numeric character
 * references (&#N; &#xH;, written as UTF-8) decoded; *n (may be NULL) gets
 * its length. Returns a pointer past the closing tag, or NULL when the
 * element is absent, its text does not fit, or a reference names no XML
 * character (&#0;, a surrogate, past U+10FFFF, not a number), so that a
 * decoded text never holds a NUL (out is "" then). An unknown entity stays
 * as written.
 */
const char *kd_storage__xml_get(const char *p, const char *end, const char *tag, char *out,
                                size_t len, size_t *n);

/** Append s to b with & < > " ' escaped. 0 or KD_ETOOBIG (b's cap). */
int kd_storage__xml_escape(struct kd_buf *b, const char *s) KD_WUR;

/**
 * One ListObjectsV2 page: each <Contents> whose Key starts with keypfx is
 * added to out without that prefix (keys that do not are skipped), with
 * its Size. *truncated: <IsTruncated>true</IsTruncated>; then token
 * (tokenlen bytes) gets <NextContinuationToken>, which must be there and
 * not empty. 0, KD_EPROTO (a malformed entry or a truncated page without a
 * token), KD_ENOMEM or KD_ETOOBIG (out is full), with detail in err.
 */
int kd_storage__xml_list_page(const char *body, size_t len, const char *keypfx,
                              struct kd_storage_list *out, bool *truncated, char *token,
                              size_t tokenlen, char *err) KD_WUR;

/** The Code and Message of an Error document ("" when absent or unreadable). */
void kd_storage__xml_error(const char *body, size_t len, char *code, size_t codelen, char *msg,
                           size_t msglen);

/**
 * The first <Error> of a DeleteObjects answer: true with its Key and Code
 * ("" when absent), false when the answer holds none.
 */
bool kd_storage__xml_delete_error(const char *body, size_t len, char *key, size_t keylen,
                                  char *code, size_t codelen);

#endif
