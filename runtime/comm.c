/*
 * runtime/comm.c - the cross-worker layer over MPI: setting MPI up (and
 * finalizing it at exit when dvar initialized it), one private communicator
 * per strategy, and the few exchanges the engine needs: allgather of fixed
 * records, broadcast, a deterministic ring all-reduce, and the data of an
 * all-to-all (any size: messages of at most 1 GiB).
 *
 * Every exchange is nonblocking and polled, so that a worker gives up after
 * timeout_ms instead of hanging; polling backs off to short sleeps because
 * several workers and their replica threads often share few cores. A
 * timeout or an MPI error breaks the comm: the requests in flight cannot be
 * cancelled (collective ones, and sends) and may still complete, so the
 * buffers they use are abandoned rather than freed. With a timeout they are
 * all owned by the strategy; without one, the ring may run in a replica's
 * buffer (collective.c), which only an MPI error can leave in use. Only the
 * strategy's coordinator thread calls in here.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dvar_features.h"
#include "runtime/engine.h"

#if DVAR_WITH_MPI
#include <mpi.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* ---------------------------------------------------------------- abandoned buffers */

/* Reachable from here until exit, so leak checkers do not report them. */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static void **abandoned;
static size_t nabandoned, abandoned_cap;

void dvar_comm_abandon(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&abandoned_lock);
	if (nabandoned == abandoned_cap) {
		size_t cap = abandoned_cap ? 2 * abandoned_cap : 16;
		void **grown = realloc(abandoned, cap * sizeof *grown);

		if (grown) {
			abandoned = grown;
			abandoned_cap = cap;
		}
	}
	/* Without room, p simply leaks: still better than a use after free. */
	if (nabandoned < abandoned_cap)
		abandoned[nabandoned++] = p;
	pthread_mutex_unlock(&abandoned_lock);
}

#if DVAR_WITH_MPI

struct dvar_comm {
	MPI_Comm comm;
	int rank, size;
	int timeout_ms;
	int broken; /* 1 timeout, 2 MPI error */
};

#define RING_TAG 0x6476

static int mpi_error(dvar_comm *c, int err, const char *fmt, const char *what)
{
	char text[MPI_MAX_ERROR_STRING + 1];
	int len = 0;

	if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
		snprintf(text, sizeof text, "MPI error %d", err);
	text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
	if (c)
		c->broken = 2;
	return dvar_error_set(DVAR_ECOMM, fmt, what, text);
}

/* ---------------------------------------------------------------- setup */

static void finalize_at_exit(void)
{
	int finalized = 0;

#if defined(__SANITIZE_ADDRESS__)
	/* MPI_Finalize unloads OpenMPI's components; a leak report made after
	 * it cannot name their frames, so no suppression could match them. */
	__lsan_do_leak_check();
#endif
	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Finalize();
}

static const char *thread_level_name(int level)
{
	switch (level) {
	case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
	case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
	case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
	case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
	}
	return "an unknown thread level";
}

/* MPI ready for use from the calling thread: initialized here if needed. */
static int ensure_mpi(void)
{
	static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
	int initialized = 0, finalized = 0, provided = 0, is_main = 0, err;
	int rc = DVAR_OK;

	pthread_mutex_lock(&init_lock);
	MPI_Finalized(&finalized);
	if (finalized) {
		rc = dvar_error_set(DVAR_ECOMM, "strategy: MPI has already been finalized");
		goto done;
	}
	MPI_Initialized(&initialized);
	if (!initialized) {
#if defined(__SANITIZE_ADDRESS__)
		/* OpenMPI's start-up keeps memory in components it unloads again:
		 * no leak report could name (or suppress) them. */
		__lsan_disable();
#endif
		err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
#if defined(__SANITIZE_ADDRESS__)
		__lsan_enable();
#endif
		if (err != MPI_SUCCESS) {
			rc = mpi_error(NULL, err, "%s: %s", "strategy: MPI_Init_thread");
			goto done;
		}
		/* Ours to finalize, unless the program does it first. */
		atexit(finalize_at_exit);
	} else {
		MPI_Query_thread(&provided);
	}
	if (provided >= MPI_THREAD_SERIALIZED)
		goto done;
	MPI_Is_thread_main(&is_main);
	if (provided == MPI_THREAD_FUNNELED && is_main)
		goto done;
	rc = dvar_error_set(DVAR_ENOTSUPP,
	                    "strategy: MPI provides %s%s; dvar needs MPI_THREAD_SERIALIZED, or "
	                    "MPI_THREAD_FUNNELED with dvar called from the main thread",
	                    thread_level_name(provided),
	                    provided == MPI_THREAD_FUNNELED ? " and this is not the main thread" : "");
done:
	pthread_mutex_unlock(&init_lock);
	return rc;
}

