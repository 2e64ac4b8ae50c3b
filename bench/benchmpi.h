/*
 * benchmpi.h - what the benchmarks run under mpirun share: worker 0 measures
 * a part alone while the other workers sleep (a blocking MPI wait would spin
 * and take the cores the measurement needs) until it releases them.
 * bench/ owns it; dvar_bench_allreduce, dvar_bench_save, dvar_bench_delta
 * and dvar_bench_cuda use it.
 */
#ifndef DVAR_BENCHMPI_H
#define DVAR_BENCHMPI_H

/** Workers other than 0: sleep until worker 0 calls bench_mpi_release. */
void bench_mpi_hold(void);

/** Worker 0: let the holding workers go. */
void bench_mpi_release(void);

/** A barrier that sleeps instead of spinning, so that a worker waiting for
 *  the others leaves them the cores; wakes within about 50 us of the last
 *  arrival. */
void bench_mpi_barrier(void);

#endif
