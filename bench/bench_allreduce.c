/*
 * bench_allreduce.c - dvar_replica_all_reduce next to MPI_Allreduce on the
 * same sizes, in the same processes, reported the way nccl-tests does.
 *
 * Run under mpirun (W processes) with R replicas per worker. For each size
 * (float32, SUM, in place) it times:
 *   - dvar: inside a replica function of dvar_strategy_run, between barriers
 *     (a one-element all_reduce), so run's dispatch is not counted; the time
 *     of an iteration is the slowest replica's mean;
 *   - MPI: MPI_Allreduce on MPI_COMM_WORLD from the main thread, outside any
 *     run, on its own buffer; the slowest rank's mean.
 * algbw = bytes / time, busbw = algbw * 2(n-1)/n with n = R*W for dvar and
 * n = W for MPI (nccl-tests' all_reduce factor). Each figure is the median
 * of --trials trials, each of --iters iterations after warm-up ones.
 *
 * Then, on worker 0 alone (the other workers sleep), the local part: a
 * single-worker strategy whose R threads all-reduce the same sizes, next to
 * a one-thread memcpy of the same bytes. Before timing, each size is checked
 * once with known values. Nothing is asserted: the figures are what was
 * measured. See bench/README.md.
 */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchmpi.h"
#include "benchutil.h"
#include "dvar/dvar.h"

#define MAX_TRIALS 64 /* at most BENCH_MAX_SAMPLES */

static struct {
	int R;
	size_t min_bytes, max_bytes;
	int iters; /* 0: chosen per size */
	int warmup;
	int trials;
	int rank, W;
} g = { .R = 1, .min_bytes = 4096, .max_bytes = 256u << 20, .warmup = 2, .trials = 5 };

/* About 0.2 s of work per trial at 1 GB/s, 2..1000 iterations. */
static int iters_for(size_t bytes)
{
	double n = 2e8 / (double)bytes;

	if (g.iters > 0)
		return g.iters;
	return n < 2 ? 2 : n > 1000 ? 1000 : (int)n;
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
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end != '\0' || v < 4)
		return -1;
	*out = (size_t)v;
	return 0;
}

static void usage(FILE *to)
{
	fprintf(to,
	        "usage: mpirun -np W dvar_bench_allreduce [--replicas R] [--min 4K] [--max 256M]\n"
	        "                                         [--iters N] [--warmup N] [--trials N]\n"
	        "Sizes go from --min to --max by factors of 4 (bytes; K, M, G suffixes).\n");
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			if (g.rank == 0)
				usage(stdout);
			return 1;
		}
		if (!v)
			goto bad;
		i++;
		if (!strcmp(a, "--replicas"))
			g.R = atoi(v);
		else if (!strcmp(a, "--min")) {
			if (parse_size(v, &g.min_bytes))
				goto bad;
		} else if (!strcmp(a, "--max")) {
			if (parse_size(v, &g.max_bytes))
				goto bad;
		} else if (!strcmp(a, "--iters"))
			g.iters = atoi(v);
		else if (!strcmp(a, "--warmup"))
			g.warmup = atoi(v);
		else if (!strcmp(a, "--trials"))
			g.trials = atoi(v);
		else
			goto bad;
	}
	if (g.R < 1 || g.R > 256 || g.iters < 0 || g.warmup < 0 || g.trials < 1 ||
	    g.trials > MAX_TRIALS || g.min_bytes > g.max_bytes)
		goto bad;
	g.min_bytes &= ~(size_t)3;
	g.max_bytes &= ~(size_t)3;
	return 0;
bad:
	if (g.rank == 0)
		usage(stderr);
	return 2;
}

/* ---------------------------------------------------------------- dvar */

typedef struct {
	float **bufs; /* one per local replica, max_bytes each */
	size_t count;
	int iters;
	double times[MAX_TRIALS]; /* per trial: the slowest replica's mean, s */
	long wrong[256];          /* per local replica: elements that failed the check */
} dvar_case;

static int barrier(dvar_replica *ctx)
{
	float x = 0;

	return dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, &x, &x, 1);
}

static int dvar_case_fn(dvar_replica *ctx, void *arg)
{
	dvar_case *c = arg;
	int local = dvar_replica_local_id(ctx), id = dvar_replica_id(ctx);
	int N = dvar_replica_num_replicas(ctx);
	float *buf = c->bufs[local];
	const float want = (float)N * (float)(N + 1) / 2.0f;
	size_t probe[3] = { 0, c->count / 2, c->count - 1 };
	int rc;

	/* Check once with replica id + 1 everywhere: the sum is N(N+1)/2. */
	for (size_t i = 0; i < c->count; i++)
		buf[i] = (float)(id + 1);
	if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, c->count)))
		return rc;
	c->wrong[local] = 0;
	for (int p = 0; p < 3; p++)
		c->wrong[local] += buf[probe[p]] != want;
	/* Zeros while timing: values stay finite whatever the iteration count. */
	memset(buf, 0, c->count * sizeof(float));
	for (int i = 0; i < g.warmup; i++)
		if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf,
		                                  c->count)))
			return rc;
	for (int t = 0; t < g.trials; t++) {
		double t0, dt;

		if ((rc = barrier(ctx)))
			return rc;
		t0 = bench_now();
		for (int i = 0; i < c->iters; i++)
			if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf,
			                                  buf, c->count)))
				return rc;
		dt = (bench_now() - t0) / c->iters;
		if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_FLOAT64, &dt, &dt, 1)))
			return rc;
		if (local == 0)
			c->times[t] = dt;
	}
	return DVAR_OK;
}