int dvar_comm_open(dvar_comm **out, int workers, int timeout_ms, int *worker, int *nworkers)
{
	int initialized = 0, finalized = 0, size = 0, rank = 0, err, rc;
	const char *launched = getenv("OMPI_COMM_WORLD_SIZE");
	dvar_comm *c;

	*out = NULL;
	*worker = 0;
	*nworkers = 1;
	if (workers == 1)
		return DVAR_OK;
	MPI_Initialized(&initialized);
	MPI_Finalized(&finalized);
	if (workers == DVAR_WORKERS_AUTO && !launched && !(initialized && !finalized))
		return DVAR_OK; /* not started by mpirun: one worker, MPI untouched */
	if (workers > 1 && !launched && !initialized)
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: workers = %d needs %d MPI processes; start the "
		                      "program with mpirun -np %d",
		                      workers, workers, workers);
	rc = ensure_mpi();
	if (rc != DVAR_OK)
		return rc;
	err = MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (err == MPI_SUCCESS)
		err = MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (err != MPI_SUCCESS)
		return mpi_error(NULL, err, "%s: %s", "strategy: the size of MPI_COMM_WORLD");
	if (workers > 1 && workers != size)
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: workers = %d but the MPI world has %d "
		                      "process%s",
		                      workers, size, size == 1 ? "" : "es");
	if (size == 1)
		return DVAR_OK;

	c = calloc(1, sizeof *c);
	if (!c)
		return dvar_error_set(DVAR_ENOMEM, "strategy: out of memory");
	err = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
	if (err != MPI_SUCCESS) {
		free(c);
		return mpi_error(NULL, err, "%s: %s", "strategy: MPI_Comm_dup");
	}
	err = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
	if (err != MPI_SUCCESS) {
		MPI_Comm_free(&c->comm);
		free(c);
		return mpi_error(NULL, err, "%s: %s", "strategy: MPI_Comm_set_errhandler");
	}
	c->rank = rank;
	c->size = size;
	c->timeout_ms = timeout_ms;
	*out = c;
	*worker = rank;
	*nworkers = size;
	return DVAR_OK;
}

void dvar_comm_close(dvar_comm *c)
{
	int finalized = 0;

	if (!c)
		return;
	if (c->broken) {
		/* Requests in flight still refer to the communicator. */
		dvar_comm_abandon(c);
		return;
	}
	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Comm_free(&c->comm);
	free(c);
}

int dvar_comm_broken(const dvar_comm *c)
{
	return c ? c->broken : 0;
}

/* ---------------------------------------------------------------- waiting */

/* Poll reqs until they complete, politely, and give up after timeout_ms:
 * yield the CPU between polls for a while (a peer usually answers within
 * microseconds), then sleep, a little longer each time up to 200 us. */
static int wait_all(dvar_comm *c, int n, MPI_Request *reqs, const char *what)
{
	double start = dvar_now(), now;
	long pause_ns = 5000;

	for (;;) {
		int done = 0;
		int err = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);

		if (err != MPI_SUCCESS)
			return mpi_error(c, err, "waiting for %s: %s", what);
		if (done)
			return DVAR_OK;
		now = dvar_now();
		if (c->timeout_ms > 0 && (now - start) * 1000.0 >= c->timeout_ms) {
			c->broken = 1;
			return dvar_error_set(DVAR_ECOMM, "timed out after %d ms waiting for %s",
			                      c->timeout_ms, what);
		}
		if (now - start < 200e-6) {
			sched_yield();
		} else {
			struct timespec ts = { 0, pause_ns };

			nanosleep(&ts, NULL);
			if (pause_ns < 200000)
				pause_ns *= 2;
		}
	}
}

/* ---------------------------------------------------------------- exchanges */

