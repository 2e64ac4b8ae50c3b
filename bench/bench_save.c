/*
 * bench_save.c - saving the mirrored state of W workers: one writer (the
 * chief alone, TensorFlow's chief-only save), a full copy from every worker
 * (TensorFlow's documented multi-worker pattern), dvar_save with and without
 * the replica check, and dvar_save_async, next to the same machine's raw
 * writes and memcpy of the same bytes, measured in the same run.
 *
 * Run under mpirun (W processes, R replicas each). Each worker times from a
 * barrier to the end of its call; the slowest worker's wall time counts,
 * next to the CPU time of all workers together; each figure is the median
 * over --repeat repeats.
 * (c) and (d), whose difference is the replica check's cost, run back to
 * back twice each per repeat. Bytes written are the sizes (stat) of the
 * data files of the new checkpoint(s). Every checkpoint and scratch file is
 * removed as soon as it is measured, and the scratch folder at the end.
 * See bench/README.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "benchmpi.h"
#include "benchutil.h"
#include "dvar/dvar.h"

#define MAX_REPEAT BENCH_MAX_SAMPLES
#define PROGRAM "dvar_bench_save"

/* What is timed. The raw and memcpy figures are the machine's limits. */
enum {
	T_MEMCPY,
	T_RAW_SHARE,  /* every worker its plan share into its own file */
	T_RAW_ONE,    /* the chief, the whole state into one file */
	T_ONE_WRITER, /* (a) */
	T_EVERY,      /* (b) */
	T_SHARED,     /* (c) */
	T_SKIP,       /* (d) */
	T_STALL,      /* (e) until dvar_save_async returns */
	T_WAIT,       /* (e) until dvar_save_wait returns */
	T_UPDATE,     /* (f) an update of every variable, no save pending */
	T_HELD,       /* (f) the same, right after dvar_save_async returned */
	T_COUNT
};

/* The cases a repeat runs, in an order that rotates from repeat to repeat;
 * (c) and (d) run as a pair, twice each (c d d c, or d c c d). */
enum { K_RAW_SHARE, K_RAW_ONE, K_ONE_WRITER, K_EVERY, K_CHECK_PAIR, K_ASYNC, K_UPDATE, K_COUNT };

typedef struct {
	double wall[MAX_REPEAT]; /* seconds, the slowest worker */
	double cpu[MAX_REPEAT];  /* CPU seconds (user + system), summed over the workers */
	int n;
	uint64_t bytes; /* written, on disk (0: not a write) */
} series;

static struct {
	int rank, W, R;
	int vars, repeat, warmup, threads, fsync, progress;
	dvar_compress compress;
	uint64_t total_mib, var_bytes, unique;
	uint64_t share_off, share_bytes; /* this worker's share under dvar's plan */
	const char *dir;
	char scratch[4096];
	char shared_root[4200], every_root[4200];
	int direct_ok; /* raw writes could use O_DIRECT */
	unsigned char *src, *dst;
	dvar_strategy *s;
	dvar_variable **v;
	dvar_shape shape;
	series t[T_COUNT];
	double load_start;
	double t0, cpu0; /* this worker's clocks at the last start_timer */
} g;

/* One timed section: the slowest worker's wall time, every worker's CPU. */
typedef struct {
	double wall, cpu;
} sample;