/* The median time of a dvar all_reduce of bytes; *wrong counts failed checks. */
static int time_dvar(dvar_strategy *s, float **bufs, size_t bytes, double *time, long *wrong)
{
	dvar_case c;
	int rc;

	memset(&c, 0, sizeof c);
	c.bufs = bufs;
	c.count = bytes / sizeof(float);
	c.iters = iters_for(bytes);
	rc = dvar_strategy_run(s, dvar_case_fn, &c);
	if (rc != DVAR_OK) {
		fprintf(stderr, "bench_allreduce: worker %d: %s\n", g.rank,
		        dvar_error_last()->message);
		return rc;
	}
	*wrong = 0;
	for (int l = 0; l < dvar_strategy_local_replicas(s); l++)
		*wrong += c.wrong[l];
	*time = bench_median(c.times, g.trials);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- MPI */

static double time_mpi(float *buf, size_t bytes, long *wrong)
{
	int count = (int)(bytes / sizeof(float)), iters = iters_for(bytes);
	const float want = (float)g.W * (float)(g.W + 1) / 2.0f;
	double times[MAX_TRIALS];

	for (int i = 0; i < count; i++)
		buf[i] = (float)(g.rank + 1);
	MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	*wrong = (buf[0] != want) + (buf[count / 2] != want) + (buf[count - 1] != want);
	memset(buf, 0, bytes);
	for (int i = 0; i < g.warmup; i++)
		MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	for (int t = 0; t < g.trials; t++) {
		double t0, dt, slowest;

		MPI_Barrier(MPI_COMM_WORLD);
		t0 = bench_now();
		for (int i = 0; i < iters; i++)
			MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		dt = (bench_now() - t0) / iters;
		MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		times[t] = slowest;
	}
	return bench_median(times, g.trials);
}

/* ---------------------------------------------------------------- local part */

static double time_memcpy(void *dst, const void *src, size_t bytes)
{
	int iters = iters_for(bytes);
	double times[MAX_TRIALS];

	for (int i = 0; i < g.warmup; i++)
		memcpy(dst, src, bytes);
	for (int t = 0; t < g.trials; t++) {
		double t0 = bench_now();
		for (int i = 0; i < iters; i++) {
			memcpy(dst, src, bytes);
			/* keep the copies from being merged or dropped */
			__asm__ __volatile__("" : : "r"(dst) : "memory");
		}
		times[t] = (bench_now() - t0) / iters;
	}
	return bench_median(times, g.trials);
}

static int local_part(float **bufs, float *spare)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	double sum_ratio = 0;
	int rows = 0, rc;

	if (g.R == 1) {
		printf("#\n# Local part: R = 1, one replica per worker has nothing to reduce "
		       "locally.\n");
		return DVAR_OK;
	}
	o.replicas = g.R;
	o.workers = 1;
	if ((rc = dvar_strategy_create(&s, &o)) != DVAR_OK) {
		fprintf(stderr, "bench_allreduce: %s\n", dvar_error_last()->message);
		return rc;
	}
	printf("#\n# Local part, worker 0 alone (W = 1), R = %d threads reducing in place, vs a\n"
	       "# one-thread memcpy of the same bytes. ratio = reduce algbw / memcpy GB/s.\n#\n",
	       g.R);
	printf("# %12s %12s %10s %11s %10s %11s %7s %6s\n", "size(B)", "count", "time(us)",
	       "algbw(GB/s)", "memcpy(us)", "memcpy GB/s", "ratio", "#wrong");
	for (size_t bytes = g.min_bytes; bytes <= g.max_bytes; bytes *= 4) {
		double t, tm;
		long wrong = 0;

		if ((rc = time_dvar(s, bufs, bytes, &t, &wrong)) != DVAR_OK)
			break;
		tm = time_memcpy(spare, bufs[0], bytes);
		printf("  %12zu %12zu %10.1f %11.3f %10.1f %11.3f %7.2f %6ld\n", bytes,
		       bytes / sizeof(float), t * 1e6, bytes / t / 1e9, tm * 1e6, bytes / tm / 1e9,
		       tm / t, wrong);
		fflush(stdout);
		sum_ratio += tm / t;
		rows++;
		if (bytes > g.max_bytes / 4)
			break;
	}
	if (rows)
		printf("# Avg ratio to memcpy: %.2f\n", sum_ratio / rows);
	dvar_strategy_free(s);
	return rc;
}