int dvar_comm_allgather(dvar_comm *c, const void *mine, void *all, size_t bytes, const char *what)
{
	MPI_Request req;
	int err;

	if (c->broken)
		return dvar_error_set(DVAR_ECOMM, "waiting for %s: the workers lost step earlier", what);
	err = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->comm, &req);
	if (err != MPI_SUCCESS)
		return mpi_error(c, err, "MPI_Iallgather for %s: %s", what);
	return wait_all(c, 1, &req, what);
}

int dvar_comm_bcast(dvar_comm *c, void *buf, size_t bytes, int root, const char *what)
{
	char text[320];
	MPI_Request req;
	int err;

	if (bytes == 0)
		return DVAR_OK;
	snprintf(text, sizeof text, "%s from worker %d", what, root);
	if (c->broken)
		return dvar_error_set(DVAR_ECOMM, "waiting for %s: the workers lost step earlier", text);
	err = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, c->comm, &req);
	if (err != MPI_SUCCESS)
		return mpi_error(c, err, "MPI_Ibcast for %s: %s", text);
	return wait_all(c, 1, &req, text);
}

/* Exchange with the ring neighbours: send to the right, receive from the left. */
static int ring_step(dvar_comm *c, const void *sbuf, size_t sbytes, void *rbuf, size_t rbytes,
                     const char *what)
{
	int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
	MPI_Request reqs[2];
	char text[320];
	int n = 0, err;

	snprintf(text, sizeof text, "%s (ring: workers %d and %d)", what, left, right);
	if (rbytes > 0) {
		err = MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, left, RING_TAG, c->comm, &reqs[n]);
		if (err != MPI_SUCCESS)
			return mpi_error(c, err, "MPI_Irecv for %s: %s", text);
		n++;
	}
	if (sbytes > 0) {
		err = MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, right, RING_TAG, c->comm, &reqs[n]);
		if (err != MPI_SUCCESS) {
			/* The receive is still posted: the comm cannot be trusted any more. */
			return mpi_error(c, err, "MPI_Isend for %s: %s", text);
		}
		n++;
	}
	return n ? wait_all(c, n, reqs, text) : DVAR_OK;
}

int dvar_comm_ring_allreduce(dvar_comm *c, int dtype, dvar_kernel_op op, void *buf, void *tmp,
                             size_t count, const char *what)
{
	size_t es = dvar_dtype_size(dtype);
	int W = c->size, rank = c->rank;
	char *b = buf;

	if (c->broken)
		return dvar_error_set(DVAR_ECOMM, "waiting for %s: the workers lost step earlier", what);
	if (W == 1 || count == 0)
		return DVAR_OK;
#define SEG_LO(i) ((size_t)((uint64_t)count * (uint64_t)(i) / (uint64_t)W))
#define SEG_LEN(i) (SEG_LO((i) + 1) - SEG_LO(i))
	/* Reduce-scatter: at step k this worker passes on segment rank - k and
	 * adds its own part to segment rank - k - 1 as it arrives. Segment i is
	 * thus summed in the order of the ring starting at worker i, and worker
	 * i - 1 ends up holding it complete. */
	for (int k = 0; k < W - 1; k++) {
		int si = (rank - k + W) % W, ri = (rank - k - 1 + 2 * W) % W;
		int rc = ring_step(c, b + SEG_LO(si) * es, SEG_LEN(si) * es, tmp, SEG_LEN(ri) * es, what);
		const void *srcs[2];

		if (rc != DVAR_OK)
			return rc;
		if (SEG_LEN(ri) == 0)
			continue;
		srcs[0] = tmp;
		srcs[1] = b + SEG_LO(ri) * es;
		dvar_kernel_reduce(dtype, op, b + SEG_LO(ri) * es, srcs, 2, SEG_LEN(ri));
	}
	/* All-gather: pass the complete segments around the ring. */
	for (int k = 0; k < W - 1; k++) {
		int si = (rank + 1 - k + W) % W, ri = (rank - k + W) % W;
		int rc = ring_step(c, b + SEG_LO(si) * es, SEG_LEN(si) * es, b + SEG_LO(ri) * es,
		                   SEG_LEN(ri) * es, what);

		if (rc != DVAR_OK)
			return rc;
	}
#undef SEG_LO
#undef SEG_LEN
	return DVAR_OK;
}

/* ---------------------------------------------------------------- all-to-all */

