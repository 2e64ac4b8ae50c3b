/*
 * bench_cuda.c - the GPU side of dvar (DVAR_WITH_CUDA), measured next to
 * what CUDA and NCCL do alone on the same bytes, in the same run:
 *
 *  (1) all-reduce over device buffers (float32, SUM, in place), reported
 *      the way nccl-tests does: dvar's default fixed order, dvar with
 *      DVAR_STRATEGY_NCCL_ALL_REDUCE, and ncclAllReduce called directly
 *      (one communicator per GPU from ncclCommInitAll, or one per rank
 *      under mpirun): time, algbw = bytes / time, busbw = algbw * 2(n-1)/n.
 *      With a single GPU, NCCL has no peer: then R replicas share the GPU,
 *      dvar's kernels combine them, and the comparison is a device-to-device
 *      cudaMemcpy of the same bytes;
 *  (2) the training stall of a snapshot: dvar_save_async of variables
 *      totalling --bytes on one GPU returns once its device-to-host copies
 *      into page-locked staging are done, next to a plain cudaMemcpyAsync
 *      of the same bytes into cudaHostAlloc'ed memory; then the time until
 *      dvar_save_wait has written everything.
 *
 * Each figure is the median of --trials (--runs) trials. Every size is
 * checked once before it is timed (#wrong), and the snapshot is read back.
 * Without a GPU it says why and exits 0. See bench/README.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "benchutil.h"
#include "dvar/dvar.h"
#include "dvar_features.h"

#if DVAR_WITH_MPI
#include <mpi.h>

#include "benchmpi.h"
#endif
#if DVAR_WITH_NCCL
#include <nccl.h>
#endif

#define PROGRAM "dvar_bench_cuda"
#define MAX_TRIALS 64 /* at most BENCH_MAX_SAMPLES */
#define MAX_GPUS 64
#define MAX_LOCAL 256
#define MAX_SIZES 64

static struct {
	int rank, W;                      /* MPI (1 process: 0, 1) */
	int mpi;                          /* this program initialized MPI */
	int local_rank, local_size;       /* this process among those of its node */
	int G;                            /* visible GPUs */
	int devs[MAX_GPUS], ndev;         /* this worker's GPUs */
	int R;                            /* replicas per worker, 0: chosen */
	size_t min_bytes, max_bytes;
	int iters, warmup, trials;
	int skip_allreduce, skip_snapshot;
	uint64_t snap_bytes;
	int vars, runs, fsync;
	dvar_compress compress;
	const char *dir;
	int progress;
	char cmdline[1024];
} g = { .min_bytes = 8, .max_bytes = (size_t)1 << 30, .warmup = 2, .trials = 5,
	.snap_bytes = (uint64_t)1 << 30, .vars = 16, .runs = 5, .fsync = 1,
	.compress = DVAR_COMPRESS_AUTO };

/* MPI_Finalize when this program initialized MPI, then exit. */
static void finish(int code) __attribute__((noreturn));

/* ---------------------------------------------------------------- errors */

