/*
 * bench_delta.c - delta checkpoints of a sharded embedding table: a delta
 * save (DVAR_SAVE_DELTA) after sparse row updates next to a full save of the
 * same state, synchronous and asynchronous; the cold restore of the latest
 * checkpoint of chains of 1, 5 and 10 deltas next to the restore of a full
 * checkpoint of the same state; and the cost of change tracking in the row
 * updates. The machine's own limits (raw writes of the same bytes, memcpy)
 * are measured in the same run.
 *
 * Run under mpirun (W processes, one replica each). The table [N, 128]
 * float32 is a dvar_sharded_variable of a FixedShards partitioner (8 shards,
 * shard i on worker i mod W). Between saves every worker draws its own ids,
 * uniformly or Zipf(1.1)-skewed over a fixed scramble of the rows, f x N
 * draws in all for f = 0.1 %, 1 % and 10 %, and applies them with
 * dvar_sharded_variable_scatter; the distinct rows they touch (an OR of the
 * workers' bitmaps) are the rows a delta has to write. Each worker times
 * from a barrier to the end of its call; the slowest worker counts; each
 * figure is the median over --repeat repeats, with min and max. Every
 * checkpoint is removed as soon as it is measured, the scratch folder at
 * the end. See bench/README.md.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdarg.h>
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
#include "runtime/track.h"

#define PROGRAM "dvar_bench_delta"
#define MAX_REPEAT BENCH_MAX_SAMPLES
#define COLS 128
#define ROW_BYTES (COLS * 4)
#define SHARDS 8
#define ZIPF_S 1.1

enum { D_UNIFORM, D_ZIPF, D_COUNT };
enum { F_SMALL, F_MID, F_LARGE, F_COUNT };
static const double fractions[F_COUNT] = { 0.001, 0.01, 0.1 };
static const char *const dist_names[D_COUNT] = { "uniform", "Zipf(1.1)" };
#define CASES (D_COUNT * F_COUNT)

enum { L_1, L_5, L_10, L_COUNT };
static const int chain_lengths[L_COUNT] = { 1, 5, 10 };

typedef struct {
	double v[MAX_REPEAT];
	int n;
} series;

static void put(series *s, double x)
{
	s->v[s->n++] = x;
}

static double med(const series *s)
{
	return bench_median(s->v, s->n);
}

/* What one case (distribution x fraction) measured, per repeat. */
typedef struct {
	series delta, full;             /* sync save wall */
	series stall_d, stall_f;        /* dvar_save_async until it returns */
	series wait_d, wait_f;          /* until dvar_save_wait returns */
	series bytes_d, bytes_f;        /* data files of every worker + index */
	series index_d;                 /* the delta's index file */
	series distinct;                /* rows touched since the previous save */
	series raw_same;                /* raw write of the delta's bytes, a file per worker */
	series raw_bound;               /* the delta's bytes at the raw speed of the repeat */
	series scatter, track, memcpy_; /* the update; its marks alone; memcpy of its rows */
	uint64_t draws;                 /* ids drawn per update, all workers */
} case_stats;

static struct {
	int rank, W, repeat, progress, small;
	int64_t rows;
	uint64_t table_bytes, mine_bytes; /* the table; this worker's shards */
	const char *dir;
	char scratch[4096];
	dvar_strategy *s;
	dvar_sharded_variable *v, *target;
	unsigned char *raw_buf, *copy_buf; /* mine_bytes each */
	float *rows_buf;                   /* the rows of one update of this worker */
	int64_t *ids;
	uint64_t max_ids;
	double *zipf_cdf;
	uint64_t perm_a, perm_b;
	uint64_t *bitmap; /* rows drawn since the last save, this worker's */
	size_t bitmap_words;
	dvar_track track; /* a private tracker for timing the marks alone */
	case_stats c[CASES];
	series raw_share, memcpy_share, empty;
	series rchain[L_COUNT], rfull[L_COUNT], chain_bytes[L_COUNT];
	series read_chain[L_COUNT], read_full[L_COUNT]; /* bytes read, all workers */
	double load_start;
	double t0;
	int64_t step;
	uint64_t seed;
	double resident_after_drop; /* bytes, first cold restore */
	int verified;
} g;

static void abort_all(void)
{
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ------------------------------------------------------------------ timing */

static void start_timer(void)
{
	bench_mpi_barrier();
	g.t0 = bench_now();
}

static double lap(void)
{
	return bench_now() - g.t0;
}

static double max_all(double mine)
{
	double all;

	MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return all;
}

static uint64_t sum_all(uint64_t mine)
{
	uint64_t all;

	MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
	return all;
}

/* ------------------------------------------------------------------ files */

/* The checkpoint's index file. */
static uint64_t index_bytes(const char *root, int64_t step)
{
	char p[4400];

	bench_ckpt_path(p, sizeof p, root, step);
	strncat(p, "/index", sizeof p - strlen(p) - 1);
	return bench_file_bytes(p);
}

/*
 * Drop every file under path from the page cache: fdatasync (dvar fsyncs
 * what it writes, so this finds nothing dirty), then
 * posix_fadvise(POSIX_FADV_DONTNEED). With resident, *resident gets the bytes
 * still cached afterwards (mincore), the check that it worked.
 */
static void drop_tree(const char *path, uint64_t *resident)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *e;

		if (!d)
			return;
		while ((e = readdir(d))) {
			char sub[4400];

			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
			drop_tree(sub, resident);
		}
		closedir(d);
	} else if (S_ISREG(st.st_mode)) {
		int fd = open(path, O_RDONLY);

		if (fd < 0)
			return;
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		if (resident && st.st_size > 0) {
			void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
			size_t pages = ((size_t)st.st_size + 4095) / 4096;
			unsigned char *vec = malloc(pages);

			if (m != MAP_FAILED && vec && mincore(m, (size_t)st.st_size, vec) == 0)
				for (size_t i = 0; i < pages; i++)
					*resident += (vec[i] & 1) * 4096ull;
			free(vec);
			if (m != MAP_FAILED)
				munmap(m, (size_t)st.st_size);
		}
		close(fd);
	}
}

