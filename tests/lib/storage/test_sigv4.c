/*
 * SigV4 signing, checked against the worked example of the S3 API
 * documentation (GET /test.txt with a Range header, 24 May 2013): the
 * request is built by the s3 backend's own setup code, sent to a local
 * listener standing in for examplebucket.s3.amazonaws.com, and the
 * Authorization header it receives must carry the documented signature.
 * s3rver does not verify signatures, so this is where signing is tested.
 */
#include "../../../lib/storage/s3.c"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>

#include <cmocka.h>

#define EXAMPLE_SIG "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

struct listener {
    int fd, port;
    char request[8192];
};

static void *serve_one(void *arg)
{
    struct listener *l = arg;
    size_t off = 0;
    int c = accept(l->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    while (off + 1 < sizeof(l->request)) {
        ssize_t r = read(c, l->request + off, sizeof(l->request) - 1 - off);
        if (r <= 0)
            break;
        off += (size_t)r;
        l->request[off] = '\0';
        if (strstr(l->request, "\r\n\r\n") != NULL)
            break;
    }
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (write(c, resp, sizeof(resp) - 1) < 0)
        l->request[0] = '\0';
    close(c);
    return NULL;
}

static void test_documented_example(void **state)
{
    (void)state;
    struct listener l;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    struct s3 s;
    struct s3_req r;
    pthread_t th;
    char connect_to[128];
    struct curl_slist *ct = NULL;
    CURL *e;

    memset(&l, 0, sizeof(l));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l.fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l.fd >= 0);
    assert_int_equal(bind(l.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(l.fd, (struct sockaddr *)&a, &alen), 0);
    assert_int_equal(listen(l.fd, 1), 0);
    l.port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&th, NULL, serve_one, &l), 0);

    memset(&s, 0, sizeof(s));
    kd_strlcpy(s.creds.access_key_id, "AKIAIOSFODNN7EXAMPLE", sizeof(s.creds.access_key_id));
    kd_strlcpy(s.creds.secret_access_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
               sizeof(s.creds.secret_access_key));
    kd_strlcpy(s.sigv4, "aws:amz:us-east-1:s3", sizeof(s.sigv4));
    s.timeout_ms = 10000;
    req_init(&r, "GET");
    r.url = strdup("http://examplebucket.s3.amazonaws.com/test.txt");
    kd_strlcpy(r.range, "bytes=0-9", sizeof(r.range));
    e = curl_easy_init();
    assert_non_null(e);
    assert_int_equal(req_setup(&s, &r, e, "20130524T000000Z"), 0);
    /* reach the listener while the Host header stays the documented one */
    snprintf(connect_to, sizeof(connect_to), "examplebucket.s3.amazonaws.com:80:127.0.0.1:%d",
             l.port);
    ct = curl_slist_append(NULL, connect_to);
    curl_easy_setopt(e, CURLOPT_CONNECT_TO, ct);
    curl_easy_setopt(e, CURLOPT_USERAGENT, NULL);
    r.batch = &(struct s3_batch){0};
    r.easy = e;
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    pthread_join(th, NULL);
    close(l.fd);

    if (strstr(l.request, "Signature=" EXAMPLE_SIG) == NULL)
        fail_msg("signature differs from the documented one; request was:\n%s", l.request);
    assert_non_null(strstr(l.request, "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                                      "aws4_request"));
    assert_non_null(strstr(l.request, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"));
    /* the secret itself never travels */
    assert_null(strstr(l.request, "wJalrXUtnFEMI"));
    curl_slist_free_all(ct);
    curl_easy_cleanup(e);
    req_free(&r);
}

static void test_uri_encoding(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(1024);
    assert_int_equal(uri_encode(&b, "dir with spaces/ü+&=~_.-", 1), 0);
    assert_string_equal(kd_buf_str(&b), "dir%20with%20spaces/%C3%BC%2B%26%3D~_.-");
    kd_buf_reset(&b);
    assert_int_equal(uri_encode(&b, "a/b", 0), 0);
    assert_string_equal(kd_buf_str(&b), "a%2Fb");
    kd_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documented_example),
        cmocka_unit_test(test_uri_encoding),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
