/* kd_par_for: a shared counter hands out the indexes; the caller works too. */
#include "core/par.h"

#include <pthread.h>
#include <stdatomic.h>

struct par {
    atomic_size_t next;
    size_t n;
    void (*fn)(size_t i, void *ud);
    void *ud;
};

static void *par_run(void *arg)
{
    struct par *p = arg;
    for (size_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;)
        p->fn(i, p->ud);
    return NULL;
}

void kd_par_for(size_t n, int threads, void (*fn)(size_t i, void *ud), void *ud)
{
    struct par p = {.n = n, .fn = fn, .ud = ud};
    atomic_init(&p.next, 0);
    if (threads > KD_PAR_MAX)
        threads = KD_PAR_MAX;
    if ((size_t)threads > n)
        threads = (int)n;
    pthread_t tid[KD_PAR_MAX];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, par_run, &p) != 0)
            break; /* fewer threads: the ones running take the rest */
        started++;
    }
    par_run(&p);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}