/* The last step of a fatal error: the peers go too. */
static void abort_all(void)
{
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ------------------------------------------------------------------ timing */

/* Start a timed section: every worker leaves the same barrier. */
static void start_timer(void)
{
	bench_mpi_barrier();
	g.cpu0 = bench_cpu_self();
	g.t0 = bench_now();
}

/* This worker's wall and CPU time since start_timer. */
static sample lap(void)
{
	sample s = { bench_now() - g.t0, 0 };

	s.cpu = bench_cpu_self() - g.cpu0;
	return s;
}

/* The slowest worker's wall time and the sum of the CPU times; early
 * finishers sleep at the barrier. */
static sample combine(sample mine)
{
	sample all;

	bench_mpi_barrier();
	MPI_Allreduce(&mine.wall, &all.wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	MPI_Allreduce(&mine.cpu, &all.cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return all;
}

static void record(int which, sample s)
{
	series *x = &g.t[which];

	x->wall[x->n] = s.wall;
	x->cpu[x->n++] = s.cpu;
}

/* ------------------------------------------------------------------ data */

/*
 * Weights as an initializer leaves them: roughly N(0, 0.02^2) (the sum of
 * four uniforms, scaled), every mantissa bit busy, so neither zeros nor a
 * pattern a disk or lz4 could shortcut. The same bytes on every worker.
 */
static void fill_weights(float *dst, uint64_t n)
{
	const double scale = 0.02 * 1.7320508075688772 / 65536.0;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = bench_xorshift(&x);
		int64_t sum = (int64_t)(r & 0xffff) + (int64_t)(r >> 16 & 0xffff) +
		              (int64_t)(r >> 32 & 0xffff) + (int64_t)(r >> 48) - 131070;
		dst[i] = (float)((double)sum * scale);
	}
}

/* ------------------------------------------------------------------ files */

/* Sum of the sizes of the data files (data-*) in a checkpoint directory. */
static uint64_t data_bytes(const char *ckpt)
{
	DIR *d = opendir(ckpt);
	struct dirent *e;
	uint64_t sum = 0;
	int files = 0;

	if (!d)
		bench_fatal("cannot list checkpoint %s: %s", ckpt, strerror(errno));
	while ((e = readdir(d))) {
		struct stat st;

		if (strncmp(e->d_name, "data-", 5) != 0)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			bench_fatal("stat %s/%s: %s", ckpt, e->d_name, strerror(errno));
		sum += (uint64_t)st.st_size;
		files++;
	}
	closedir(d);
	if (files == 0)
		bench_fatal("checkpoint %s holds no data files", ckpt);
	return sum;
}

/*
 * Write bytes sequentially in 4 MiB blocks, then fsync (unless --no-fsync),
 * as bench_io does: O_DIRECT like dvar's writer, buffered (from then on)
 * where the file system refuses it. Returns seconds.
 */
static double raw_write(const char *path, const void *buf, uint64_t bytes)
{
	double t = bench_raw_write(path, buf, bytes, g.direct_ok, g.fsync);

	if (t < 0) {
		g.direct_ok = 0;
		t = bench_raw_write(path, buf, bytes, 0, g.fsync);
	}
	return t;
}

/* After a case: its files gone, and the deletes (and the discards a
 * `discard` mount issues at the journal commit) done before the next case. */
static void settle(void)
{
	bench_mpi_barrier();
	if (g.rank == 0)
		bench_syncfs(g.scratch);
	bench_mpi_barrier();
}

/* ------------------------------------------------------------------ checks */

/* Untimed, on the first repeat: the checkpoint holds every variable whole,
 * and the last one reads back as the bytes it was created from. */
static void verify(const char *ckpt)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;
	uint64_t raw = 0;
	char last[32];
	size_t idx;

	bench_check(dvar_reader_open(&r, ckpt, &ro), "verify: dvar_reader_open");
	if (dvar_reader_num_vars(r) != (size_t)g.vars)
		bench_fatal("%s holds %zu variables, expected %d", ckpt, dvar_reader_num_vars(r), g.vars);
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		dvar_var_info info;

		bench_check(dvar_reader_var(r, i, &info), "verify: dvar_reader_var");
		raw += info.raw_bytes;
	}
	if (raw != g.unique)
		bench_fatal("%s holds %llu bytes of values, expected %llu", ckpt, (unsigned long long)raw,
		      (unsigned long long)g.unique);
	snprintf(last, sizeof last, "var%03d", g.vars - 1);
	bench_check(dvar_reader_find(r, last, &idx), "verify: dvar_reader_find");
	bench_check(dvar_reader_read(r, idx, NULL, g.dst, g.var_bytes), "verify: dvar_reader_read");
	if (memcmp(g.dst, g.src + (uint64_t)(g.vars - 1) * g.var_bytes, g.var_bytes) != 0)
		bench_fatal("%s: '%s' reads back different bytes", ckpt, last);
	dvar_reader_free(r);
}

/* ------------------------------------------------------------------ cases */

static void write_options(dvar_write_options *wo)
{
	dvar_write_options init = DVAR_WRITE_OPTIONS_INIT;

	*wo = init;
	wo->compress = g.compress;
	wo->threads = g.threads;
	if (!g.fsync)
		wo->flags |= DVAR_WRITE_NO_FSYNC;
}