static void cuda_check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		bench_fatal("%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#if DVAR_WITH_NCCL
static void nccl_check(ncclResult_t r, const char *what)
{
	if (r != ncclSuccess)
		bench_fatal("%s: NCCL %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
}
#endif

static void on_fatal(void)
{
#if DVAR_WITH_MPI
	int up = 0;

	MPI_Initialized(&up);
	if (up && g.W > 1)
		MPI_Abort(MPI_COMM_WORLD, 1);
#endif
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *to)
{
	fprintf(to,
	        "usage: " PROGRAM " [--replicas R] [--devices 0,1,..] [--min 8] [--max 1G]\n"
	        "                       [--iters N] [--warmup N] [--trials N]\n"
	        "                       [--bytes 1G] [--vars N] [--runs N] [--no-fsync]\n"
	        "                       [--compress none|auto|lz4] [--dir DIR]\n"
	        "                       [--only allreduce|snapshot]\n"
	        "   or: mpirun -np W " PROGRAM " ...   (one GPU per process: its node-local rank)\n"
	        "All-reduce sizes go from --min to --max by factors of 4 (bytes; K, M, G\n"
	        "suffixes). --replicas defaults to one per GPU, or 4 sharing a single GPU.\n");
}

static int parse_size(const char *text, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text)
		return -1;
	switch (*end) {
	case 'k':
	case 'K': v <<= 10; end++; break;
	case 'm':
	case 'M': v <<= 20; end++; break;
	case 'g':
	case 'G': v <<= 30; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end != '\0' || v < 4)
		return -1;
	*out = (size_t)v;
	return 0;
}

static void size_option(const char *a, const char *v, size_t *out)
{
	if (!v || parse_size(v, out))
		bench_bad_option(a);
}

static void parse_devices(const char *a, const char *v)
{
	const char *p = v;

	g.ndev = 0;
	while (p && *p) {
		char *end;
		long d = strtol(p, &end, 10);

		if (end == p || d < 0 || g.ndev == MAX_GPUS)
			bench_bad_option(a);
		g.devs[g.ndev++] = (int)d;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			bench_bad_option(a);
	}
	if (!g.ndev)
		bench_bad_option(a);
}

static void parse_args(int argc, char **argv)
{
	size_t len = 0;

	for (int i = 0; i < argc && len + 2 < sizeof g.cmdline; i++)
		len += (size_t)snprintf(g.cmdline + len, sizeof g.cmdline - len, "%s%s", i ? " " : "",
		                        argv[i]);
	g.dir = bench_default_dir();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int took = bench_common_option(a, v, &g.progress, &g.dir, &g.compress);
		size_t sz;

		if (took) {
			i += took - 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			if (g.rank == 0)
				usage(stdout);
			finish(0);
		} else if (!strcmp(a, "--no-fsync")) {
			g.fsync = 0;
			continue;
		} else if (!strcmp(a, "--fsync")) {
			g.fsync = 1;
			continue;
		} else if (!strcmp(a, "--replicas")) {
			g.R = (int)bench_parse_num(a, v, 1, MAX_LOCAL);
		} else if (!strcmp(a, "--devices")) {
			parse_devices(a, v);
		} else if (!strcmp(a, "--min")) {
			size_option(a, v, &g.min_bytes);
		} else if (!strcmp(a, "--max")) {
			size_option(a, v, &g.max_bytes);
		} else if (!strcmp(a, "--iters")) {
			g.iters = (int)bench_parse_num(a, v, 1, 1000000);
		} else if (!strcmp(a, "--warmup")) {
			g.warmup = (int)bench_parse_num(a, v, 0, 1000);
		} else if (!strcmp(a, "--trials")) {
			g.trials = (int)bench_parse_num(a, v, 1, MAX_TRIALS);
		} else if (!strcmp(a, "--bytes")) {
			size_option(a, v, &sz);
			g.snap_bytes = sz;
		} else if (!strcmp(a, "--vars")) {
			g.vars = (int)bench_parse_num(a, v, 1, 4096);
		} else if (!strcmp(a, "--runs")) {
			g.runs = (int)bench_parse_num(a, v, 1, MAX_TRIALS);
		} else if (!strcmp(a, "--only")) {
			if (v && !strcmp(v, "allreduce"))
				g.skip_snapshot = 1;
			else if (v && !strcmp(v, "snapshot"))
				g.skip_allreduce = 1;
			else
				bench_bad_option(a);
		} else {
			bench_bad_option(a);
		}
		i++;
	}
	g.min_bytes &= ~(size_t)3;
	g.max_bytes &= ~(size_t)3;
	if (g.min_bytes < 4 || g.min_bytes > g.max_bytes) {
		if (g.rank == 0)
			fprintf(stderr, "%s: --min must be at least 4 and at most --max\n", PROGRAM);
		exit(2);
	}
}

/* ---------------------------------------------------------------- workers */

#if DVAR_WITH_MPI
static __attribute__((unused)) double max_over_workers(double x)
{
	double m = x;

	if (g.W > 1)
		MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return m;
}

