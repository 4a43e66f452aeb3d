/* The OpenMPI peer of `fmstack bench comm`: the same collectives on the same
 * float buffers, timed the same way (warm-up, then the mean of iterations
 * long enough to measure, the slowest rank's time). Prints one line per
 * (op, bytes): "op bytes seconds".
 *   mpirun -np 4 bench_mpi_coll MIN_BYTES MAX_BYTES */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double Time(const char* op, float* in, float* out, size_t bytes, int n, int iters) {
  size_t count = bytes / sizeof(float);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (strcmp(op, "allreduce") == 0) {
      MPI_Allreduce(MPI_IN_PLACE, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (strcmp(op, "allgather") == 0) {
      MPI_Allgather(in, (int)(count / n), MPI_FLOAT, out, (int)(count / n), MPI_FLOAT,
                    MPI_COMM_WORLD);
    } else if (strcmp(op, "reduce_scatter") == 0) {
      MPI_Reduce_scatter_block(in, out, (int)(count / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Alltoall(in, (int)(count / n), MPI_FLOAT, out, (int)(count / n), MPI_FLOAT,
                   MPI_COMM_WORLD);
    }
  }
  double t = (MPI_Wtime() - t0) / iters, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* Iterations for about 0.2 s, judged from a batch that ran at least 20 ms,
 * 1..100000: as fmstack's side does (bench_comm_cmd.cc, CalibratedIters).
 * Every rank gets the same count: Time returns the slowest rank's time. */
static int CalibratedIters(const char* op, float* in, float* out, size_t bytes, int n) {
  const int max_iters = 100000;
  for (int k = 1;; k = k * 8 < max_iters ? k * 8 : max_iters) {
    double t = Time(op, in, out, bytes, n, k);
    if (t * k >= 0.02 || k == max_iters) {
      double iters = 0.2 / (t > 1e-9 ? t : 1e-9);
      return iters < 1 ? 1 : iters > max_iters ? max_iters : (int)iters;
    }
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t lo = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
  size_t hi = argc > 2 ? strtoull(argv[2], NULL, 10) : (256u << 20);
  float* in = malloc(hi);
  float* out = malloc(hi);
  for (size_t i = 0; i < hi / sizeof(float); ++i) in[i] = out[i] = (float)(i % 97);
  const char* ops[] = {"allreduce", "allgather", "reduce_scatter", "alltoall"};
  for (int o = 0; o < 4; ++o) {
    for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
      size_t b = bytes / (sizeof(float) * n) * sizeof(float) * n;
      Time(ops[o], in, out, b, n, 1);
      double t = Time(ops[o], in, out, b, n, CalibratedIters(ops[o], in, out, b, n));
      if (rank == 0) printf("%s %zu %.9f\n", ops[o], b, t);
      fflush(stdout);
    }
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
