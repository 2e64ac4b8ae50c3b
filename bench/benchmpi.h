/*
 * benchmpi.h - what the benchmarks run under mpirun share: worker 0 measures
 * a part alone while the other workers sleep (a blocking MPI wait would spin
 * and take the cores the measurement needs) until it releases them.
 * bench/ owns it; dvar_bench_allreduce, dvar_bench_save, dvar_bench_delta
 * and dvar_bench_cuda use it.
 */
#ifndef DVAR_BENCHMPI_H
#define DVAR_BENCHMPI_H

#include "benchutil.h"

/**
 * MPI started with MPI_THREAD_SERIALIZED, as dvar needs; this worker's rank
 * and the worker count in *rank and *size; prog given the rank and set up
 * (bench_init). Returns whether MPI gives that thread support, for the
 * caller to fail its own way once its options are parsed.
 */
int bench_mpi_init(int *argc, char ***argv, bench_program *prog, int *rank, int *size);

/** MPI_Finalize, as a bench_program's finalize. */
void bench_mpi_finalize(void);

/** Workers other than 0: sleep until worker 0 calls bench_mpi_release. */
void bench_mpi_hold(void);

/** Worker 0: let the holding workers go. */
void bench_mpi_release(void);

/** A barrier that sleeps instead of spinning, so that a worker waiting for
 *  the others leaves them the cores; wakes within about 50 us of the last
 *  arrival. */
void bench_mpi_barrier(void);

#endif