static long sum_over_workers(long x)
{
	long s = x;

	if (g.W > 1)
		MPI_Allreduce(&x, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	return s;
}

static int min_over_workers(int x)
{
	int m = x;

	if (g.W > 1)
		MPI_Allreduce(&x, &m, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	return m;
}

static __attribute__((unused)) void barrier(void)
{
	if (g.W > 1)
		MPI_Barrier(MPI_COMM_WORLD);
}

/* Wait for worker 0 without spinning on a core it needs. */
#else
static __attribute__((unused)) double max_over_workers(double x) { return x; }
static long sum_over_workers(long x) { return x; }
static int min_over_workers(int x) { return x; }
static __attribute__((unused)) void barrier(void) {}
#endif

static void finish(int code)
{
#if DVAR_WITH_MPI
	if (g.mpi)
		MPI_Finalize();
#endif
	exit(code);
}

/* ---------------------------------------------------------------- (1) all-reduce */

/* About 0.05 s of work per trial at 40 GB/s, 5..1000 iterations. */
static int iters_for(size_t bytes)
{
	double n = 2e9 / (double)bytes;

	if (g.iters > 0)
		return g.iters;
	return n < 5 ? 5 : n > 1000 ? 1000 : (int)n;
}

typedef struct {
	size_t bytes;
	double fixed, flag, nccl, d2d; /* seconds per iteration; 0: not measured */
	long wrong;
} row;

static row rows[MAX_SIZES];
static int nrows;

/* What one size of one dvar pass needs on every replica. */
typedef struct {
	float **dbuf;      /* per local replica: max_bytes of device memory */
	const float *ones; /* host: max_bytes of 1.0f */
	size_t count;
	int iters;
	double times[MAX_TRIALS];
	long wrong[MAX_LOCAL];
	char err[MAX_LOCAL][160]; /* a CUDA failure of the replica (dvar's own are in its error) */
} ar_case;

/* A CUDA call of replica l: DVAR_EDEVICE with CUDA's message kept in
 * c->err[l] when it fails (a replica function cannot set dvar's error). */
static int device_call(ar_case *c, int l, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return DVAR_OK;
	snprintf(c->err[l], sizeof c->err[l], "%s: %s", what, cudaGetErrorString(e));
	return DVAR_EDEVICE;
}

static int ar_alloc_fn(dvar_replica *ctx, void *arg)
{
	ar_case *c = arg;
	int l = dvar_replica_local_id(ctx);
	int rc = device_call(c, l, cudaSetDevice(dvar_replica_cuda_device(ctx)), "cudaSetDevice");

	return rc ? rc : device_call(c, l, cudaMalloc((void **)&c->dbuf[l], g.max_bytes), "cudaMalloc");
}

static int ar_free_fn(dvar_replica *ctx, void *arg)
{
	ar_case *c = arg;

	cudaFree(c->dbuf[dvar_replica_local_id(ctx)]);
	return DVAR_OK;
}

static int ar_fn(dvar_replica *ctx, void *arg)
{
	ar_case *c = arg;
	int l = dvar_replica_local_id(ctx), N = dvar_replica_num_replicas(ctx);
	cudaStream_t st = (cudaStream_t)dvar_replica_cuda_stream(ctx);
	float *buf = c->dbuf[l];
	size_t bytes = c->count * sizeof(float);
	size_t probe[3] = { 0, c->count / 2, c->count - 1 };
	int rc;

	/* Check once: every replica holds ones, the sum is N everywhere. */
	if ((rc = device_call(c, l, cudaMemcpyAsync(buf, c->ones, bytes, cudaMemcpyHostToDevice, st),
	                      "upload")) ||
	    (rc = device_call(c, l, cudaStreamSynchronize(st), "upload")))
		return rc;
	if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, c->count)))
		return rc;
	c->wrong[l] = 0;
	for (int p = 0; p < 3; p++) {
		float x = 0;

		if ((rc = device_call(c, l, cudaMemcpy(&x, buf + probe[p], sizeof x, cudaMemcpyDeviceToHost),
		                      "probe")))
			return rc;
		c->wrong[l] += x != (float)N;
	}
	/* Zeros while timing: values stay finite whatever the iteration count. */
	if ((rc = device_call(c, l, cudaMemsetAsync(buf, 0, bytes, st), "memset")) ||
	    (rc = device_call(c, l, cudaStreamSynchronize(st), "memset")))
		return rc;
	for (int i = 0; i < g.warmup; i++)
		if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf,
		                                  c->count)))
			return rc;
	for (int t = 0; t < g.trials; t++) {
		double t0, dt, one = 0;

		/* a barrier: a host all-reduce runs on the CPU path */
		if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT64, &one, &one, 1)))
			return rc;
		t0 = bench_now();
		for (int i = 0; i < c->iters; i++)
			if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf,
			                                  c->count)))
				return rc;
		/* every dvar call returns with its device work done */
		dt = (bench_now() - t0) / c->iters;
		if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_FLOAT64, &dt, &dt, 1)))
			return rc;
		if (l == 0)
			c->times[t] = dt;
	}
	return DVAR_OK;
}

static dvar_strategy *cuda_strategy(int replicas, const int *devs, int ndev, unsigned flags)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = replicas;
	o.device = DVAR_DEVICE_CUDA;
	o.cuda_devices = devs;
	o.num_cuda_devices = ndev;
	o.flags = flags;
	bench_check(dvar_strategy_create(&s, &o), "a CUDA strategy");
	return s;
}

/* A failed run: CUDA's message when a replica's own call failed, else dvar's. */
static void run_check(int rc, const ar_case *c, int R, const char *what)
{
	if (rc == DVAR_OK)
		return;
	for (int l = 0; l < R; l++)
		if (c->err[l][0])
			bench_fatal("%s: local replica %d: %s", what, l, c->err[l]);
	bench_check(rc, what);
}

/* One dvar pass over every size; the medians go to rows[].fixed or .flag. */
static void dvar_pass(unsigned flags, const float *ones, int *N_out)
{
	dvar_strategy *s = cuda_strategy(g.R, g.devs, g.ndev, flags);
	float *dbuf[MAX_LOCAL];
	ar_case c;

	memset(&c, 0, sizeof c);
	memset(dbuf, 0, sizeof dbuf);
	c.dbuf = dbuf;
	c.ones = ones;
	*N_out = dvar_strategy_num_replicas_in_sync(s);
	run_check(dvar_strategy_run(s, ar_alloc_fn, &c), &c, dvar_strategy_local_replicas(s),
	          "device buffers");
	for (int k = 0; k < nrows; k++) {
		size_t bytes = rows[k].bytes;
		long wrong = 0;

		c.count = bytes / sizeof(float);
		c.iters = iters_for(bytes);
		run_check(dvar_strategy_run(s, ar_fn, &c), &c, dvar_strategy_local_replicas(s),
		          flags ? "dvar all_reduce (NCCL_ALL_REDUCE)" : "dvar all_reduce");
		for (int l = 0; l < dvar_strategy_local_replicas(s); l++)
			wrong += c.wrong[l];
		rows[k].wrong += sum_over_workers(wrong);
		if (flags)
			rows[k].flag = bench_median(c.times, g.trials);
		else
			rows[k].fixed = bench_median(c.times, g.trials);
		if (g.rank == 0 && g.progress)
			fprintf(stderr, "\r%s: dvar%s %zu bytes   ", PROGRAM, flags ? " (NCCL)" : "", bytes);
	}
	dvar_strategy_run(s, ar_free_fn, &c);
	dvar_strategy_free(s);
}

