/*
 * The anchor of bench/allreduce: OpenMPI's MPI_Allreduce (float32, sum) over
 * the same sizes, iteration counts and output columns as
 * `dtrain bench allreduce`, so the two tables compare line by line.
 * Built with mpicc by bench/allreduce/run.sh, not by the kdet Makefile.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_BYTES_PER_SIZE (512ull << 20)

static unsigned long long parse_size(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end != NULL && (*end == 'K' || *end == 'k'))
        v <<= 10;
    else if (end != NULL && (*end == 'M' || *end == 'm'))
        v <<= 20;
    else if (end != NULL && (*end == 'G' || *end == 'g'))
        v <<= 30;
    return v;
}

int main(int argc, char **argv)
{
    unsigned long long smin = 4096, smax = 256ull << 20;
    int rank = 0, world = 1, warmup = 2, reps = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc > 2) {
        smin = parse_size(argv[1]);
        smax = parse_size(argv[2]);
    }
    if (argc > 3)
        reps = (int)strtol(argv[3], NULL, 10);
    if (reps < 1)
        reps = 1;
    if (smin == 0 || smax < smin) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce [MIN MAX [REPS]]  (sizes like 4K 256M)\n");
        MPI_Finalize();
        return 2;
    }
    float *buf = calloc(1, (size_t)smax);
    if (buf == NULL) {
        fprintf(stderr, "mpi_allreduce: cannot allocate %llu bytes\n", smax);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
        printf("# MPI_Allreduce: %d ranks, float32, sum\n", world);
        printf("%10s %8s %14s %14s\n", "size", "iters", "latency_us", "algbw_GBps");
        fflush(stdout);
    }
    for (unsigned long long size = smin; size <= smax; size *= 2) {
        int count = (int)(size / 4);
        unsigned long long x = BENCH_BYTES_PER_SIZE / size;
        int n = x < 5 ? 5 : x > 500 ? 500 : (int)x;
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        /* Best of `reps` timed groups, exactly as `dtrain bench allreduce --reps`. */
        int per = n / reps > 0 ? n / reps : 1;
        double secs = 0;
        for (int k = 0; k < reps; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < per; i++)
                MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            double t = (MPI_Wtime() - t0) / per;
            secs = k == 0 || t < secs ? t : secs;
        }
        n = per * reps;
        if (rank == 0) {
            char hs[32];
            if (size >= (1u << 20))
                snprintf(hs, sizeof(hs), "%lluM", size >> 20);
            else
                snprintf(hs, sizeof(hs), "%lluK", size >> 10);
            printf("%10s %8d %14.1f %14.3f\n", hs, n, secs * 1e6, (double)size / secs / 1e9);
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