/* Every worker drops the files of root (every link of every chain in it). */
static void make_cold(const char *root, int check)
{
	uint64_t resident = 0;

	bench_mpi_barrier();
	drop_tree(root, check ? &resident : NULL);
	if (check)
		g.resident_after_drop = (double)sum_all(resident) / g.W;
	bench_mpi_barrier();
}

/* After a case: files gone, the deletes (and a `discard` mount's discards)
 * done before the next timed section. */
static void remove_root(const char *root)
{
	bench_mpi_barrier();
	if (g.rank == 0) {
		bench_remove_tree(root);
		bench_syncfs(g.scratch);
	}
	bench_mpi_barrier();
}

/* ------------------------------------------------------------------ data */

/* Initializer-like weights, every mantissa bit busy (as bench_save). */
static void fill_weights(float *dst, uint64_t n, uint64_t seed)
{
	const double scale = 0.02 * 1.7320508075688772 / 65536.0;
	uint64_t x = seed | 1;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = bench_xorshift(&x);
		int64_t sum = (int64_t)(r & 0xffff) + (int64_t)(r >> 16 & 0xffff) +
		              (int64_t)(r >> 32 & 0xffff) + (int64_t)(r >> 48) - 131070;
		dst[i] = (float)((double)sum * scale);
	}
}