static void case_raw_share(void)
{
	char path[4300];
	sample t;
	uint64_t bytes, sum;

	snprintf(path, sizeof path, "%s/raw-%d.bin", g.scratch, g.rank);
	start_timer();
	raw_write(path, g.src + g.share_off, g.share_bytes);
	t = lap();
	record(T_RAW_SHARE, combine(t));
	bytes = bench_file_bytes(path);
	MPI_Allreduce(&bytes, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
	g.t[T_RAW_SHARE].bytes = sum;
	unlink(path);
}

static void case_raw_one(void)
{
	char path[4300];
	sample t = { 0, 0 };

	snprintf(path, sizeof path, "%s/raw-all.bin", g.scratch);
	start_timer();
	if (g.rank == 0) {
		raw_write(path, g.src, g.unique);
		t = lap();
	}
	record(T_RAW_ONE, combine(t));
	if (g.rank == 0) {
		g.t[T_RAW_ONE].bytes = bench_file_bytes(path);
		unlink(path);
	}
}

/* (a) The chief alone writes everything with the format API; the others
 * wait at the barrier. */
static void case_one_writer(int64_t step, int verify_it)
{
	char ckpt[4300];
	sample t = { 0, 0 };

	start_timer();
	if (g.rank == 0) {
		dvar_write_options wo;
		dvar_writer *w = NULL;

		write_options(&wo);
		bench_check(dvar_writer_open_step(&w, g.shared_root, step, &wo), "dvar_writer_open_step");
		for (int i = 0; i < g.vars; i++) {
			char name[32];

			snprintf(name, sizeof name, "var%03d", i);
			bench_check(dvar_writer_add(w, name, DVAR_FLOAT32, &g.shape, NULL,
			                      g.src + (uint64_t)i * g.var_bytes),
			      "dvar_writer_add");
		}
		bench_check(dvar_writer_commit(w), "dvar_writer_commit");
		t = lap();
		dvar_writer_free(w);
	}
	record(T_ONE_WRITER, combine(t));
	if (g.rank == 0) {
		bench_ckpt_path(ckpt, sizeof ckpt, g.shared_root, step);
		g.t[T_ONE_WRITER].bytes = data_bytes(ckpt);
		if (verify_it)
			verify(ckpt);
		bench_remove_tree(g.shared_root);
	}
}

/* (b), (c), (d): one dvar_save with these flags; returns the slowest
 * worker's wall time and sets *written to the bytes of the data files. */
static sample case_save(unsigned int flags, int64_t step, int verify_it, uint64_t *written)
{
	const char *root = flags & DVAR_SAVE_EVERY_WORKER ? g.every_root : g.shared_root;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_write_options wo;
	char ckpt[4300];
	sample t;
	int mine = (flags & DVAR_SAVE_EVERY_WORKER) || g.rank == 0;
	uint64_t bytes = 0, sum;

	write_options(&wo);
	so.write = &wo;
	so.flags = flags;
	start_timer();
	bench_check(dvar_save(g.s, root, step, g.v, (size_t)g.vars, &so), "dvar_save");
	t = combine(lap());
	bench_ckpt_path(ckpt, sizeof ckpt, root, step);
	if (mine) {
		bytes = data_bytes(ckpt);
		if (verify_it)
			verify(ckpt);
	}
	MPI_Allreduce(&bytes, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
	if (written)
		*written = sum;
	bench_mpi_barrier(); /* nobody reads it any more */
	if (mine)
		bench_remove_tree(root);
	return t;
}

/*
 * (c) and (d), the check's cost: each twice, mirrored (c d d c on even
 * repeats, d c c d on odd ones), each figure the mean of its two, so that
 * a drift of the host within the repeat cancels out of (c) - (d).
 */
static void case_check_pair(int64_t step, int first, int odd)
{
	static const int order[2][4] = { { T_SHARED, T_SKIP, T_SKIP, T_SHARED },
		                          { T_SKIP, T_SHARED, T_SHARED, T_SKIP } };
	sample sum[T_COUNT] = { { 0, 0 } };

	for (int k = 0; k < 4; k++) {
		int which = order[odd][k];
		unsigned int flags = which == T_SKIP ? DVAR_SAVE_SKIP_REPLICA_CHECK : 0;
		sample t = case_save(flags, step, first && k < 2, &g.t[which].bytes);

		sum[which].wall += t.wall / 2;
		sum[which].cpu += t.cpu / 2;
		if (k < 3)
			settle();
	}
	record(T_SHARED, sum[T_SHARED]);
	record(T_SKIP, sum[T_SKIP]);
}

/* dvar_save_async of step from a barrier; the time until it returned. */
static sample timed_async(int64_t step)
{
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_write_options wo;

	write_options(&wo);
	so.write = &wo;
	start_timer();
	bench_check(dvar_save_async(g.s, g.shared_root, step, g.v, (size_t)g.vars, &so),
	            "dvar_save_async");
	return lap();
}

/* (e) dvar_save_async, then dvar_save_wait at once; then a memcpy of the
 * whole state on every worker, right there, for the stall's yardstick. */
static void case_async(int64_t step, int verify_it)
{
	char ckpt[4300];
	sample stall = timed_async(step), wait;

	bench_check(dvar_save_wait(g.s), "dvar_save_wait");
	wait = lap();
	record(T_STALL, combine(stall));
	record(T_WAIT, combine(wait));

	start_timer();
	memcpy(g.dst, g.src, g.unique);
	__asm__ __volatile__("" : : "r"(g.dst) : "memory");
	record(T_MEMCPY, combine(lap()));

	if (g.rank == 0) {
		bench_ckpt_path(ckpt, sizeof ckpt, g.shared_root, step);
		g.t[T_WAIT].bytes = data_bytes(ckpt);
		if (verify_it)
			verify(ckpt);
		bench_remove_tree(g.shared_root);
	}
}

/* A cross-replica assign of every variable, of the values it holds. */
static void assign_all(void)
{
	for (int i = 0; i < g.vars; i++)
		bench_check(dvar_variable_assign(g.v[i], NULL, g.src + (uint64_t)i * g.var_bytes),
		            "dvar_variable_assign");
}

/*
 * (f) What the replica check of an asynchronous save, which reads the
 * values after the call returned, costs the training loop: the first update
 * of a variable waits until the check has read it. An update of every
 * variable with no save pending, then the same right after
 * dvar_save_async returned, timed from the return.
 */
static void case_update(int64_t step)
{
	sample stall, both;

	start_timer();
	assign_all();
	record(T_UPDATE, combine(lap()));

	stall = timed_async(step);
	assign_all();
	both = lap();
	record(T_HELD, combine((sample){ both.wall - stall.wall, both.cpu - stall.cpu }));
	bench_check(dvar_save_wait(g.s), "dvar_save_wait");
	bench_mpi_barrier();
	if (g.rank == 0)
		bench_remove_tree(g.shared_root);
}

static void run_case(int k, int64_t step, int first, int odd)
{
	switch (k) {
	case K_RAW_SHARE:
		case_raw_share();
		break;
	case K_RAW_ONE:
		case_raw_one();
		break;
	case K_ONE_WRITER:
		case_one_writer(step, first);
		break;
	case K_EVERY:
		record(T_EVERY,
		       case_save(DVAR_SAVE_EVERY_WORKER, step, first, &g.t[T_EVERY].bytes));
		break;
	case K_CHECK_PAIR:
		case_check_pair(step, first, odd);
		break;
	case K_ASYNC:
		case_async(step, first);
		break;
	case K_UPDATE:
		case_update(step);
		break;
	}
	settle();
}

static double last(int which)
{
	return bench_last(g.t[which].wall, g.t[which].n);
}

static void progress_line(int r)
{
	if (!g.progress || g.rank != 0)
		return;
	fprintf(stderr,
	        "repeat %d/%d: raw per worker %.3f s, one file %.3f | (a) %.3f (b) %.3f (c) %.3f "
	        "(d) %.3f (e) stall %.3f wait %.3f | memcpy %.3f | load %.2f\n",
	        r + 1, g.repeat, last(T_RAW_SHARE), last(T_RAW_ONE), last(T_ONE_WRITER),
	        last(T_EVERY), last(T_SHARED), last(T_SKIP), last(T_STALL), last(T_WAIT),
	        last(T_MEMCPY), bench_load_average());
}

/* ------------------------------------------------------------------ report */

static double median(int which)
{
	return bench_median(g.t[which].wall, g.t[which].n);
}

/* The median over repeats of a's time over b's from the same repeat, so the
 * host's drift between repeats cancels. */
static double ratio(int a, int b)
{
	return bench_median_ratio(g.t[a].wall, g.t[a].n, g.t[b].wall, g.t[b].n);
}

/* The replica check's cost per repeat, (c - d) / d; its median, min and max. */
static double check_cost(double *lo, double *hi)
{
	double v[MAX_REPEAT];
	int n = g.t[T_SHARED].n;

	for (int i = 0; i < n; i++)
		v[i] = (g.t[T_SHARED].wall[i] - g.t[T_SKIP].wall[i]) / g.t[T_SKIP].wall[i];
	bench_min_max(v, n, lo, hi);
	return bench_median(v, n);
}

/* The CPU seconds the check adds per save, all workers together: the
 * median over repeats of (c) - (d). */
static double check_cpu(void)
{
	double v[MAX_REPEAT];
	int n = g.t[T_SHARED].n;

	for (int i = 0; i < n; i++)
		v[i] = g.t[T_SHARED].cpu[i] - g.t[T_SKIP].cpu[i];
	return bench_median(v, n);
}

/* One table row; base/base_name give the "vs limit" time ratio (none: -1). */
static void row(const char *label, int which, int base, const char *base_name)
{
	const series *s = &g.t[which];
	double lo, hi, med = median(which);
	char bytes[48] = "", vs_a[16] = "", vs_lim[48] = "";

	bench_min_max(s->wall, s->n, &lo, &hi);
	if (s->bytes)
		snprintf(bytes, sizeof bytes, "%13llu %7.4f", (unsigned long long)s->bytes,
		         (double)s->bytes / (double)g.unique);
	if (which >= T_ONE_WRITER)
		snprintf(vs_a, sizeof vs_a, "%.2f", ratio(which, T_ONE_WRITER));
	if (base >= 0)
		snprintf(vs_lim, sizeof vs_lim, "%.2fx %s", ratio(which, base), base_name);
	bench_print_row("  %-46s %7.3f [%6.3f-%6.3f] %6.2f %-21s %6.2f %6s  %s", label, med, lo, hi,
	                bench_median(s->cpu, s->n), bytes, (double)g.unique / med / 1e9, vs_a,
	                vs_lim);
}

static void report(void)
{
	const char *how = g.fsync ? "+ fsync" : "(no fsync)";
	const char *dio = g.direct_ok ? "O_DIRECT" : "buffered";
	double lo, hi, cost = check_cost(&lo, &hi);
	static const bench_goal_style style = { 58, 8, 22, 1, 0 };
	char label[96], threads[64];

	bench_threads_text(threads, sizeof threads, g.threads);

	printf("\n%s: dvar %s, W = %d workers x R = %d replicas; %d float32 ON_WRITE variables "
	       "of %.2f MiB = %llu bytes of unique state\n",
	       PROGRAM, dvar_version(), g.W, g.R, g.vars, (double)g.var_bytes / BENCH_MIB,
	       (unsigned long long)g.unique);
	printf("compression %s, fsync %s, writer threads %s per worker, %d repeat%s, "
	       "scratch in %s\n",
	       bench_compress_name(g.compress), g.fsync ? "on" : "off", threads, g.repeat,
	       g.repeat > 1 ? "s" : "", g.dir);
	printf("load average (1 min): %.2f at start, %.2f at end, on %ld CPUs\n", g.load_start,
	       bench_load_average(), sysconf(_SC_NPROCESSORS_ONLN));
	printf("wall = from a barrier to the end of the call, slowest worker, median [min-max];\n"
	       "CPU = user + system seconds of every thread, summed over the workers (median);\n"
	       "bytes = data files of the new checkpoint(s) (stat), /unique = over the unique "
	       "state;\n"
	       "GB/s = 1e9 bytes of unique state per second of wall; vs (a) and vs limit = time "
	       "ratios\n"
	       "(lower is faster), medians of the per-repeat ratios; (c) and (d): the mean of "
	       "two saves\neach per repeat (c d d c or d c c d)\n\n");
	printf("  %-46s %7s %-15s %6s %13s %7s %6s %6s  %s\n", "case", "wall s", " [min-max]",
	       "CPU s", "bytes", "/unique", "GB/s", "vs (a)", "vs limit");
	printf("machine, same bytes, same run\n");
	row("memcpy of a worker's state, 1 thread", T_MEMCPY, -1, "");
	snprintf(label, sizeof label, "raw %s write %s, a file per worker", dio, how);
	row(label, T_RAW_SHARE, -1, "");
	snprintf(label, sizeof label, "raw %s write %s, one file (chief)", dio, how);
	row(label, T_RAW_ONE, -1, "");
	printf("saving the state\n");
	row("(a) one writer: the chief, format API", T_ONE_WRITER, T_RAW_ONE, "raw one file");
	row("(b) every worker a full copy (EVERY_WORKER)", T_EVERY, -1, "");
	row("(c) dvar_save, shared, replica check on", T_SHARED, T_RAW_SHARE, "raw per worker");
	row("(d) dvar_save, SKIP_REPLICA_CHECK", T_SKIP, T_RAW_SHARE, "raw per worker");
	row("(e) dvar_save_async: stall (until it returns)", T_STALL, T_MEMCPY, "memcpy");
	row("    dvar_save_async + dvar_save_wait", T_WAIT, T_RAW_SHARE, "raw per worker");
	row("(f) update every variable, no save pending", T_UPDATE, T_MEMCPY, "memcpy");
	row("    the same right after (e) returned", T_HELD, T_UPDATE, "no save pending");
	printf("\nreplica check cost (c - d) / d: %+.1f %% [%+.1f, %+.1f] over the repeats; "
	       "%+.3f CPU s per save\n(all workers; it reads R x W = %d copies of the state, "
	       "%.2f GB: each worker's other replicas compared with its primary, the primaries "
	       "checksummed when W > 1)\n",
	       100 * cost, 100 * lo, 100 * hi, check_cpu(), g.R * g.W,
	       (double)g.unique * g.R * g.W / 1e9);
	printf("async stall / memcpy of the worker's state (the whole state, pre-faulted): %.2fx\n",
	       ratio(T_STALL, T_MEMCPY));
	printf("(f): a cross-replica assign of every variable (R copies of the state); right after\n"
	       "(e) it waits, variable by variable, for the replica check that (e) left running:\n"
	       "%.2fx the time with no save pending\n",
	       ratio(T_HELD, T_UPDATE));
	printf("raw per worker / raw one file: %.2fx (the lowest (c) / (a) this disk allows)\n",
	       ratio(T_RAW_SHARE, T_RAW_ONE));

	/* Each goal with the spread of its per-repeat values and the repeat count. */
	char vs_raw[96], check[96], stall[96], spread[3][64];
	double rlo, rhi, slo, shi;

	bench_ratio_min_max(g.t[T_SHARED].wall, g.t[T_SHARED].n, g.t[T_RAW_SHARE].wall,
	                    g.t[T_RAW_SHARE].n, &rlo, &rhi);
	bench_ratio_min_max(g.t[T_STALL].wall, g.t[T_STALL].n, g.t[T_MEMCPY].wall, g.t[T_MEMCPY].n,
	                    &slo, &shi);
	snprintf(spread[0], sizeof spread[0], "x [%.2f-%.2f] %d runs", rlo, rhi, g.t[T_SHARED].n);
	snprintf(spread[1], sizeof spread[1], "%% [%+.1f, %+.1f] %d runs", 100 * lo, 100 * hi,
	         g.t[T_SHARED].n);
	snprintf(spread[2], sizeof spread[2], "x [%.2f-%.2f] %d runs", slo, shi, g.t[T_STALL].n);
	snprintf(vs_raw, sizeof vs_raw, "W=%dxR=%d (c) dvar_save / raw write per worker <= 1.1x",
	         g.W, g.R);
	snprintf(check, sizeof check, "replica check cost (c - d) / d <= 3%%");
	snprintf(stall, sizeof stall, "async stall (e) / memcpy of the worker's state <= 1.2x");
	bench_goal gl[] = {
		{ vs_raw, ratio(T_SHARED, T_RAW_SHARE), 1.1, 1, spread[0] },
		{ check, 100 * cost, 3, 1, spread[1] },
		{ stall, ratio(T_STALL, T_MEMCPY), 1.2, 1, spread[2] },
	};
	bench_print_goals(gl, (int)(sizeof gl / sizeof gl[0]), &style);
}

/* ------------------------------------------------------------------ setup */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: mpirun -np W " PROGRAM " [options]\n"
	        "  --total-mib N      MiB of unique state (default 1024)\n"
	        "  --vars N           float32 ON_WRITE variables sharing it (default 16)\n"
	        "  --replicas R       replicas per worker (default 1)\n"
	        "  --dir DIR          where the scratch folder goes, on the disk to measure\n"
	        "                     (default $TMPDIR or /tmp)\n"
	        "  --repeat N         repeats; medians are reported (default 5, max %d)\n"
	        "  --warmup N         untimed dvar_save + dvar_save_async pairs first (default 1)\n"
	        "  --threads N        writer threads per worker (default 0: the library's)\n"
	        "  --compress MODE    none (default), auto or lz4\n"
	        "  --no-fsync         skip fsync in every write (default: fsync'ed writes)\n"
	        "  --progress, --no-progress\n"
	        "                     a line per repeat on stderr (default: when stderr is a "
	        "terminal)\n"
	        "Needs free space for W full copies of the state (case (b)) and, per machine,\n"
	        "memory for (2 + R) copies of it per worker. Every checkpoint is removed.\n",
	        MAX_REPEAT);
}

