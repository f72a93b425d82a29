/* Rank-prefixed line output: whole lines, splits, partial lines, UTF-8 cuts, write errors. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../launcher/lines.h"

static int fd = -1;

static int setup(void **state)
{
    (void)state;
    fd = memfd_create("lines", 0);
    return fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    close(fd);
    return 0;
}

/* Everything written so far; the file is emptied. Caller frees. */
static char *take(void)
{
    off_t n = lseek(fd, 0, SEEK_CUR);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(fd, s, (size_t)n, 0), n);
    s[n] = '\0';
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    return s;
}

static void expect(const char *want)
{
    char *got = take();
    assert_string_equal(got, want);
    free(got);
}

static void test_whole_lines(void **state)
{
    (void)state;
    struct kd_lines l;
    kd_lines_init(&l, fd, "[rank=3] ", 0);
    assert_int_equal(kd_lines_feed(&l, "a\nbb\n\n", 6), 0);
    expect("[rank=3] a\n[rank=3] bb\n[rank=3] \n");
    assert_int_equal(kd_lines_finish(&l), 0);
    expect("");
    assert_int_equal(l.lines, 3);
    kd_lines_free(&l);
}

static void test_split_reads(void **state)
{
    (void)state;
    struct kd_lines l;
    kd_lines_init(&l, fd, "[rank=0] ", 0);
    assert_int_equal(kd_lines_feed(&l, "hel", 3), 0);
    expect("");
    assert_int_equal(kd_lines_feed(&l, "lo\nwor", 6), 0);
    expect("[rank=0] hello\n");
    assert_int_equal(kd_lines_feed(&l, "ld\nlast", 7), 0);
    expect("[rank=0] world\n");
    assert_int_equal(kd_lines_finish(&l), 0);
    expect("[rank=0] last\n");
    kd_lines_free(&l);
}

static void test_long_lines(void **state)
{
    (void)state;
    struct kd_lines l;
    kd_lines_init(&l, fd, "[r] ", 10);
    /* 25 bytes: pieces of 10, 10 and 5. */
    assert_int_equal(kd_lines_feed(&l, "0123456789abcdefghijABCDE\n", 26), 0);
    expect("[r] 0123456789\n[r] abcdefghij\n[r] ABCDE\n");
    /* Exactly max_line: one line, no empty piece, also across reads. */
    assert_int_equal(kd_lines_feed(&l, "0123456789\n", 11), 0);
    expect("[r] 0123456789\n");
    assert_int_equal(kd_lines_feed(&l, "01234", 5), 0);
    assert_int_equal(kd_lines_feed(&l, "56789", 5), 0);
    expect("");
    assert_int_equal(kd_lines_feed(&l, "\nx", 2), 0);
    expect("[r] 0123456789\n");
    assert_int_equal(kd_lines_finish(&l), 0);
    expect("[r] x\n");
    kd_lines_free(&l);
}

static void test_utf8_cut(void **state)
{
    (void)state;
    struct kd_lines l;
    kd_lines_init(&l, fd, "", 5);
    /* "abcd" + e-acute (2 bytes): cutting at 5 would split it. */
    assert_int_equal(kd_lines_feed(&l, "abcd\xc3\xa9z\n", 8), 0);
    expect("abcd\n\xc3\xa9z\n");
    /* A 3-byte sequence at the end of a piece. */
    assert_int_equal(kd_lines_feed(&l, "ab\xe2\x82\xac\xe2\x82\xac\n", 9), 0);
    expect("ab\xe2\x82\xac\n\xe2\x82\xac\n");
    kd_lines_free(&l);
}