static int shard_init(void *arg, int dtype, const dvar_shape *shape, const int64_t *offset,
                      void *dst)
{
	(void)arg;
	(void)dtype;
	fill_weights(dst, (uint64_t)shape->dims[0] * COLS, 0x9e3779b97f4a7c15ull + (uint64_t)offset[0]);
	return DVAR_OK;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Zipf(s) over ranks 1..N: the CDF, and a fixed scramble of ranks to rows
 * (hashed ids: the hot rows spread over every shard), the same everywhere. */
static void zipf_setup(void)
{
	double sum = 0;

	if (!(g.zipf_cdf = malloc((size_t)g.rows * sizeof *g.zipf_cdf)))
		bench_fatal("out of memory");
	for (int64_t r = 0; r < g.rows; r++) {
		sum += pow((double)(r + 1), -ZIPF_S);
		g.zipf_cdf[r] = sum;
	}
	for (int64_t r = 0; r < g.rows; r++)
		g.zipf_cdf[r] /= sum;
	g.perm_a = 2654435761ull % (uint64_t)g.rows;
	while (g.perm_a < 2 || gcd64(g.perm_a, (uint64_t)g.rows) != 1)
		g.perm_a++;
	g.perm_b = 40503ull % (uint64_t)g.rows;
}

static int64_t draw(int dist, uint64_t *x)
{
	uint64_t r = bench_xorshift(x);

	if (dist == D_UNIFORM)
		return (int64_t)(r % (uint64_t)g.rows);
	{
		double u = (double)(r >> 11) * (1.0 / 9007199254740992.0);
		int64_t lo = 0, hi = g.rows - 1;

		while (lo < hi) {
			int64_t mid = lo + (hi - lo) / 2;

			if (g.zipf_cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		return (int64_t)(((uint64_t)lo * g.perm_a + g.perm_b) % (uint64_t)g.rows);
	}
}

/* ------------------------------------------------------------------ updates */

/*
 * One update: this worker draws its share of draws ids and scatters rows to
 * them (timed, slowest worker), marks them on the private tracker (timed
 * alone, this worker), and copies the same row bytes (memcpy, timed). The
 * drawn ids go into the bitmap of rows changed since the last save.
 */
static void update(int dist, uint64_t draws, case_stats *cs)
{
	uint64_t mine = draws / (uint64_t)g.W + ((uint64_t)g.rank < draws % (uint64_t)g.W);
	uint64_t x = g.seed = g.seed * 6364136223846793005ull + 1442695040888963407ull + (uint64_t)g.rank;
	double t, tt, tm;

	if (mine > g.max_ids)
		bench_fatal("internal: %llu ids over %llu", (unsigned long long)mine,
		            (unsigned long long)g.max_ids);
	x = x ? x : 1;
	for (uint64_t k = 0; k < mine; k++) {
		g.ids[k] = draw(dist, &x);
		g.bitmap[(uint64_t)g.ids[k] >> 6] |= 1ull << ((uint64_t)g.ids[k] & 63);
	}
	start_timer();
	bench_check(dvar_sharded_variable_scatter(g.v, DVAR_SCATTER_UPDATE, g.ids, (size_t)mine,
	                                          g.rows_buf, (size_t)mine * ROW_BYTES),
	            "dvar_sharded_variable_scatter");
	t = max_all(lap());

	/* The marks alone: the median of 5 passes (each a new epoch), so that a
	 * preemption of a sub-millisecond section does not count. */
	{
		double pass[5];

		for (int k = 0; k < 5; k++) {
			pass[k] = bench_now();
			dvar_track_rows(&g.track, g.ids, (size_t)mine);
			pass[k] = bench_now() - pass[k];
			dvar_track_snapshot(&g.track);
		}
		tt = max_all(bench_median(pass, 5));
	}

	tm = bench_now();
	memcpy(g.copy_buf, g.rows_buf, (size_t)mine * ROW_BYTES);
	__asm__ __volatile__("" : : "r"(g.copy_buf) : "memory");
	tm = max_all(bench_now() - tm);
	if (cs) {
		put(&cs->scatter, t);
		put(&cs->track, tt);
		put(&cs->memcpy_, tm);
	}
}

/* Distinct rows drawn by every worker since the last call; the bitmap cleared. */
static uint64_t distinct_rows(void)
{
	uint64_t n = 0;

	MPI_Allreduce(MPI_IN_PLACE, g.bitmap, (int)g.bitmap_words, MPI_UINT64_T, MPI_BOR,
	              MPI_COMM_WORLD);
	for (size_t i = 0; i < g.bitmap_words; i++)
		n += (uint64_t)__builtin_popcountll(g.bitmap[i]);
	memset(g.bitmap, 0, g.bitmap_words * sizeof *g.bitmap);
	return n;
}

/* ------------------------------------------------------------------ saves */

typedef struct {
	double wall, stall; /* stall: async only */
	uint64_t bytes;     /* data files of every worker + index */
	uint64_t index;
	dvar_save_info info;
} save_result;

static save_result save(const char *root, unsigned int flags, int async)
{
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_sharded_variable *sv[1] = { g.v };
	int64_t step = ++g.step;
	save_result r;

	memset(&r, 0, sizeof r);
	so.flags = flags;
	so.sharded = sv;
	so.num_sharded = 1;
	start_timer();
	if (async) {
		bench_check(dvar_save_async(g.s, root, step, NULL, 0, &so), "dvar_save_async");
		r.stall = max_all(lap());
		bench_check(dvar_save_wait(g.s), "dvar_save_wait");
	} else {
		bench_check(dvar_save(g.s, root, step, NULL, 0, &so), "dvar_save");
	}
	r.wall = max_all(lap());
	bench_check(dvar_save_last(g.s, &r.info), "dvar_save_last");
	if (r.info.step != step)
		bench_fatal("dvar_save_last reports step %lld, expected %lld", (long long)r.info.step,
		            (long long)step);
	if (!!(flags & DVAR_SAVE_DELTA) && !(flags & DVAR_SAVE_NEW_CHAIN) && !r.info.is_delta)
		bench_fatal("the save of step %lld into %s was not a delta", (long long)step, root);
	r.index = index_bytes(root, step);
	r.bytes = r.info.bytes + r.index;
	return r;
}

/* ------------------------------------------------------------------ raw */

/* Every worker writes bytes of raw_buf into its own file at once, O_DIRECT
 * (buffered where refused) + fsync; the slowest worker's seconds. */
static double raw_write_share(uint64_t bytes, const char *tag)
{
	char path[4400];
	double t;

	snprintf(path, sizeof path, "%s/raw-%s-%d.bin", g.scratch, tag, g.rank);
	bytes = (bytes + 4095) / 4096 * 4096;
	if (bytes > g.mine_bytes)
		bytes = g.mine_bytes;
	start_timer();
	t = bench_raw_write(path, g.raw_buf, bytes, 1, 1);
	if (t < 0) {
		unlink(path);
		t = bench_raw_write(path, g.raw_buf, bytes, 0, 1);
	}
	t = max_all(lap());
	unlink(path);
	bench_mpi_barrier();
	if (g.rank == 0)
		bench_syncfs(g.scratch);
	bench_mpi_barrier();
	return t;
}

/* ------------------------------------------------------------------ restore */

/* Bytes this process has read with read calls so far (/proc/self/io rchar). */
static uint64_t rchar(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	uint64_t v = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "rchar:", 6))
			v = strtoull(line + 6, NULL, 10);
	fclose(f);
	return v;
}

static double restore(const char *root, uint64_t *read_bytes)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	dvar_sharded_variable *sv[1] = { g.target };
	double t;

	ro.sharded = sv;
	ro.num_sharded = 1;
	uint64_t c0;

	start_timer();
	c0 = rchar();
	bench_check(dvar_restore(g.s, root, NULL, 0, &ro), "dvar_restore");
	t = lap();
	*read_bytes = sum_all(rchar() - c0);
	return max_all(t);
}