static void parse_args(int argc, char **argv)
{
	g.total_mib = 1024;
	g.vars = 16;
	g.R = 1;
	g.repeat = 5;
	g.warmup = 1;
	g.fsync = 1;
	g.compress = DVAR_COMPRESS_NONE;
	g.progress = isatty(2);
	g.dir = bench_default_dir();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int took = bench_common_option(a, v, &g.progress, &g.dir, &g.compress);

		if (took) {
			i += took - 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			if (g.rank == 0)
				usage(stdout);
			MPI_Finalize();
			exit(0);
		} else if (!strcmp(a, "--no-fsync")) {
			g.fsync = 0;
			continue;
		} else if (!strcmp(a, "--total-mib")) {
			g.total_mib = (uint64_t)bench_parse_num(a, v, 1, 1 << 20);
		} else if (!strcmp(a, "--vars")) {
			g.vars = (int)bench_parse_num(a, v, 1, 4096);
		} else if (!strcmp(a, "--replicas")) {
			g.R = (int)bench_parse_num(a, v, 1, 256);
		} else if (!strcmp(a, "--repeat")) {
			g.repeat = (int)bench_parse_num(a, v, 1, MAX_REPEAT);
		} else if (!strcmp(a, "--warmup")) {
			g.warmup = (int)bench_parse_num(a, v, 0, 100);
		} else if (!strcmp(a, "--threads")) {
			g.threads = (int)bench_parse_num(a, v, 0, 1024);
		} else {
			bench_bad_option(a);
		}
		i++;
	}
	/* Whole 4 KiB rows of 1024 floats per variable. */
	g.var_bytes = g.total_mib * BENCH_MIB / (uint64_t)g.vars / 4096 * 4096;
	if (g.var_bytes == 0) {
		if (g.rank == 0)
			fprintf(stderr,
			        "%s: --total-mib %llu over --vars %d leaves less than 4 KiB per "
			        "variable\n",
			        PROGRAM, (unsigned long long)g.total_mib, g.vars);
		MPI_Finalize();
		exit(2);
	}
	g.unique = g.var_bytes * (uint64_t)g.vars;
}