#define ALLTOALL_TAG 0x6477
/* The most bytes one message carries: an MPI count is an int. Tests lower
 * it (dvar_comm__set_message_max) to reach the splitting with small data. */
#define DEFAULT_MESSAGE_MAX ((uint64_t)1 << 30)
static uint64_t message_max = DEFAULT_MESSAGE_MAX;

void dvar_comm__set_message_max(uint64_t bytes)
{
	message_max = bytes > 0 && bytes <= DEFAULT_MESSAGE_MAX ? bytes : DEFAULT_MESSAGE_MAX;
}

static uint64_t messages(uint64_t bytes)
{
	return (bytes + message_max - 1) / message_max;
}

/* Post one round of the data exchange: message k of every pair that has
 * one. *n receives the number of requests posted. */
static int post_round(dvar_comm *c, uint64_t k, const char *src, const uint64_t *send_bytes,
                      const uint64_t *soff, char *dst, const uint64_t *recv_bytes,
                      const uint64_t *roff, MPI_Request *reqs, int *n, const char *what)
{
	uint64_t at = k * message_max;
	int err;

	*n = 0;
	for (int p = 0; p < c->size; p++) {
		uint64_t len;

		if (p == c->rank || recv_bytes[p] <= at)
			continue;
		len = recv_bytes[p] - at < message_max ? recv_bytes[p] - at : message_max;
		err = MPI_Irecv(dst + roff[p] + at, (int)len, MPI_BYTE, p, ALLTOALL_TAG, c->comm,
		                &reqs[(*n)++]);
		if (err != MPI_SUCCESS)
			return mpi_error(c, err, "MPI_Irecv for %s: %s", what);
	}
	for (int p = 0; p < c->size; p++) {
		uint64_t len;

		if (p == c->rank || send_bytes[p] <= at)
			continue;
		len = send_bytes[p] - at < message_max ? send_bytes[p] - at : message_max;
		err = MPI_Isend(src + soff[p] + at, (int)len, MPI_BYTE, p, ALLTOALL_TAG, c->comm,
		                &reqs[(*n)++]);
		if (err != MPI_SUCCESS)
			return mpi_error(c, err, "MPI_Isend for %s: %s", what);
	}
	return DVAR_OK;
}

