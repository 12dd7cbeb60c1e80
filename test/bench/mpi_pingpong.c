/* MPI ping-pong between ranks 0 and 1 (a benchmark, not a test): one-way
 * latency (half the round trip) and bandwidth for each size, with the data
 * of the first and last exchange checked. The transport is whatever mpirun
 * selects; doc/guides/perf.md gives the command lines that compare Shunt
 * (Open MPI's OFI MTL and BTL) with Open MPI's shared memory (vader) and
 * UCX. Usage: mpirun -np 2 ... mpi-pingpong [iterations] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "mpi-pingpong: run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long iters = argc > 1 ? atol(argv[1]) : 10000;
    if (iters < 1)
        iters = 1;
    static const int sizes[] = {8, 64, 512, 4096, 65536, 1 << 20};
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap), *chk = malloc(cap);
    if (!buf || !chk)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int peer = 1 - rank;
    if (rank == 0)
        printf("%10s %14s %14s\n", "bytes", "usec/one-way", "MB/s");
    for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        long reps = n >= 65536 ? iters / 10 + 1 : iters;
        for (int k = 0; k < n; k++)
            buf[k] = (unsigned char)(k * 7 + s);
        memcpy(chk, buf, (size_t)n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < reps; i++) {
            if (rank == 0) {
                MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (memcmp(buf, chk, (size_t)n)) {
            fprintf(stderr, "mpi-pingpong: rank %d: %d-byte message corrupt\n", rank, n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (rank == 0) {
            double one_way = t / (2.0 * (double)reps);
            printf("%10d %14.3f %14.1f\n", n, one_way * 1e6, (double)n / one_way / 1e6);
        }
    }
    free(buf);
    free(chk);
    MPI_Finalize();
    return 0;
}