/* Refuse, everywhere, with the first failing worker's message. */
static void agree_or_exit(int ok, const char *message)
{
	int all_ok, first_bad, mine = ok ? g.W : g.rank;

	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (all_ok)
		return;
	MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (g.rank == first_bad)
		fprintf(stderr, "%s: %s\n", PROGRAM, message);
	bench_scratch_remove(); /* armed on the chief alone */
	MPI_Finalize();
	exit(1);
}

/* The largest footprint is case (b): W full copies at once, plus 5% and
 * 512 MiB of headroom. 1 when dir has room; otherwise 0 and why in msg. */
static int check_space(char *msg, size_t cap)
{
	uint64_t need = bench_space_needed((uint64_t)g.W, g.unique), avail;

	if (bench_free_space(g.dir, &avail) != 0) {
		snprintf(msg, cap, "cannot use --dir %s: %s", g.dir, strerror(errno));
		return 0;
	}
	if (avail >= need)
		return 1;
	snprintf(msg, cap,
	         "%s has %.2f GiB free; this run needs %.2f GiB at a time (case (b) writes W = %d "
	         "full copies of the %.2f GiB state at once, plus 5%% and 512 MiB of headroom). "
	         "Free some space, pass --dir on a larger disk, or lower --total-mib.",
	         g.dir, BENCH_GIB(avail), BENCH_GIB(need), g.W, BENCH_GIB(g.unique));
	return 0;
}