#if DVAR_WITH_NCCL
/* ncclAllReduce called directly, on the same sizes: one communicator per
 * GPU of this process (ncclCommInitAll), or one per rank under mpirun. */
static void nccl_pass(const float *ones, int *n_out)
{
	int nd = g.W > 1 ? 1 : g.ndev, n = g.W > 1 ? g.W : g.ndev;
	ncclComm_t comms[MAX_GPUS];
	cudaStream_t st[MAX_GPUS];
	float *buf[MAX_GPUS];

	*n_out = n;
	if (g.W > 1) {
#if DVAR_WITH_MPI
		ncclUniqueId id;

		if (g.rank == 0)
			nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
		MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
		cuda_check(cudaSetDevice(g.devs[0]), "cudaSetDevice");
		nccl_check(ncclCommInitRank(&comms[0], g.W, id, g.rank), "ncclCommInitRank");
#endif
	} else {
		nccl_check(ncclCommInitAll(comms, nd, g.devs), "ncclCommInitAll");
	}
	for (int d = 0; d < nd; d++) {
		cuda_check(cudaSetDevice(g.devs[d]), "cudaSetDevice");
		cuda_check(cudaMalloc((void **)&buf[d], g.max_bytes), "cudaMalloc");
		cuda_check(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking), "a stream");
	}
	for (int k = 0; k < nrows; k++) {
		size_t bytes = rows[k].bytes, count = bytes / sizeof(float);
		size_t probe[3] = { 0, count / 2, count - 1 };
		int iters = iters_for(bytes);
		double times[MAX_TRIALS];
		long wrong = 0;

		for (int d = 0; d < nd; d++)
			cuda_check(cudaMemcpy(buf[d], ones, bytes, cudaMemcpyHostToDevice), "upload");
		for (int it = -1; it < g.warmup; it++) {
			nccl_check(ncclGroupStart(), "ncclGroupStart");
			for (int d = 0; d < nd; d++)
				nccl_check(ncclAllReduce(buf[d], buf[d], count, ncclFloat32, ncclSum, comms[d],
				                         st[d]),
				           "ncclAllReduce");
			nccl_check(ncclGroupEnd(), "ncclGroupEnd");
			for (int d = 0; d < nd; d++)
				cuda_check(cudaStreamSynchronize(st[d]), "cudaStreamSynchronize");
			if (it == -1) {
				/* the check, then zeros for the timed ones */
				for (int d = 0; d < nd; d++) {
					for (int p = 0; p < 3; p++) {
						float x = 0;

						cuda_check(cudaMemcpy(&x, buf[d] + probe[p], sizeof x,
						                      cudaMemcpyDeviceToHost),
						           "probe");
						wrong += x != (float)n;
					}
					cuda_check(cudaMemset(buf[d], 0, bytes), "memset");
				}
			}
		}
		for (int t = 0; t < g.trials; t++) {
			double t0;

			barrier();
			t0 = bench_now();
			for (int it = 0; it < iters; it++) {
				nccl_check(ncclGroupStart(), "ncclGroupStart");
				for (int d = 0; d < nd; d++)
					nccl_check(ncclAllReduce(buf[d], buf[d], count, ncclFloat32, ncclSum,
					                         comms[d], st[d]),
					           "ncclAllReduce");
				nccl_check(ncclGroupEnd(), "ncclGroupEnd");
			}
			for (int d = 0; d < nd; d++)
				cuda_check(cudaStreamSynchronize(st[d]), "cudaStreamSynchronize");
			times[t] = max_over_workers((bench_now() - t0) / iters);
		}
		rows[k].nccl = bench_median(times, g.trials);
		rows[k].wrong += sum_over_workers(wrong);
		if (g.rank == 0 && g.progress)
			fprintf(stderr, "\r%s: ncclAllReduce %zu bytes   ", PROGRAM, bytes);
	}
	for (int d = 0; d < nd; d++) {
		cudaSetDevice(g.devs[d]);
		cudaFree(buf[d]);
		cudaStreamDestroy(st[d]);
		ncclCommDestroy(comms[d]);
	}
}
#endif

/* One GPU: a device-to-device copy of the same bytes, the memory's limit
 * next to which the replicas' local reduction is measured. */
