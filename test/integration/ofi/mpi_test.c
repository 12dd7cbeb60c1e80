/* An MPI program over whatever transport mpirun forces (mpi_run.sh forces
 * Open MPI's OFI MTL on the "shunt" provider): point-to-point of many sizes
 * in a ring with every byte checked (blocking, nonblocking, synchronous),
 * MPI_ANY_SOURCE / MPI_ANY_TAG with the status checked, MPI_Probe and
 * MPI_Get_count, out-of-order tags, then MPI_Bcast, MPI_Allreduce and
 * MPI_Alltoall with their results checked, and with MPI_TEST_ONE_SIDED=1 the
 * one-sided operations below. Any mismatch aborts the job with
 * a message. Prints "rank R ok" per rank on success. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            MPI_Abort(MPI_COMM_WORLD, 1);                                             \
        }                                                                             \
    } while (0)

static uint8_t pattern(int from, int seq, size_t k) { return (uint8_t)(from * 131 + seq * 17 + k * 7 + (k >> 8)); }

static void fill(uint8_t *b, size_t n, int from, int seq)
{
    for (size_t k = 0; k < n; k++)
        b[k] = pattern(from, seq, k);
}

static void expect(const uint8_t *b, size_t n, int from, int seq)
{
    for (size_t k = 0; k < n; k++)
        CHECK(b[k] == pattern(from, seq, k), "message %d from %d, %zu bytes: byte %zu is %u, not %u", seq, from, n,
              k, b[k], pattern(from, seq, k));
}

static const size_t sizes[] = {0, 1, 7, 64, 991, 992, 993, 1024, 4095, 4096, 65536, 65537, 1 << 20, 4 << 20};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

/* Ring: send to rank+1, receive from rank-1, each size with three kinds of send. */
static void ring(uint8_t *sbuf, uint8_t *rbuf)
{
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        for (int kind = 0; kind < 3; kind++) {
            int seq = i * 3 + kind;
            fill(sbuf, n, rank, seq);
            memset(rbuf, 0xee, n + 1);
            MPI_Status st;
            if (kind == 0) { /* blocking, ordered by parity to avoid a cycle of blocking sends */
                if (rank % 2 == 0) {
                    MPI_Send(sbuf, (int)n, MPI_BYTE, to, seq, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)n, MPI_BYTE, from, seq, MPI_COMM_WORLD, &st);
                } else {
                    MPI_Recv(rbuf, (int)n, MPI_BYTE, from, seq, MPI_COMM_WORLD, &st);
                    MPI_Send(sbuf, (int)n, MPI_BYTE, to, seq, MPI_COMM_WORLD);
                }
            } else { /* nonblocking; kind 2 synchronous */
                MPI_Request rq[2];
                MPI_Irecv(rbuf, (int)n, MPI_BYTE, from, seq, MPI_COMM_WORLD, &rq[0]);
                if (kind == 1)
                    MPI_Isend(sbuf, (int)n, MPI_BYTE, to, seq, MPI_COMM_WORLD, &rq[1]);
                else
                    MPI_Issend(sbuf, (int)n, MPI_BYTE, to, seq, MPI_COMM_WORLD, &rq[1]);
                MPI_Status sts[2];
                MPI_Waitall(2, rq, sts);
                st = sts[0];
            }
            int count = -1;
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(count == (int)n, "size %zu kind %d: count %d", n, kind, count);
            CHECK(st.MPI_SOURCE == from && st.MPI_TAG == seq, "source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
            expect(rbuf, n, from, seq);
            CHECK(rbuf[n] == 0xee, "size %zu: byte past the message written", n);
        }
    }
}

/* Every other rank sends PER messages of distinct sizes to rank 0 with tags
 * 1000.. in order; rank 0 takes them alternately with MPI_Probe(ANY, ANY) +
 * MPI_Get_count + a receive of the probed envelope, and with a plain
 * MPI_Recv(ANY, ANY) into a large buffer; the status names each message,
 * every one arrives once, and the messages of one sender in order. */
static size_t wild_len(int src, int m) { return 100 + 1000 * (size_t)src + (size_t)m * 70000; }