/*
 * The chief checks the free space and makes the scratch folder; every worker
 * then uses the chief's folder (a shared or local file system).
 */
static void make_scratch(void)
{
	char msg[1024] = "";
	int ok = 1;

	if (g.rank == 0) {
		ok = check_space(msg, sizeof msg);
		if (ok && bench_scratch_create(g.dir, "dvar-bench-save", NULL) != 0) {
			ok = 0;
			snprintf(msg, sizeof msg, "cannot create a scratch folder in %s: %s", g.dir,
			         strerror(errno));
		}
		if (ok)
			snprintf(g.scratch, sizeof g.scratch, "%s", bench_scratch());
	}
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (!ok)
		agree_or_exit(g.rank != 0, msg);
	MPI_Bcast(g.scratch, sizeof g.scratch, MPI_CHAR, 0, MPI_COMM_WORLD);
	snprintf(g.shared_root, sizeof g.shared_root, "%s/shared", g.scratch);
	snprintf(g.every_root, sizeof g.every_root, "%s/every-%d", g.scratch, g.rank);
}

/*
 * Per machine: each worker holds the source bytes, the memcpy target, its R
 * replicas' components and, for dvar_save_async, staging for its share.
 */
static void check_memory(void)
{
	uint64_t need = (2 + (uint64_t)g.R) * g.unique + g.share_bytes + 256 * BENCH_MIB;
	uint64_t node_need = 0;
	MPI_Comm node;
	int node_rank, ok = 1;
	char msg[512] = "";

	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &node_rank);
	MPI_Reduce(&need, &node_need, 1, MPI_UINT64_T, MPI_SUM, 0, node);
	if (node_rank == 0) {
		uint64_t avail = bench_mem_available();

		if (avail && avail < node_need) {
			ok = 0;
			snprintf(msg, sizeof msg,
			         "this machine has %.2f GiB of memory available; its workers need "
			         "%.2f GiB ((2 + R) copies of the %.2f GiB state each, plus "
			         "staging). Lower --total-mib, --replicas or W.",
			         BENCH_GIB(avail), BENCH_GIB(node_need), BENCH_GIB(g.unique));
		}
	}
	MPI_Comm_free(&node);
	agree_or_exit(ok, msg);
}