static void d2d_pass(void)
{
	float *a, *b;
	cudaStream_t st;

	cuda_check(cudaSetDevice(g.devs[0]), "cudaSetDevice");
	cuda_check(cudaMalloc((void **)&a, g.max_bytes), "cudaMalloc");
	cuda_check(cudaMalloc((void **)&b, g.max_bytes), "cudaMalloc");
	cuda_check(cudaMemset(a, 0, g.max_bytes), "memset");
	cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "a stream");
	for (int k = 0; k < nrows; k++) {
		size_t bytes = rows[k].bytes;
		int iters = iters_for(bytes);
		double times[MAX_TRIALS];

		for (int i = 0; i < g.warmup; i++)
			cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st), "copy");
		cuda_check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
		for (int t = 0; t < g.trials; t++) {
			double t0 = bench_now();

			/* synchronized after each copy, as dvar's calls are */
			for (int i = 0; i < iters; i++) {
				cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st), "copy");
				cuda_check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
			}
			times[t] = (bench_now() - t0) / iters;
		}
		rows[k].d2d = bench_median(times, g.trials);
	}
	cudaStreamDestroy(st);
	cudaFree(a);
	cudaFree(b);
}

static double busbw(size_t bytes, double t, int n)
{
	return t > 0 ? (double)bytes / t / 1e9 * 2.0 * (n - 1) / n : 0;
}

static void allreduce_part(void)
{
	int N = 0, N2 = 0, n_nccl = 0;
	int one_gpu = g.W == 1 && g.ndev == 1;
	float *ones;
	size_t count = g.max_bytes / sizeof(float);
	double sum_fixed = 0, sum_flag = 0, sum_nccl = 0;

	cuda_check(cudaHostAlloc((void **)&ones, g.max_bytes, cudaHostAllocPortable),
	           "cudaHostAlloc");
	for (size_t i = 0; i < count; i++)
		ones[i] = 1.0f;
	/* min, 4 min, 16 min, ... up to max */
	memset(rows, 0, sizeof rows);
	nrows = 0;
	for (size_t bytes = g.min_bytes; bytes <= g.max_bytes && nrows < MAX_SIZES; bytes *= 4) {
		rows[nrows++].bytes = bytes;
		if (bytes > g.max_bytes / 4)
			break;
	}

	dvar_pass(0, ones, &N);
	if (one_gpu) {
		d2d_pass();
	} else {
		dvar_pass(DVAR_STRATEGY_NCCL_ALL_REDUCE, ones, &N2);
#if DVAR_WITH_NCCL
		nccl_pass(ones, &n_nccl);
#endif
	}
	cudaFreeHost(ones);
	if (g.rank == 0 && g.progress)
		fprintf(stderr, "\r%60s\r", "");
	if (g.rank != 0)
		return;

	printf("#\n# (1) all-reduce, float32 SUM in place over device buffers\n");
	if (one_gpu) {
		printf("# R = %d replicas sharing GPU %d: dvar's kernels combine them on the GPU. NCCL\n"
		       "# needs at least 2 GPUs, so there is no NCCL column: the comparison is a\n"
		       "# device-to-device cudaMemcpy of the same bytes (synchronized after each copy,\n"
		       "# as each dvar call is). busbw uses n = R = %d.\n",
		       N, g.devs[0], N);
		if (N == 1)
			printf("# With R = 1 there is nothing to reduce: use --replicas 2 or more.\n");
		printf("#\n# %12s %12s %6s | %10s %11s %11s | %10s %11s | %7s %6s\n", "size(B)", "count",
		       "iters", "dvar us", "algbw(GB/s)", "busbw(GB/s)", "D2D us", "D2D (GB/s)",
		       "ratio", "#wrong");
		for (int k = 0; k < nrows; k++) {
			row *r = &rows[k];
			double alg = r->bytes / r->fixed / 1e9, d2d = r->bytes / r->d2d / 1e9;

			printf("  %12zu %12zu %6d | %10.1f %11.3f %11.3f | %10.1f %11.3f | %7.2f %6ld\n",
			       r->bytes, r->bytes / sizeof(float), iters_for(r->bytes), r->fixed * 1e6, alg,
			       busbw(r->bytes, r->fixed, N), r->d2d * 1e6, d2d, alg / d2d, r->wrong);
			sum_fixed += busbw(r->bytes, r->fixed, N);
		}
		printf("# ratio = dvar algbw / D2D GB/s\n");
		printf("# Avg bus bandwidth: dvar %.3f GB/s\n", nrows ? sum_fixed / nrows : 0);
		return;
	}
	printf("# dvar: n = %d replicas (R = %d per worker, W = %d); ncclAllReduce: n = %d ranks "
	       "(%s)\n",
	       N, N / g.W, g.W, n_nccl,
	       g.W > 1 ? "one per process, ncclCommInitRank" : "one per GPU, ncclCommInitAll");
	printf("# fixed = dvar's default order; flag = DVAR_STRATEGY_NCCL_ALL_REDUCE; NCCL = "
	       "ncclAllReduce alone\n");
	printf("# ratios are busbw over NCCL's busbw\n#\n");
	printf("# %12s %12s %6s | %10s %9s %9s | %10s %9s %9s | %10s %9s %9s | %6s %6s %6s\n",
	       "size(B)", "count", "iters", "fixed us", "algbw", "busbw", "flag us", "algbw", "busbw",
	       "NCCL us", "algbw", "busbw", "fix/N", "flag/N", "#wrong");
	for (int k = 0; k < nrows; k++) {
		row *r = &rows[k];
		double bf = busbw(r->bytes, r->fixed, N), bg = busbw(r->bytes, r->flag, N2);
		double bn = busbw(r->bytes, r->nccl, n_nccl);
		char rf[16] = "-", rg[16] = "-";

		if (bn > 0) {
			snprintf(rf, sizeof rf, "%.2f", bf / bn);
			snprintf(rg, sizeof rg, "%.2f", bg / bn);
		}
		printf("  %12zu %12zu %6d | %10.1f %9.3f %9.3f | %10.1f %9.3f %9.3f | %10.1f %9.3f "
		       "%9.3f | %6s %6s %6ld\n",
		       r->bytes, r->bytes / sizeof(float), iters_for(r->bytes), r->fixed * 1e6,
		       r->fixed > 0 ? r->bytes / r->fixed / 1e9 : 0, bf, r->flag * 1e6,
		       r->flag > 0 ? r->bytes / r->flag / 1e9 : 0, bg, r->nccl * 1e6,
		       r->nccl > 0 ? r->bytes / r->nccl / 1e9 : 0, bn, rf, rg, r->wrong);
		sum_fixed += bf;
		sum_flag += bg;
		sum_nccl += bn;
	}
	printf("# algbw and busbw in GB/s (10^9 B/s)\n");
	if (nrows)
		printf("# Avg bus bandwidth: fixed %.3f GB/s, flag %.3f GB/s, NCCL %.3f GB/s\n",
		       sum_fixed / nrows, sum_flag / nrows, sum_nccl / nrows);
}