int dvar_comm_alltoallv(dvar_comm *c, const void *send, const uint64_t *send_bytes,
                        uint64_t *recv_bytes, uint64_t *status, int stage, void **recv,
                        const char *what)
{
	int W = c->size, me = c->rank, err, rc;
	uint64_t send_total = 0, recv_total = 0, rounds = 0, failed = 0;
	const char *src = send;
	char *dst = NULL, *staged = NULL;
	MPI_Request *reqs = NULL;
	uint64_t *soff = NULL, *roff;
	char text[320];
	MPI_Request req;

	*recv = NULL;
	if (c->broken)
		return dvar_error_set(DVAR_ECOMM, "waiting for %s: the workers lost step earlier", what);
	snprintf(text, sizeof text, "the sizes of %s", what);
	err = MPI_Ialltoall(send_bytes, 1, MPI_UINT64_T, recv_bytes, 1, MPI_UINT64_T, c->comm, &req);
	if (err != MPI_SUCCESS)
		return mpi_error(c, err, "MPI_Ialltoall for %s: %s", text);
	if ((rc = wait_all(c, 1, &req, text)) != DVAR_OK)
		return rc;

	/* Everything this worker needs, or its failure, before any data moves:
	 * a worker that cannot receive must not leave its peers sending. */
	for (int w = 0; w < W; w++) {
		if (send_total + send_bytes[w] < send_total || recv_total + recv_bytes[w] < recv_total)
			failed = UINT64_MAX;
		send_total += send_bytes[w];
		recv_total += recv_bytes[w];
		if (w != me) {
			uint64_t m = messages(send_bytes[w]) > messages(recv_bytes[w])
			                     ? messages(send_bytes[w])
			                     : messages(recv_bytes[w]);
			rounds = m > rounds ? m : rounds;
		}
	}
	if (!failed && (recv_total > SIZE_MAX - 1 || send_total > SIZE_MAX - 1))
		failed = recv_total > send_total ? recv_total : send_total;
	if (!failed) {
		dst = malloc(recv_total ? (size_t)recv_total : 1);
		reqs = malloc(2 * (size_t)W * sizeof *reqs);
		soff = malloc(2 * ((size_t)W + 1) * sizeof *soff);
		if (stage)
			staged = malloc(send_total ? (size_t)send_total : 1);
		if (!dst || !reqs || !soff || (stage && !staged))
			failed = recv_total + (stage ? send_total : 0) ? recv_total + (stage ? send_total : 0)
			                                                : 1;
	}
	status[W] = failed;
	snprintf(text, sizeof text, "the other workers to receive %s", what);
	rc = dvar_comm_allgather(c, &status[W], status, sizeof *status, text);
	for (int w = 0; rc == DVAR_OK && w < W; w++)
		if (status[w] != 0)
			rc = dvar_error_set(DVAR_ENOMEM,
			                    "worker %d is out of memory for the %llu bytes of %s", w,
			                    (unsigned long long)status[w], what);
	if (rc != DVAR_OK) {
		/* No request uses these (status is the caller's to keep or abandon). */
		free(dst);
		free(reqs);
		free(soff);
		free(staged);
		return rc;
	}

	roff = soff + W + 1;
	soff[0] = roff[0] = 0;
	for (int w = 0; w < W; w++) {
		soff[w + 1] = soff[w] + send_bytes[w];
		roff[w + 1] = roff[w] + recv_bytes[w];
	}
	if (stage) {
		/* A request a timeout abandons may still read it: not the caller's. */
		if (send_total)
			memcpy(staged, send, (size_t)send_total);
		src = staged;
	}
	if (recv_bytes[me])
		memcpy(dst + roff[me], src + soff[me], (size_t)recv_bytes[me]);
	snprintf(text, sizeof text, "%s (all-to-all between workers)", what);
	for (uint64_t k = 0; k < rounds && rc == DVAR_OK; k++) {
		int n = 0;

		rc = post_round(c, k, src, send_bytes, soff, dst, recv_bytes, roff, reqs, &n, text);
		if (rc == DVAR_OK && n > 0)
			rc = wait_all(c, n, reqs, text);
	}
	if (rc != DVAR_OK) {
		/* Requests in flight may still use every buffer. */
		dvar_comm_abandon(dst);
		dvar_comm_abandon(staged);
		dvar_comm_abandon(reqs);
		dvar_comm_abandon(soff);
		return rc;
	}
	free(staged);
	free(reqs);
	free(soff);
	*recv = dst;
	return DVAR_OK;
}

#else /* !DVAR_WITH_MPI */

struct dvar_comm {
	int broken;
};

int dvar_comm_open(dvar_comm **out, int workers, int timeout_ms, int *worker, int *nworkers)
{
	*out = NULL;
	*worker = 0;
	*nworkers = 1;
	if (workers > 1)
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "strategy options: workers = %d needs MPI, and this build of dvar "
		                      "has none (DVAR_WITH_MPI=OFF)",
		                      workers);
	return DVAR_OK;
}

void dvar_comm_close(dvar_comm *c)
{
	free(c);
}

int dvar_comm_broken(const dvar_comm *c)
{
	return c ? c->broken : 0;
}

int dvar_comm_allgather(dvar_comm *c, const void *mine, void *all, size_t bytes, const char *what)
{
	return dvar_error_set(DVAR_ENOTSUPP, "%s: no MPI in this build", what);
}

int dvar_comm_bcast(dvar_comm *c, void *buf, size_t bytes, int root, const char *what)
{
	return dvar_error_set(DVAR_ENOTSUPP, "%s: no MPI in this build", what);
}

int dvar_comm_ring_allreduce(dvar_comm *c, int dtype, dvar_kernel_op op, void *buf, void *tmp,
                             size_t count, const char *what)
{
	return dvar_error_set(DVAR_ENOTSUPP, "%s: no MPI in this build", what);
}

int dvar_comm_alltoallv(dvar_comm *c, const void *send, const uint64_t *send_bytes,
                        uint64_t *recv_bytes, uint64_t *status, int stage, void **recv,
                        const char *what)
{
	*recv = NULL;
	return dvar_error_set(DVAR_ENOTSUPP, "%s: no MPI in this build", what);
}

void dvar_comm__set_message_max(uint64_t bytes)
{
}

#endif