static void wildcard(uint8_t *sbuf, uint8_t *rbuf, size_t cap)
{
    enum { PER = 3 };
    if (rank != 0) {
        for (int m = 0; m < PER; m++) {
            size_t n = wild_len(rank, m);
            fill(sbuf, n, rank, 1000 + m);
            MPI_Send(sbuf, (int)n, MPI_BYTE, 0, 1000 + m, MPI_COMM_WORLD);
        }
        return;
    }
    int next[64] = {0};
    for (int k = 0; k < (size - 1) * PER; k++) {
        MPI_Status st;
        int count = -1;
        if (k % 2 == 0) {
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(count >= 0 && (size_t)count <= cap, "probe: count %d", count);
            MPI_Status st2;
            MPI_Recv(rbuf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2);
            int count2 = -1;
            MPI_Get_count(&st2, MPI_BYTE, &count2);
            CHECK(st2.MPI_SOURCE == st.MPI_SOURCE && st2.MPI_TAG == st.MPI_TAG && count2 == count,
                  "probed %d/%d/%d, received %d/%d/%d", st.MPI_SOURCE, st.MPI_TAG, count, st2.MPI_SOURCE,
                  st2.MPI_TAG, count2);
        } else {
            MPI_Recv(rbuf, (int)cap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
        }
        int src = st.MPI_SOURCE, m = st.MPI_TAG - 1000;
        CHECK(src > 0 && src < size && m >= 0 && m < PER, "source %d tag %d", src, st.MPI_TAG);
        CHECK(m == next[src], "from %d: message %d where %d was next", src, m, next[src]);
        next[src]++;
        CHECK(count == (int)wild_len(src, m), "from %d tag %d: count %d", src, st.MPI_TAG, count);
        expect(rbuf, (size_t)count, src, 1000 + m);
    }
}

/* Receives posted for tags in reverse order of the sends: tag matching, not arrival order. */
static void reversed_tags(uint8_t *sbuf, uint8_t *rbuf)
{
    enum { N = 8, LEN = 3000 };
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Request rq[2 * N];
    for (int t = 0; t < N; t++)
        MPI_Irecv(rbuf + (size_t)t * LEN, LEN, MPI_BYTE, from, 2000 + (N - 1 - t), MPI_COMM_WORLD, &rq[t]);
    for (int t = 0; t < N; t++) {
        fill(sbuf + (size_t)t * LEN, LEN, rank, 2000 + t);
        MPI_Isend(sbuf + (size_t)t * LEN, LEN, MPI_BYTE, to, 2000 + t, MPI_COMM_WORLD, &rq[N + t]);
    }
    MPI_Waitall(2 * N, rq, MPI_STATUSES_IGNORE);
    for (int t = 0; t < N; t++)
        expect(rbuf + (size_t)t * LEN, LEN, from, 2000 + (N - 1 - t));
}

static void collectives(uint8_t *rbuf)
{
    /* bcast of 1 MiB from the last rank */
    size_t n = 1 << 20;
    if (rank == size - 1)
        fill(rbuf, n, size - 1, 3000);
    else
        memset(rbuf, 0, n);
    MPI_Bcast(rbuf, (int)n, MPI_BYTE, size - 1, MPI_COMM_WORLD);
    expect(rbuf, n, size - 1, 3000);

    enum { V = 1000 };
    static long in[V], out[V];
    for (int k = 0; k < V; k++)
        in[k] = (long)rank * k + 1;
    MPI_Allreduce(in, out, V, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long ranks = (long)size * (size - 1) / 2;
    for (int k = 0; k < V; k++)
        CHECK(out[k] == ranks * k + size, "allreduce[%d] = %ld", k, out[k]);

    enum { B = 5000 };
    int *a = malloc(sizeof(int) * B * (size_t)size), *b = malloc(sizeof(int) * B * (size_t)size);
    CHECK(a && b, "malloc");
    for (int d = 0; d < size; d++)
        for (int k = 0; k < B; k++)
            a[d * B + k] = rank * 1000003 + d * 7919 + k;
    MPI_Alltoall(a, B, MPI_INT, b, B, MPI_INT, MPI_COMM_WORLD);
    for (int s = 0; s < size; s++)
        for (int k = 0; k < B; k++)
            CHECK(b[s * B + k] == s * 1000003 + rank * 7919 + k, "alltoall from %d [%d] = %d", s, k, b[s * B + k]);
    free(a);
    free(b);
}

/* One-sided (MPI_TEST_ONE_SIDED=1; mpi_run.sh sets it where the forced osc
 * component reaches Shunt): a window of 64 K words per rank; MPI_Put of all
 * of it to the next rank and MPI_Get back from it in fence epochs, then in a
 * lock_all epoch every rank adds to rank 0 with MPI_Fetch_and_op (100 times),
 * swaps with MPI_Compare_and_swap (exactly one rank must win) and adds with
 * MPI_Accumulate; the results are checked on every rank. */
static void one_sided(void)
{
    enum { W = 1 << 16 };
    uint64_t *win_buf, *src = malloc(W * 8), *got = malloc(W * 8), *all = malloc((size_t)size * 8);
    CHECK(src && got && all, "malloc");
    MPI_Win w;
    MPI_Win_allocate(W * 8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &win_buf, &w);
    memset(win_buf, 0, W * 8);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int k = 0; k < W; k++)
        src[k] = ((uint64_t)rank << 32) | (uint64_t)k;
    MPI_Win_fence(0, w);
    MPI_Put(src, W, MPI_UINT64_T, next, 0, W, MPI_UINT64_T, w);
    MPI_Win_fence(0, w);
    for (int k = 0; k < W; k++)
        CHECK(win_buf[k] == (((uint64_t)prev << 32) | (uint64_t)k), "put [%d] = %llx", k,
              (unsigned long long)win_buf[k]);
    MPI_Get(got, W, MPI_UINT64_T, next, 0, W, MPI_UINT64_T, w);
    MPI_Win_fence(0, w);
    for (int k = 0; k < W; k++)
        CHECK(got[k] == (((uint64_t)rank << 32) | (uint64_t)k), "get [%d] = %llx", k, (unsigned long long)got[k]);
    if (rank == 0)
        win_buf[0] = win_buf[1] = win_buf[2] = 0;
    MPI_Win_fence(0, w);
    uint64_t one = 1, old = 0, cmp = 0, mine = (uint64_t)rank + 1, res = ~0ull;
    MPI_Win_lock_all(0, w);
    for (int k = 0; k < 100; k++) {
        MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, 0, 0, MPI_SUM, w);
        MPI_Win_flush(0, w);
        CHECK(old < 100ull * (uint64_t)size, "fetch_and_op returned %llu", (unsigned long long)old);
    }
    MPI_Compare_and_swap(&mine, &cmp, &res, MPI_UINT64_T, 0, 1, w);
    MPI_Accumulate(&one, 1, MPI_UINT64_T, 0, 2, 1, MPI_UINT64_T, MPI_SUM, w);
    MPI_Win_flush(0, w);
    MPI_Win_unlock_all(w);
    MPI_Allgather(&res, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int winner = -1;
    for (int s = 0; s < size; s++) {
        CHECK(all[s] == 0 || (all[s] >= 1 && all[s] <= (uint64_t)size), "cas of rank %d returned %llu", s,
              (unsigned long long)all[s]);
        if (all[s] == 0) {
            CHECK(winner < 0, "cas: ranks %d and %d both saw 0", winner, s);
            winner = s;
        }
    }
    CHECK(winner >= 0, "cas: no rank saw 0");
    MPI_Win_fence(0, w);
    if (rank == 0) {
        CHECK(win_buf[0] == 100ull * (uint64_t)size, "fetch_and_op sum %llu", (unsigned long long)win_buf[0]);
        CHECK(win_buf[1] == (uint64_t)winner + 1, "cas value %llu, winner %d", (unsigned long long)win_buf[1],
              winner);
        CHECK(win_buf[2] == (uint64_t)size, "accumulate sum %llu", (unsigned long long)win_buf[2]);
    }
    MPI_Win_fence(0, w);
    MPI_Win_free(&w);
    printf("rank %d one-sided ok\n", rank);
    free(src);
    free(got);
    free(all);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2 && size <= 64, "run with 2..64 ranks, not %d", size);
    size_t cap = (4 << 20) + 64;
    uint8_t *sbuf = malloc(cap), *rbuf = malloc(cap);
    CHECK(sbuf && rbuf, "malloc");
    ring(sbuf, rbuf);
    MPI_Barrier(MPI_COMM_WORLD);
    wildcard(sbuf, rbuf, cap);
    MPI_Barrier(MPI_COMM_WORLD);
    reversed_tags(sbuf, rbuf);
    collectives(rbuf);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *os = getenv("MPI_TEST_ONE_SIDED");
    if (os && strcmp(os, "1") == 0)
        one_sided();
    free(sbuf);
    free(rbuf);
    printf("rank %d ok\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