/* The target's shards equal the source's, on their owners. */
static void verify_target(const char *what)
{
	int bad = 0, any;

	for (int64_t i = 0; i < dvar_sharded_variable_num_shards(g.v); i++) {
		dvar_shard_info a, b;

		bench_check(dvar_sharded_variable_shard(g.v, i, &a), "dvar_sharded_variable_shard");
		bench_check(dvar_sharded_variable_shard(g.target, i, &b), "dvar_sharded_variable_shard");
		if (a.data && (!b.data || memcmp(a.data, b.data, (size_t)a.shape.dims[0] * ROW_BYTES)))
			bad = 1;
	}
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any)
		bench_fatal("the restore of %s does not give back the saved table", what);
	g.verified++;
}

/* ------------------------------------------------------------------ a repeat */

static void progress_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress_msg(const char *fmt, ...)
{
	va_list ap;

	if (!g.progress || g.rank != 0)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void one_case(int r, int dist, int fi, const char *droot, const char *froot)
{
	case_stats *cs = &g.c[dist * F_COUNT + fi];
	uint64_t draws = (uint64_t)llround(fractions[fi] * (double)g.rows);
	save_result d, f;
	uint64_t n;
	double raw_speed = (double)g.mine_bytes * g.W / bench_last(g.raw_share.v, g.raw_share.n);

	if (draws < 1)
		draws = 1;
	cs->draws = draws;

	/* Synchronous: delta into droot, full into froot, in turns. */
	update(dist, draws, cs);
	n = distinct_rows();
	put(&cs->distinct, (double)n);
	if (r % 2 == 0) {
		d = save(droot, DVAR_SAVE_DELTA, 0);
		f = save(froot, 0, 0);
	} else {
		f = save(froot, 0, 0);
		d = save(droot, DVAR_SAVE_DELTA, 0);
	}
	if (d.info.rows_patched != n)
		bench_fatal("%s %.1f%%: the delta patched %llu rows, %llu were changed",
		            dist_names[dist], 100 * fractions[fi],
		            (unsigned long long)d.info.rows_patched, (unsigned long long)n);
	remove_root(froot);
	put(&cs->delta, d.wall);
	put(&cs->full, f.wall);
	put(&cs->bytes_d, (double)d.bytes);
	put(&cs->bytes_f, (double)f.bytes);
	put(&cs->index_d, (double)d.index);
	put(&cs->raw_bound, (double)d.bytes / raw_speed);
	put(&cs->raw_same, raw_write_share(d.info.bytes / (uint64_t)g.W, "same"));

	/* Asynchronous, after another update of the same kind. */
	update(dist, draws, NULL);
	distinct_rows();
	if (r % 2 == 0) {
		d = save(droot, DVAR_SAVE_DELTA, 1);
		f = save(froot, 0, 1);
	} else {
		f = save(froot, 0, 1);
		d = save(droot, DVAR_SAVE_DELTA, 1);
	}
	remove_root(froot);
	put(&cs->stall_d, d.stall);
	put(&cs->stall_f, f.stall);
	put(&cs->wait_d, d.wall);
	put(&cs->wait_f, f.wall);
	progress_msg("  %-9s %5.1f%%: distinct %llu, delta %.3f s %.1f MB, full %.3f s; "
	             "stall %.4f / %.4f s; scatter %.4f s, marks %.6f s",
	             dist_names[dist], 100 * fractions[fi], (unsigned long long)n,
	             bench_last(cs->delta.v, cs->delta.n), bench_last(cs->bytes_d.v, cs->bytes_d.n) / 1e6,
	             bench_last(cs->full.v, cs->full.n), d.stall, f.stall,
	             bench_last(cs->scatter.v, cs->scatter.n), bench_last(cs->track.v, cs->track.n));
}

static void chains(int r, const char *croot, const char *froot)
{
	int li = 0;

	save(croot, DVAR_SAVE_DELTA | DVAR_SAVE_NEW_CHAIN, 0);
	for (int len = 1; len <= chain_lengths[L_COUNT - 1]; len++) {
		save_result d;

		update(D_UNIFORM, (uint64_t)llround(0.01 * (double)g.rows), NULL);
		distinct_rows();
		d = save(croot, DVAR_SAVE_DELTA, 0);
		if (len != chain_lengths[li])
			continue;
		put(&g.chain_bytes[li], (double)d.bytes);
		save(froot, 0, 0);
		for (int k = 0; k < 2; k++) {
			int chain_first = (r + li) % 2 == 0;
			int chain_now = k == 0 ? chain_first : !chain_first;
			const char *root = chain_now ? croot : froot;

			make_cold(root, r == 0 && li == L_COUNT - 1 && chain_now);
			uint64_t rb = 0;

			put(chain_now ? &g.rchain[li] : &g.rfull[li], restore(root, &rb));
			put(chain_now ? &g.read_chain[li] : &g.read_full[li], (double)rb);
			if (r == 0)
				verify_target(chain_now ? "the delta chain" : "the full checkpoint");
		}
		remove_root(froot);
		progress_msg("  chain %2d: restore %.3f s, full %.3f s", len,
		             bench_last(g.rchain[li].v, g.rchain[li].n),
		             bench_last(g.rfull[li].v, g.rfull[li].n));
		li++;
	}
	remove_root(croot);
}

static void one_repeat(int r)
{
	char droot[4300], froot[4300], croot[4300];
	save_result e;
	double t;

	snprintf(droot, sizeof droot, "%s/delta", g.scratch);
	snprintf(froot, sizeof froot, "%s/full", g.scratch);
	snprintf(croot, sizeof croot, "%s/chain", g.scratch);

	/* The machine: every worker writes its share of the table at once. */
	put(&g.raw_share, raw_write_share(g.mine_bytes, "share"));
	start_timer();
	memcpy(g.copy_buf, g.raw_buf, g.mine_bytes);
	__asm__ __volatile__("" : : "r"(g.copy_buf) : "memory");
	put(&g.memcpy_share, max_all(lap()));

	/* A new chain in droot, then a delta of nothing: the fixed cost. */
	save(droot, DVAR_SAVE_DELTA | DVAR_SAVE_NEW_CHAIN, 0);
	distinct_rows();
	e = save(droot, DVAR_SAVE_DELTA, 0);
	put(&g.empty, e.wall);
	progress_msg("repeat %d/%d: raw share %.3f s, memcpy %.3f s, empty delta %.3f s", r + 1,
	             g.repeat, bench_last(g.raw_share.v, g.raw_share.n),
	             bench_last(g.memcpy_share.v, g.memcpy_share.n), e.wall);

	/* The cases, rotating their order from repeat to repeat. */
	for (int k = 0; k < CASES; k++) {
		int c = (k + r) % CASES;

		one_case(r, c / F_COUNT, c % F_COUNT, droot, froot);
	}
	remove_root(droot);

	t = bench_now();
	chains(r, croot, froot);
	progress_msg("repeat %d/%d done, chains %.1f s, load %.2f", r + 1, g.repeat,
	             bench_now() - t, bench_load_average());
}

/* ------------------------------------------------------------------ report */

static void range(const series *s, double *lo, double *hi)
{
	bench_min_max(s->v, s->n, lo, hi);
}

/* The median over repeats of a[i] / b[i]. */
static double ratio(const series *a, const series *b)
{
	return bench_median_ratio(a->v, a->n, b->v, b->n);
}

/* The per-repeat ratios' min and max. */
static void ratio_range(const series *a, const series *b, double *lo, double *hi)
{
	series q = { { 0 }, 0 };

	for (int i = 0; i < a->n && i < b->n; i++)
		put(&q, a->v[i] / b->v[i]);
	range(&q, lo, hi);
}

static void report(void)
{
	static const bench_goal_style style = { 62, 9, 3, 1, 0 };
	bench_goal gl[2 * CASES + 1];
	char text[2 * CASES + 1][96];
	int ng = 0;
	double lo, hi, lo2, hi2;
	double raw_gbps = (double)g.mine_bytes * g.W / med(&g.raw_share) / 1e9;

	printf("\n%s: dvar %s, W = %d workers; embedding [%lld, %d] float32 = %.2f GiB, "
	       "FixedShards(%d), shard i on worker i mod W\n",
	       PROGRAM, dvar_version(), g.W, (long long)g.rows, COLS, BENCH_GIB(g.table_bytes),
	       SHARDS);
	printf("%d repeat%s, scratch in %s; default write options (AUTO compression, fsync)\n",
	       g.repeat, g.repeat > 1 ? "s" : "", g.dir);
	printf("load average (1 min): %.2f at start, %.2f at end, on %ld CPUs\n", g.load_start,
	       bench_load_average(), sysconf(_SC_NPROCESSORS_ONLN));
	printf("times: from a barrier to the end of the call, slowest worker; median [min-max] "
	       "over the repeats;\nratios: medians of the per-repeat ratios. Updates: f x N ids "
	       "drawn in all, each worker its share,\nZipf over a fixed scramble of the rows; "
	       "changed = distinct rows x (%d B + 8 B id).\n\n",
	       ROW_BYTES);

	printf("machine, same run\n");
	range(&g.raw_share, &lo, &hi);
	bench_print_row("  raw O_DIRECT write + fsync, a file per worker, %.0f MiB each: %.3f s "
	                "[%.3f-%.3f], %.2f GB/s",
	                (double)g.mine_bytes / BENCH_MIB, med(&g.raw_share), lo, hi, raw_gbps);
	range(&g.memcpy_share, &lo, &hi);
	bench_print_row("  memcpy of a worker's shards: %.3f s [%.3f-%.3f], %.2f GB/s",
	                med(&g.memcpy_share), lo, hi, (double)g.mine_bytes / med(&g.memcpy_share) / 1e9);
	range(&g.empty, &lo, &hi);
	bench_print_row("  delta save with no row changed (the fixed cost): %.3f s [%.3f-%.3f]",
	                med(&g.empty), lo, hi);

	printf("\n(1) synchronous save after an update: delta over full of the same state\n");
	printf("  %-19s %8s %10s %10s %7s %7s | %8s %-15s %8s %-15s %6s %-13s | %8s %7s\n",
	       "update", "distinct", "changed B", "delta B", "/chg+ix", "/full",
	       "delta s", " [min-max]", "full s", " [min-max]", "d/f", " [min-max]", "raw s",
	       "wall-1.2raw ms");
	for (int c = 0; c < CASES; c++) {
		case_stats *cs = &g.c[c];
		double distinct = med(&cs->distinct), changed = distinct * (ROW_BYTES + 8);
		double lo3, hi3;
		series over = { { 0 }, 0 }, slack = { { 0 }, 0 };
		char label[40];

		for (int i = 0; i < cs->bytes_d.n; i++) {
			double ch = cs->distinct.v[i] * (ROW_BYTES + 8);

			put(&over, (cs->bytes_d.v[i] - cs->index_d.v[i]) / ch);
			put(&slack, 1000 * (cs->delta.v[i] - 1.2 * cs->raw_bound.v[i]));
		}
		snprintf(label, sizeof label, "%s %.1f%%", dist_names[c / F_COUNT],
		         100 * fractions[c % F_COUNT]);
		range(&cs->delta, &lo, &hi);
		range(&cs->full, &lo2, &hi2);
		ratio_range(&cs->delta, &cs->full, &lo3, &hi3);
		bench_print_row("  %-19s %8.0f %10.0f %10.0f %7.3f %7.4f | %8.3f [%6.3f-%6.3f] %8.3f "
		                "[%6.3f-%6.3f] %6.3f [%5.3f-%5.3f] | %8.3f %7.0f",
		                label, distinct, changed, med(&cs->bytes_d),
		                med(&cs->bytes_d) / (changed + med(&cs->index_d)),
		                ratio(&cs->bytes_d, &cs->bytes_f), med(&cs->delta), lo, hi,
		                med(&cs->full), lo2, hi2, ratio(&cs->delta, &cs->full), lo3, hi3,
		                med(&cs->raw_bound), med(&slack));
		snprintf(text[ng], sizeof text[ng], "%s: delta bytes - index <= 1.1x changed",
		         label);
		gl[ng] = (bench_goal){ text[ng], med(&over), 1.1, 1, "x" };
		ng++;
		snprintf(text[ng], sizeof text[ng], "%s: delta wall - 1.2x raw time <= 50 ms", label);
		gl[ng] = (bench_goal){ text[ng], med(&slack), 50, 1, "ms" };
		ng++;
	}
	printf("  distinct = rows changed since the previous save (median); delta B = every "
	       "worker's data files + index;\n  /chg+ix = delta B over (changed + index); raw s "
	       "= delta B at the raw write speed above;\n  wall-1.2raw = delta s - 1.2 x raw s "
	       "(median of per-repeat values)\n");

	printf("\n  raw write of the delta's data bytes, a file per worker (O_DIRECT + fsync), "
	       "next to the delta save\n");
	for (int c = 0; c < CASES; c++) {
		case_stats *cs = &g.c[c];

		range(&cs->raw_same, &lo, &hi);
		bench_print_row("  %-9s %5.1f%%   raw %.3f s [%.3f-%.3f]   delta %.3f s   delta/raw "
		                "%.2f",
		                dist_names[c / F_COUNT], 100 * fractions[c % F_COUNT], med(&cs->raw_same),
		                lo, hi, med(&cs->delta), ratio(&cs->delta, &cs->raw_same));
	}

	printf("\n(2) dvar_save_async after another update of the same kind\n");
	printf("  %-19s | %9s %-17s %9s %-17s %7s %-13s | %8s %8s %7s\n", "update", "stall d s",
	       " [min-max]", "stall f s", " [min-max]", "d/f", " [min-max]", "wait d s",
	       "wait f s", "d/f");
	for (int c = 0; c < CASES; c++) {
		case_stats *cs = &g.c[c];
		double lo3, hi3;

		range(&cs->stall_d, &lo, &hi);
		range(&cs->stall_f, &lo2, &hi2);
		ratio_range(&cs->stall_d, &cs->stall_f, &lo3, &hi3);
		bench_print_row("  %-9s %5.1f%%      | %9.4f [%7.4f-%7.4f] %9.4f [%7.4f-%7.4f] %7.4f "
		                "[%5.3f-%5.3f] | %8.3f %8.3f %7.3f",
		                dist_names[c / F_COUNT], 100 * fractions[c % F_COUNT], med(&cs->stall_d),
		                lo, hi, med(&cs->stall_f), lo2, hi2,
		                ratio(&cs->stall_d, &cs->stall_f), lo3, hi3, med(&cs->wait_d),
		                med(&cs->wait_f), ratio(&cs->wait_d, &cs->wait_f));
	}
	printf("  stall = until dvar_save_async returns; wait = until dvar_save_wait returns "
	       "(from the same start)\n");

	printf("\n(3) cold restore of the root's latest checkpoint into a new sharded variable "
	       "(W = %d),\n    chains built by 1%% uniform updates between deltas; page cache of "
	       "every link dropped first\n",
	       g.W);
	printf("  %-9s %12s | %9s %-15s %9s %-15s | %11s %-13s | %12s %12s\n", "chain", "latest B",
	       "chain s", " [min-max]", "full s", " [min-max]", "full/chain", " [min-max]",
	       "read chain B", "read full B");
	for (int li = 0; li < L_COUNT; li++) {
		double lo3, hi3;

		range(&g.rchain[li], &lo, &hi);
		range(&g.rfull[li], &lo2, &hi2);
		ratio_range(&g.rfull[li], &g.rchain[li], &lo3, &hi3);
		bench_print_row("  length %-2d %12.0f | %9.3f [%6.3f-%6.3f] %9.3f [%6.3f-%6.3f] | "
		                "%11.3f [%5.3f-%5.3f] | %12.0f %12.0f",
		                chain_lengths[li], med(&g.chain_bytes[li]), med(&g.rchain[li]), lo, hi,
		                med(&g.rfull[li]), lo2, hi2, ratio(&g.rfull[li], &g.rchain[li]), lo3,
		                hi3, med(&g.read_chain[li]), med(&g.read_full[li]));
	}
	printf("  full/chain = the full checkpoint's restore time over the chain's (speed of "
	       "the chain's restore\n  relative to the full one); read B = bytes read by every worker (rchar); %.1f MiB per worker stayed "
	       "cached after the drop (mincore check);\n  restored tables compared with the "
	       "saved one: %d times, all equal\n",
	       g.resident_after_drop / BENCH_MIB, g.verified);

	printf("\n(4) change tracking in the row updates (scatter_update of the drawn rows)\n");
	printf("  %-19s %9s | %10s %10s %10s | %8s %9s\n", "update", "draws", "scatter s",
	       "marks s", "memcpy s", "marks %", "ns/mark");
	for (int c = 0; c < CASES; c++) {
		case_stats *cs = &g.c[c];
		double per_worker = (double)cs->draws / g.W;

		bench_print_row("  %-9s %5.1f%%    %9llu | %10.5f %10.6f %10.6f | %7.3f%% %9.2f",
		                dist_names[c / F_COUNT], 100 * fractions[c % F_COUNT],
		                (unsigned long long)cs->draws, med(&cs->scatter), med(&cs->track),
		                med(&cs->memcpy_), 100 * ratio(&cs->track, &cs->scatter),
		                1e9 * med(&cs->track) / per_worker);
	}
	printf("  scatter = dvar_sharded_variable_scatter (ids to owners, rows applied, marks "
	       "included), slowest worker;\n  marks = dvar_track_rows of a worker's own ids on a "
	       "tracker of N rows, alone (slowest worker);\n  memcpy = the same row bytes; "
	       "marks %% = marks / scatter\n");

	{
		double r10 = ratio(&g.rfull[L_10], &g.rchain[L_10]);

		gl[ng++] = (bench_goal){ "restore at chain length 10 >= 0.8x the full restore", r10,
			                 0.8, 0, "x" };
	}
	bench_print_goals(gl, ng, &style);
}

/* ------------------------------------------------------------------ setup */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: mpirun -np W " PROGRAM " [options]\n"
	        "  --rows N           rows of the [N, 128] float32 table (default 2097152 = 1 GiB)\n"
	        "  --small            a quick run: 131072 rows (64 MiB)\n"
	        "  --repeat N         repeats; medians are reported (default 3, max %d)\n"
	        "  --dir DIR          where the scratch folder goes (default $TMPDIR or /tmp)\n"
	        "  --progress, --no-progress\n"
	        "                     progress lines on stderr (default: when stderr is a "
	        "terminal)\n"
	        "Memory per worker: about 5 x its share of the table (its shards, the restore\n"
	        "target, async staging, two raw buffers); disk: about 2.5 x the table.\n"
	        "Every checkpoint is removed as soon as it is measured.\n",
	        MAX_REPEAT);
}