/* Wait for worker 0 without spinning on a core it needs. */
/* Other work on the machine skews every figure: say how busy it was. */
static void print_load(void)
{
	double l1 = bench_load_average();

	if (l1 >= 0)
		printf("# load average (1 min) at start: %.2f on %ld CPUs\n", l1,
		       sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	float **bufs, *mpi_buf;
	int provided, rc, N;
	double sum_dvar = 0, sum_mpi = 0;
	int rows = 0, failed = 0;

	MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g.W);
	if ((rc = parse_args(argc, argv)) != 0) {
		MPI_Finalize();
		return rc == 1 ? 0 : 2;
	}
	if (provided < MPI_THREAD_FUNNELED) {
		if (g.rank == 0)
			fprintf(stderr, "bench_allreduce: MPI gives no thread support\n");
		MPI_Finalize();
		return 1;
	}

	o.replicas = g.R;
	if ((rc = dvar_strategy_create(&s, &o)) != DVAR_OK) {
		fprintf(stderr, "bench_allreduce: worker %d: %s\n", g.rank,
		        dvar_error_last()->message);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	N = dvar_strategy_num_replicas_in_sync(s);

	/* Buffers allocated and touched once, up front. */
	bufs = calloc((size_t)g.R, sizeof *bufs);
	mpi_buf = malloc(g.max_bytes);
	if (!bufs || !mpi_buf) {
		fprintf(stderr, "bench_allreduce: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(mpi_buf, 0, g.max_bytes);
	for (int l = 0; l < g.R; l++) {
		if (!(bufs[l] = malloc(g.max_bytes))) {
			fprintf(stderr, "bench_allreduce: out of memory\n");
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		memset(bufs[l], 0, g.max_bytes);
	}

	if (g.rank == 0) {
		char ver[MPI_MAX_LIBRARY_VERSION_STRING], *nl;
		int len;

		MPI_Get_library_version(ver, &len);
		if ((nl = strchr(ver, '\n')))
			*nl = '\0';
		printf("# dvar %s all_reduce vs %s\n", dvar_version(), ver);
		printf("# float32 SUM in place; W = %d workers, R = %d replicas each: dvar n = %d, "
		       "MPI n = %d\n",
		       g.W, g.R, N, g.W);
		print_load();
		printf("# median of %d trials; iterations per trial %s; %d warm-up\n#\n", g.trials,
		       g.iters ? "fixed" : "about 0.2 s at 1 GB/s (2..1000)", g.warmup);
		printf("# %12s %12s %6s | %10s %11s %11s | %10s %11s %11s | %9s %6s\n", "size(B)",
		       "count", "iters", "dvar us", "algbw(GB/s)", "busbw(GB/s)", "MPI us",
		       "algbw(GB/s)", "busbw(GB/s)", "busbw d/M", "#wrong");
	}
	for (size_t bytes = g.min_bytes; bytes <= g.max_bytes; bytes *= 4) {
		double td, tm, algd, algm, busd, busm;
		long wd = 0, wm = 0, wrong = 0;

		if ((rc = time_dvar(s, bufs, bytes, &td, &wd)) != DVAR_OK) {
			failed = 1;
			break;
		}
		tm = time_mpi(mpi_buf, bytes, &wm);
		wrong = wd + wm;
		MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		algd = bytes / td / 1e9;
		algm = bytes / tm / 1e9;
		busd = algd * 2.0 * (N - 1) / N;
		busm = algm * 2.0 * (g.W - 1) / g.W;
		if (g.rank == 0) {
			char ratio[16] = "-";

			/* busbw is 0 for n = 1: no ratio then */
			if (busm > 0)
				snprintf(ratio, sizeof ratio, "%.2f", busd / busm);
			printf("  %12zu %12zu %6d | %10.1f %11.3f %11.3f | %10.1f %11.3f %11.3f | "
			       "%9s %6ld\n",
			       bytes, bytes / sizeof(float), iters_for(bytes), td * 1e6, algd, busd,
			       tm * 1e6, algm, busm, ratio, wrong);
			fflush(stdout);
		}
		sum_dvar += busd;
		sum_mpi += busm;
		rows++;
		if (bytes > g.max_bytes / 4)
			break;
	}
	if (g.rank == 0 && rows)
		printf("# Avg bus bandwidth: dvar %.3f GB/s, MPI %.3f GB/s\n", sum_dvar / rows,
		       sum_mpi / rows);
	dvar_strategy_free(s);

	/* The local part: worker 0 alone; the others sleep meanwhile. */
	if (!failed) {
		if (g.rank == 0) {
			local_part(bufs, mpi_buf);
			bench_mpi_release();
		} else {
			bench_mpi_hold();
		}
	}

	for (int l = 0; l < g.R; l++)
		free(bufs[l]);
	free(bufs);
	free(mpi_buf);
	MPI_Finalize();
	return failed;
}