/* This worker's share under dvar_save's plan: largest first onto the least
 * loaded worker, the lowest id on ties (docs/STORE.md). */
static void plan_share(void)
{
	uint64_t load[4096] = { 0 }, below = 0;
	int W = g.W < 4096 ? g.W : 4096;

	for (int i = 0; i < g.vars; i++) {
		int best = 0;

		for (int w = 1; w < W; w++)
			if (load[w] < load[best])
				best = w;
		load[best] += g.var_bytes;
	}
	for (int w = 0; w < g.rank && w < W; w++)
		below += load[w];
	g.share_off = below;
	g.share_bytes = g.rank < W ? load[g.rank] : 0;
}

static void create_state(void)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	int64_t dims[2] = { (int64_t)(g.var_bytes / 4096), 1024 };

	so.replicas = g.R;
	bench_check(dvar_strategy_create(&g.s, &so), "dvar_strategy_create");
	if (dvar_strategy_num_workers(g.s) != g.W)
		bench_fatal("the strategy has %d workers, MPI %d", dvar_strategy_num_workers(g.s), g.W);
	bench_check(dvar_shape_init(&g.shape, 2, dims), "dvar_shape_init");
	if (!(g.v = calloc((size_t)g.vars, sizeof *g.v)))
		bench_fatal("out of memory");
	for (int i = 0; i < g.vars; i++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		char name[32];

		snprintf(name, sizeof name, "var%03d", i);
		spec.name = name;
		spec.dtype = DVAR_FLOAT32;
		spec.shape = g.shape;
		spec.initial_value = g.src + (uint64_t)i * g.var_bytes;
		spec.synchronization = DVAR_SYNC_ON_WRITE;
		bench_check(dvar_variable_create(&g.v[i], g.s, &spec), "dvar_variable_create");
	}
}