static void parse_args(int argc, char **argv)
{
	g.rows = 1 << 21;
	g.repeat = 3;
	g.progress = isatty(2);
	g.dir = bench_default_dir();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int took = bench_common_option(a, v, &g.progress, &g.dir, NULL);

		if (took) {
			i += took - 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			if (g.rank == 0)
				usage(stdout);
			MPI_Finalize();
			exit(0);
		} else if (!strcmp(a, "--small")) {
			g.small = 1;
			g.rows = 1 << 17;
			continue;
		} else if (!strcmp(a, "--rows")) {
			g.rows = bench_parse_num(a, v, 10000, 1l << 26);
		} else if (!strcmp(a, "--repeat")) {
			g.repeat = (int)bench_parse_num(a, v, 1, MAX_REPEAT);
		} else {
			bench_bad_option(a);
		}
		i++;
	}
	g.table_bytes = (uint64_t)g.rows * ROW_BYTES;
}

static void create_state(void)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_sharded_variable_spec spec = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(SHARDS);
	int64_t dims[2] = { g.rows, COLS };

	so.replicas = 1;
	bench_check(dvar_strategy_create(&g.s, &so), "dvar_strategy_create");
	if (dvar_strategy_num_workers(g.s) != g.W)
		bench_fatal("the strategy has %d workers, MPI %d", dvar_strategy_num_workers(g.s), g.W);
	spec.name = "embedding";
	spec.dtype = DVAR_FLOAT32;
	bench_check(dvar_shape_init(&spec.shape, 2, dims), "dvar_shape_init");
	spec.partitioner = &p;
	spec.init = shard_init;
	bench_check(dvar_sharded_variable_create(&g.v, g.s, &spec), "dvar_sharded_variable_create");
	spec.init = NULL; /* zeros */
	bench_check(dvar_sharded_variable_create(&g.target, g.s, &spec),
	            "dvar_sharded_variable_create (restore target)");
	g.mine_bytes = 0;
	for (int64_t i = 0; i < dvar_sharded_variable_num_shards(g.v); i++) {
		dvar_shard_info info;

		bench_check(dvar_sharded_variable_shard(g.v, i, &info), "dvar_sharded_variable_shard");
		if (info.owner == g.rank)
			g.mine_bytes += (uint64_t)info.shape.dims[0] * ROW_BYTES;
	}
	{
		uint64_t most;

		MPI_Allreduce(&g.mine_bytes, &most, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
		g.mine_bytes = most; /* the raw baseline: every worker the largest share */
	}
}