/* ---------------------------------------------------------------- (2) snapshot */

typedef struct {
	double stall[MAX_TRIALS], total[MAX_TRIALS], memcpy_[MAX_TRIALS];
	int n;
} snap_series;

/* Variable v's bytes: pseudo-random floats (incompressible, as trained
 * weights are), reproducible for the read-back check. */
static void fill_var(float *buf, size_t count, int v)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(v + 1);

	for (size_t i = 0; i < count; i++)
		buf[i] = (float)((double)(bench_xorshift(&x) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static void snapshot_part(void)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	dvar_variable **vars;
	uint64_t var_bytes = g.snap_bytes / (uint64_t)g.vars / 4096 * 4096, bytes, avail = 0;
	size_t count;
	float *host, *pinned, *dev;
	cudaStream_t st;
	char root[4200];
	snap_series ss;
	long wrong = 0;
	double stall, total, cp;

	if (var_bytes == 0)
		bench_fatal("--bytes over --vars leaves less than 4 KiB per variable");
	bytes = var_bytes * (uint64_t)g.vars;
	count = var_bytes / sizeof(float);
	if (bench_scratch_create(g.dir, "dvar-bench-cuda", NULL) != 0)
		bench_fatal("cannot make a scratch folder in %s: %s", g.dir, strerror(errno));
	if (bench_free_space(g.dir, &avail) == 0 && avail < bench_space_needed(2, bytes))
		bench_fatal("%s has %.1f GiB free; the snapshot part needs about %.1f GiB "
		            "(--bytes, --dir)",
		            g.dir, BENCH_GIB(avail), BENCH_GIB(bench_space_needed(2, bytes)));
	snprintf(root, sizeof root, "%s/ckpt", bench_scratch());

	/* One replica on this worker's first GPU, alone (workers = 1). */
	o.replicas = 1;
	o.workers = 1;
	o.device = DVAR_DEVICE_CUDA;
	o.cuda_devices = g.devs;
	o.num_cuda_devices = 1;
	bench_check(dvar_strategy_create(&s, &o), "a CUDA strategy for the snapshot");
	host = malloc(var_bytes);
	vars = calloc((size_t)g.vars, sizeof *vars);
	if (!host || !vars)
		bench_fatal("out of memory");
	for (int v = 0; v < g.vars; v++) {
		dvar_variable_spec sp = DVAR_VARIABLE_SPEC_INIT;
		char name[32];

		snprintf(name, sizeof name, "layer%03d/kernel", v);
		fill_var(host, count, v);
		sp.name = name;
		sp.dtype = DVAR_FLOAT32;
		sp.shape.rank = 2;
		sp.shape.dims[0] = (int64_t)(var_bytes / 4096);
		sp.shape.dims[1] = 1024;
		sp.initial_value = host;
		bench_check(dvar_variable_create(&vars[v], s, &sp), "dvar_variable_create");
	}

	/* The plain copy: the same bytes, in as many copies, into pinned memory. */
	cuda_check(cudaSetDevice(g.devs[0]), "cudaSetDevice");
	cuda_check(cudaMalloc((void **)&dev, bytes), "cudaMalloc");
	cuda_check(cudaMemset(dev, 0, bytes), "cudaMemset");
	cuda_check(cudaHostAlloc((void **)&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc");
	memset(pinned, 0, bytes);
	cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "a stream");

	wo.flags = g.fsync ? 0 : DVAR_WRITE_NO_FSYNC;
	wo.compress = g.compress;
	wo.keep_last = 1; /* one checkpoint on disk at a time */
	so.write = &wo;
	so.flags = DVAR_SAVE_SKIP_REPLICA_CHECK; /* R = 1: nothing to compare anyway */

	/* Warm-up: the store allocates and pins its staging on the first save. */
	bench_check(dvar_save_async(s, root, 1, vars, (size_t)g.vars, &so), "dvar_save_async");
	bench_check(dvar_save_wait(s), "dvar_save_wait");
	memset(&ss, 0, sizeof ss);
	for (int r = 0; r < g.runs; r++) {
		/* the two take turns going first */
		for (int k = 0; k < 2; k++) {
			if ((k + r) % 2 == 0) {
				double t0 = bench_now(), t1;

				bench_check(dvar_save_async(s, root, 2 + r, vars, (size_t)g.vars, &so),
				            "dvar_save_async");
				t1 = bench_now();
				bench_check(dvar_save_wait(s), "dvar_save_wait");
				ss.stall[r] = t1 - t0;
				ss.total[r] = bench_now() - t0;
			} else {
				double t0 = bench_now();

				for (int v = 0; v < g.vars; v++)
					cuda_check(cudaMemcpyAsync((char *)pinned + (size_t)v * var_bytes,
					                           (char *)dev + (size_t)v * var_bytes, var_bytes,
					                           cudaMemcpyDeviceToHost, st),
					           "cudaMemcpyAsync");
				cuda_check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
				ss.memcpy_[r] = bench_now() - t0;
			}
		}
		ss.n++;
		if (g.progress)
			fprintf(stderr, "\r%s: snapshot run %d of %d   ", PROGRAM, r + 1, g.runs);
	}
	if (g.progress)
		fprintf(stderr, "\r%60s\r", "");

	/* The last checkpoint holds what the variables held. */
	{
		dvar_reader *rd = NULL;
		float *back = malloc(var_bytes);
		int check[2] = { 0, g.vars - 1 };

		if (!back)
			bench_fatal("out of memory");
		bench_check(dvar_reader_open(&rd, root, NULL), "dvar_reader_open");
		for (int c = 0; c < 2; c++) {
			char name[32];
			size_t i;

			snprintf(name, sizeof name, "layer%03d/kernel", check[c]);
			bench_check(dvar_reader_find(rd, name, &i), "dvar_reader_find");
			bench_check(dvar_reader_read(rd, i, NULL, back, var_bytes), "dvar_reader_read");
			fill_var(host, count, check[c]);
			for (size_t e = 0; e < count; e++)
				wrong += memcmp(&back[e], &host[e], sizeof(float)) != 0;
		}
		dvar_reader_free(rd);
		free(back);
	}

	stall = bench_median(ss.stall, ss.n);
	total = bench_median(ss.total, ss.n);
	cp = bench_median(ss.memcpy_, ss.n);
	printf("#\n# (2) snapshot: %d float32 variables, %.3f GiB on GPU %d, one replica; "
	       "write %s, compression %s\n",
	       g.vars, BENCH_GIB(bytes), g.devs[0], g.fsync ? "with fsync" : "without fsync",
	       bench_compress_name(g.compress));
	printf("# scratch %s; median of %d runs [min-max]\n#\n", bench_scratch(), ss.n);
	{
		double lo, hi;

		printf("  %-52s %9s %8s  %s\n", "what", "s", "GB/s", "[min-max GB/s]");
		bench_min_max(ss.memcpy_, ss.n, &lo, &hi);
		printf("  %-52s %9.4f %8.2f  [%.2f-%.2f]\n",
		       "cudaMemcpyAsync D2H into cudaHostAlloc + sync", cp, bytes / cp / 1e9,
		       bytes / hi / 1e9, bytes / lo / 1e9);
		bench_min_max(ss.stall, ss.n, &lo, &hi);
		printf("  %-52s %9.4f %8.2f  [%.2f-%.2f]\n", "dvar_save_async until it returns (stall)",
		       stall, bytes / stall / 1e9, bytes / hi / 1e9, bytes / lo / 1e9);
		bench_min_max(ss.total, ss.n, &lo, &hi);
		printf("  %-52s %9.4f %8.2f  [%.2f-%.2f]\n", "dvar_save_async + dvar_save_wait (written)",
		       total, bytes / total / 1e9, bytes / hi / 1e9, bytes / lo / 1e9);
	}
	printf("# read back: %ld wrong of %zu elements checked\n", wrong, 2 * count);
	{
		bench_goal gl[1] = { { "stall GB/s over the plain pinned copy's (median ratio)",
		                       bench_median_ratio(ss.memcpy_, ss.n, ss.stall, ss.n), 0.9, 0,
		                       "x" } };
		bench_goal_style style = { 56, 8, 2, 1, 1 };

		bench_print_goals(gl, 1, &style);
	}

	cudaStreamDestroy(st);
	cudaFreeHost(pinned);
	cudaFree(dev);
	for (int v = 0; v < g.vars; v++)
		dvar_variable_free(vars[v]);
	free(vars);
	free(host);
	dvar_strategy_free(s);
	bench_scratch_remove();
}

/* ---------------------------------------------------------------- main */

static void print_header(void)
{
	struct cudaDeviceProp prop;
	int drv = 0, rt = 0;
	double l1 = bench_load_average();

	memset(&prop, 0, sizeof prop);
	cudaGetDeviceProperties(&prop, g.devs[0]);
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	printf("# %s, dvar %s\n", PROGRAM, dvar_version());
	printf("# command: %s\n", g.cmdline);
	printf("# GPU %d: %s, %.1f GiB, compute capability %d.%d; %d visible on this node\n",
	       g.devs[0], prop.name, BENCH_GIB(prop.totalGlobalMem), prop.major, prop.minor, g.G);
	printf("# CUDA driver %d.%d, runtime %d.%d", drv / 1000, drv % 1000 / 10, rt / 1000,
	       rt % 1000 / 10);
#if DVAR_WITH_NCCL
	{
		int v = 0;

		ncclGetVersion(&v);
		printf(", NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	}
#else
	printf(", no NCCL in this build");
#endif
	printf("\n# workers W = %d, GPUs per worker %d\n", g.W, g.ndev);
	if (l1 >= 0)
		printf("# load average (1 min) at start: %.2f on %ld CPUs\n", l1,
		       sysconf(_SC_NPROCESSORS_ONLN));
	printf("# median of %d trials; iterations per trial %s; %d warm-up\n", g.trials,
	       g.iters ? "fixed" : "about 0.05 s at 40 GB/s (5..1000)", g.warmup);
	fflush(stdout);
}

static const char *env_get(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int main(int argc, char **argv)
{
	static bench_program prog = { PROGRAM, -1, usage, on_fatal, NULL };
	int rc;

	g.W = 1;
	g.progress = isatty(2);
#if DVAR_WITH_MPI
	/* Under mpirun: one process per GPU. Started directly: no MPI at all. */
	if (env_get("OMPI_COMM_WORLD_SIZE")) {
		g.mpi = 1;
		if (!bench_mpi_init(&argc, &argv, &prog, &g.rank, &g.W)) {
			if (g.rank == 0)
				fprintf(stderr, "%s: MPI gives no MPI_THREAD_SERIALIZED support\n", PROGRAM);
			finish(1);
		}
	} else
#endif
	{
		bench_init(&prog);
	}
	parse_args(argc, argv);
	g.local_rank = g.rank;
	g.local_size = g.W;
	if (env_get("OMPI_COMM_WORLD_LOCAL_RANK") && env_get("OMPI_COMM_WORLD_LOCAL_SIZE")) {
		g.local_rank = atoi(env_get("OMPI_COMM_WORLD_LOCAL_RANK"));
		g.local_size = atoi(env_get("OMPI_COMM_WORLD_LOCAL_SIZE"));
	}

	/* No GPU: nothing to measure. */
	rc = dvar_cuda_device_count(&g.G);
	if (min_over_workers(rc == DVAR_OK) != 1) {
		if (g.rank == 0)
			printf("%s: skipped: %s\n", PROGRAM,
			       rc != DVAR_OK ? dvar_error_last()->message : "a worker has no CUDA device");
		finish(0);
	}
	if (g.W > 1) {
		int ok = DVAR_WITH_NCCL && g.local_size <= g.G;

		if (min_over_workers(ok) != 1) {
			if (g.rank == 0)
				printf("%s: skipped: %d processes on a node with %d GPU(s): each needs a GPU of "
				       "its own (NCCL cannot put two ranks on one GPU)%s\n",
				       PROGRAM, g.local_size, g.G, DVAR_WITH_NCCL ? "" : ", and NCCL is not built");
			finish(0);
		}
		g.devs[0] = g.local_rank;
		g.ndev = 1;
		if (!g.R)
			g.R = 1;
	} else {
		if (!g.ndev) {
			g.ndev = g.G < MAX_GPUS ? g.G : MAX_GPUS;
			for (int d = 0; d < g.ndev; d++)
				g.devs[d] = d;
		}
		if (g.ndev > 1 && !DVAR_WITH_NCCL) {
			printf("%s: skipped: %d GPUs but no NCCL in this build; use --devices N for one\n",
			       PROGRAM, g.ndev);
			finish(0);
		}
		if (!g.R)
			g.R = g.ndev > 1 ? g.ndev : 4;
	}

	if (g.rank == 0)
		print_header();
	if (!g.skip_allreduce)
		allreduce_part();
	if (!g.skip_snapshot) {
		/* Worker 0 alone; the others sleep meanwhile. */
		if (g.rank == 0) {
			snapshot_part();
#if DVAR_WITH_MPI
			if (g.mpi)
				bench_mpi_release();
#endif
		} else {
#if DVAR_WITH_MPI
			bench_mpi_hold();
#endif
		}
	}
	fflush(stdout);
	finish(0);
	return 0;
}