int main(int argc, char **argv)
{
	static bench_program prog = { PROGRAM, 0, usage, abort_all, bench_mpi_finalize };
	int serialized = bench_mpi_init(&argc, &argv, &prog, &g.rank, &g.W);

	parse_args(argc, argv);
	if (!serialized)
		agree_or_exit(0, "MPI gives no MPI_THREAD_SERIALIZED support, which dvar needs");
	g.load_start = bench_load_average();
	g.direct_ok = 1;
	plan_share();
	make_scratch();
	check_memory();

	if (g.rank == 0 && g.progress)
		fprintf(stderr,
		        "%s: W = %d, R = %d, %llu bytes of state in %d variables, scratch %s\n",
		        PROGRAM, g.W, g.R, (unsigned long long)g.unique, g.vars, g.scratch);
	g.src = bench_alloc_prefaulted(g.unique);
	g.dst = bench_alloc_prefaulted(g.unique);
	fill_weights((float *)g.src, g.unique / 4);
	create_state();

	/* Untimed: a save and an asynchronous save, whose staging (kept from
	 * save to save) is then allocated and touched, as in a training loop. */
	for (int i = 0; i < g.warmup; i++) {
		dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
		dvar_write_options wo;

		case_save(0, 1000000 + i, 0, NULL);
		settle();
		write_options(&wo);
		so.write = &wo;
		bench_check(dvar_save_async(g.s, g.shared_root, 2000000 + i, g.v, (size_t)g.vars, &so),
		            "dvar_save_async");
		bench_check(dvar_save_wait(g.s), "dvar_save_wait");
		bench_mpi_barrier();
		if (g.rank == 0)
			bench_remove_tree(g.shared_root);
		settle();
	}
	for (int r = 0; r < g.repeat; r++) {
		/* Each case starts after the previous one's files are deleted and
		 * synced; the first case moves on by one every repeat. */
		for (int k = 0; k < K_COUNT; k++)
			run_case((r + k) % K_COUNT, r, r == 0, r % 2);
		progress_line(r);
	}
	if (g.rank == 0)
		report();

	for (int i = 0; i < g.vars; i++)
		dvar_variable_free(g.v[i]);
	free(g.v);
	dvar_strategy_free(g.s);
	bench_mpi_barrier();
	bench_scratch_remove(); /* armed on the chief alone */
	munmap(g.src, g.unique);
	munmap(g.dst, g.unique);
	MPI_Finalize();
	return 0;
}