int main(int argc, char **argv)
{
	static bench_program prog = { PROGRAM, 0, usage, abort_all, bench_mpi_finalize };
	int serialized = bench_mpi_init(&argc, &argv, &prog, &g.rank, &g.W);

	parse_args(argc, argv);
	if (!serialized)
		bench_fatal("MPI gives no MPI_THREAD_SERIALIZED support, which dvar needs");
	g.load_start = bench_load_average();
	g.seed = 0x243f6a8885a308d3ull;

	{
		int ok = 1;
		char msg[512] = "";

		if (g.rank == 0) {
			uint64_t avail;

			if (bench_free_space(g.dir, &avail) != 0 ||
			    avail < bench_space_needed(3, g.table_bytes)) {
				ok = 0;
				snprintf(msg, sizeof msg, "%s lacks room for 3 copies of the %.2f GiB table",
				         g.dir, BENCH_GIB(g.table_bytes));
			} else if (bench_scratch_create(g.dir, "dvar-bench-delta", NULL) != 0) {
				ok = 0;
				snprintf(msg, sizeof msg, "cannot create a scratch folder in %s: %s", g.dir,
				         strerror(errno));
			} else {
				snprintf(g.scratch, sizeof g.scratch, "%s", bench_scratch());
			}
		}
		MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (!ok) {
			if (g.rank == 0)
				fprintf(stderr, "%s: %s\n", PROGRAM, msg);
			MPI_Finalize();
			return 1;
		}
		MPI_Bcast(g.scratch, sizeof g.scratch, MPI_CHAR, 0, MPI_COMM_WORLD);
	}

	create_state();
	g.raw_buf = bench_alloc_prefaulted(g.mine_bytes);
	g.copy_buf = bench_alloc_prefaulted(g.mine_bytes);
	fill_weights((float *)g.raw_buf, g.mine_bytes / 4, 0x1234567ull + (uint64_t)g.rank);
	g.max_ids = (uint64_t)llround(fractions[F_LARGE] * (double)g.rows) / (uint64_t)g.W + 1;
	if (!(g.ids = malloc(g.max_ids * sizeof *g.ids)))
		bench_fatal("out of memory");
	g.rows_buf = bench_alloc_prefaulted(g.max_ids * ROW_BYTES);
	fill_weights(g.rows_buf, g.max_ids * COLS, 0xabcdefull + (uint64_t)g.rank);
	g.bitmap_words = ((size_t)g.rows + 63) / 64;
	if (!(g.bitmap = calloc(g.bitmap_words, sizeof *g.bitmap)))
		bench_fatal("out of memory");
	bench_check(dvar_track_init(&g.track, (uint64_t)g.rows), "dvar_track_init");
	/* Its marks touched once, as a live table's are after its first updates. */
	dvar_track_range(&g.track, 0, (uint64_t)g.rows);
	dvar_track_snapshot(&g.track);
	zipf_setup();
	progress_msg("%s: W = %d, table [%lld, %d] = %.2f GiB, scratch %s", PROGRAM, g.W,
	             (long long)g.rows, COLS, BENCH_GIB(g.table_bytes), g.scratch);

	/* Untimed: a save and an asynchronous save (which allocates the staging
	 * it keeps for the next ones) and a restore, then removed. */
	{
		char froot[4300];

		snprintf(froot, sizeof froot, "%s/warmup", g.scratch);
		save(froot, 0, 0);
		remove_root(froot);
		save(froot, 0, 1);
		/* and a restore, which faults in the target's pages */
		{
			uint64_t rb;

			restore(froot, &rb);
		}
		remove_root(froot);
	}
	for (int r = 0; r < g.repeat; r++)
		one_repeat(r);
	if (g.rank == 0)
		report();

	bench_mpi_barrier();
	bench_scratch_remove(); /* armed on the chief alone */
	dvar_track_fini(&g.track);
	dvar_sharded_variable_free(g.target);
	dvar_sharded_variable_free(g.v);
	dvar_strategy_free(g.s);
	munmap(g.raw_buf, g.mine_bytes);
	munmap(g.copy_buf, g.mine_bytes);
	munmap(g.rows_buf, g.max_ids * ROW_BYTES);
	free(g.ids);
	free(g.bitmap);
	free(g.zipf_cdf);
	MPI_Finalize();
	return 0;
}
