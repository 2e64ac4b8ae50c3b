/*
 * benchmpi.c - worker 0 alone, the others asleep (benchmpi.h).
 */
#include <sched.h>
#include <time.h>

#include <mpi.h>

#include "benchutil.h"

#include "benchmpi.h"

#define RELEASE_TAG 77

void bench_mpi_hold(void)
{
	MPI_Request req;
	int done = 0, token;
	struct timespec ms = { 0, 1000000 };

	MPI_Irecv(&token, 1, MPI_INT, 0, RELEASE_TAG, MPI_COMM_WORLD, &req);
	while (!done) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (!done)
			nanosleep(&ms, NULL);
	}
}

void bench_mpi_barrier(void)
{
	struct timespec pause = { 0, 50000 };
	MPI_Request req;
	double t0 = bench_now();
	int done = 0;

	MPI_Ibarrier(MPI_COMM_WORLD, &req);
	for (;;) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		if (bench_now() - t0 < 100e-6)
			sched_yield();
		else
			nanosleep(&pause, NULL);
	}
}

void bench_mpi_release(void)
{
	int token = 1, W;

	MPI_Comm_size(MPI_COMM_WORLD, &W);
	for (int w = 1; w < W; w++)
		MPI_Send(&token, 1, MPI_INT, w, RELEASE_TAG, MPI_COMM_WORLD);
}

int bench_mpi_init(int *argc, char ***argv, bench_program *prog, int *rank, int *size)
{
	int provided;

	MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	prog->rank = *rank;
	bench_init(prog);
	return provided >= MPI_THREAD_SERIALIZED;
}

void bench_mpi_finalize(void)
{
	MPI_Finalize();
}