/* Random texts fed in random pieces give the reference output. */
static void test_random_chunks(void **state)
{
    (void)state;
    srand(42);
    for (int round = 0; round < 200; round++) {
        const size_t max = 1 + (size_t)(rand() % 16);
        char text[2048];
        size_t n = (size_t)(rand() % (int)sizeof(text));
        for (size_t i = 0; i < n; i++)
            text[i] = rand() % 6 == 0 ? '\n' : (char)('a' + rand() % 26);
        /* Reference: every line in pieces of max bytes (an empty line is one piece). */
        char *want = malloc(n * 8 + 64);
        assert_non_null(want);
        size_t w = 0, start = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i < n && text[i] != '\n')
                continue;
            if (i == n && i == start)
                break; /* no unfinished line */
            size_t len = i - start;
            size_t off = 0;
            do {
                size_t piece = len - off < max ? len - off : max;
                memcpy(want + w, "P ", 2);
                memcpy(want + w + 2, text + start + off, piece);
                w += 2 + piece;
                want[w++] = '\n';
                off += piece;
            } while (off < len);
            start = i + 1;
        }
        want[w] = '\0';
        struct kd_lines l;
        kd_lines_init(&l, fd, "P ", max);
        size_t pos = 0;
        while (pos < n) {
            size_t k = 1 + (size_t)(rand() % 40);
            if (k > n - pos)
                k = n - pos;
            assert_int_equal(kd_lines_feed(&l, text + pos, k), 0);
            pos += k;
        }
        assert_int_equal(kd_lines_finish(&l), 0);
        kd_lines_free(&l);
        char *got = take();
        if (strcmp(got, want) != 0)
            fail_msg("round %d max %zu: output differs from the reference", round, max);
        free(got);
        free(want);
    }
}

static void test_write_error(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    struct kd_lines l;
    kd_lines_init(&l, p[1], "[rank=1] ", 0);
    assert_int_equal(kd_lines_feed(&l, "lost\n", 5), -EPIPE);
    /* Later output is consumed and dropped, and the error stays. */
    assert_int_equal(kd_lines_feed(&l, "more\nand more", 13), -EPIPE);
    assert_int_equal(kd_lines_finish(&l), -EPIPE);
    kd_lines_free(&l);
    close(p[1]);
}

static void test_write_all_nonblocking(void **state)
{
    (void)state;
    /* A non-blocking pipe that fills up: kd_write_all waits instead of failing. */
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        char buf[4096];
        size_t total = 0;
        usleep(100000);
        for (;;) {
            ssize_t r = read(p[0], buf, sizeof(buf));
            if (r == 0)
                break;
            if (r > 0)
                total += (size_t)r;
            else
                usleep(1000);
        }
        _exit(total == 1 << 20 ? 0 : 1);
    }
    close(p[0]);
    char *big = calloc(1, 1 << 20);
    assert_non_null(big);
    assert_int_equal(kd_write_all(p[1], big, 1 << 20), 0);
    close(p[1]);
    free(big);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Which worker printed a line that an upstream launcher passed on. */
static void test_upstream_rank(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int rank;
        size_t skip;
    } cases[] = {
        {"[rank=0] hello", 0, 9},
        {"[rank=17] x", 17, 10},
        {"[default0]:[rank=3] loss 0.5", 3, 20},   /* torchrun --tee */
        {"[1,0]<stdout>:[rank=1] epoch 1", 1, 23}, /* horovodrun */
        {"[rank=2]", 2, 8},                        /* nothing after it */
        {"[rank=1073741824] big", 1073741824, 18}, /* 2^30, the API's most */
        {"[rank=1073741825] too big", -1, 0},
        {"[rank=99999999999] x", -1, 0}, /* 11 digits */
        {"[rank=] x", -1, 0},
        {"[rank=x] x", -1, 0},
        {"[rank=4 x", -1, 0}, /* no bracket */
        {"WARNING:torch.distributed.run: setting OMP_NUM_THREADS", -1, 0},
        {"", -1, 0},
        {"[rank=", -1, 0},
        {"[rank=5", -1, 0},
        {"text [rank=6] later", 6, 14}, /* within the first bytes */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t skip = 99;
        int r = kd_lines_upstream_rank(cases[i].line, strlen(cases[i].line), &skip);
        if (r != cases[i].rank || skip != cases[i].skip)
            fail_msg("\"%s\": got rank %d skip %zu, want %d and %zu", cases[i].line, r, skip,
                     cases[i].rank, cases[i].skip);
    }
    /* beyond the first KD_LINES_UPSTREAM_TAG_MAX bytes it is the worker's own text */
    char far[256];
    memset(far, 'x', sizeof(far));
    memcpy(far + KD_LINES_UPSTREAM_TAG_MAX, "[rank=1] y", 10);
    size_t skip = 99;
    assert_int_equal(kd_lines_upstream_rank(far, sizeof(far), &skip), -1);
    assert_int_equal(skip, 0);
    /* the line need not end in NUL: only n bytes are read */
    assert_int_equal(kd_lines_upstream_rank("[rank=12]", 8, &skip), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_whole_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utf8_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_chunks, setup, teardown),
        cmocka_unit_test(test_write_error),
        cmocka_unit_test(test_write_all_nonblocking),
        cmocka_unit_test(test_upstream_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
