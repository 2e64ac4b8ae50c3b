/*
 * bench_reshard.c - offline resharding with the library (dvar_reshard,
 * dvar_export), next to the same machine's raw copy of the same bytes,
 * measured in the same run.
 *
 * The input is one float32 variable (an embedding table, 2 GiB by default)
 * saved as 8 div-layout shards, fsync'ed. Each repeat runs, each in a child
 * process, dvar_reshard to 3 shards, dvar_export to one mappable dvar
 * checkpoint and the same export to safetensors, timing each from fork to
 * wait4 and taking the child's CPU time and peak RSS from wait4's rusage
 * (forked by a small launcher, so that the peak is the call's own: see
 * run_child); it copies the input's data files into a new file with raw
 * I/O in the dvar writer's style (buffered reads; 4 MiB O_DIRECT writes, or
 * buffered ones for safetensors; fsync); and it restores each of the 3
 * target shards from the 8-shard checkpoint with dvar_reader_read, counting
 * the bytes read (dvar_reader_bytes_read) against the bytes needed. The
 * page cache is emptied before every case, so every case reads the disk.
 *
 * Then, unless --many-shards no, the cost of many output shards: a 24 MiB
 * table saved as 8 shards is resharded to 1,000, 4,000 and 16,000 shards
 * and back (linear in the shards, under a second at 16,000), and a count
 * above DVAR_MAX_SHARDS must be refused with nothing written.
 *
 * Each output is checked once and deleted as soon as it is measured; the
 * scratch folder goes at the end, also on Ctrl-C. See bench/README.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "dvar/dvar.h"

#define PIECE_BYTES (8 * BENCH_MIB) /* rows generated (and compared) at a time */
#define MAX_REPEAT BENCH_MAX_SAMPLES
#define MAX_SHARDS 64
#define SAMPLE_ROWS 16 /* pseudo-random rows compared per output, besides the edges */
#define PROGRAM "dvar_bench_reshard"
#define VAR_NAME "model/embedding/weights"
#define SEED 0x5eed5eed12345678ull

/* The many-shard case: a 24 MiB table of 196,608 rows of 32 float32, as 8
 * shards, resharded to each count of MANY_COUNTS and back. */
#define MANY_ROWS 196608
#define MANY_COLS 32
#define MANY_IN_SHARDS 8
#define MANY_N 3
static const int64_t MANY_COUNTS[MANY_N] = { 1000, 4000, 16000 };

/* What is timed. */
enum {
	T_RAW_DIRECT,  /* buffered read, O_DIRECT write + fsync: dvar's writer */
	T_RAW_BUF,     /* buffered read, buffered write + fsync: the safetensors export */
	T_RESHARD,     /* dvar_reshard to out_shards */
	T_EXPORT,      /* dvar_export, DVAR_EXPORT_DVAR */
	T_EXPORT_ST,   /* dvar_export, DVAR_EXPORT_SAFETENSORS */
	T_COUNT
};

/* What a child of the launcher calls (run_child). */
static const char *const OPS[] = { "reshard", "export", "safetensors", "nothing" };
enum { OP_RESHARD, OP_EXPORT, OP_SAFETENSORS, OP_NOTHING };

/* The cases a repeat runs, in an order that moves on by one every repeat. */
enum { K_RAW_DIRECT, K_RAW_BUF, K_RESHARD, K_EXPORT, K_EXPORT_ST, K_SHARD_READS, K_COUNT };

typedef struct {
	double wall[MAX_REPEAT]; /* seconds */
	double cpu[MAX_REPEAT];  /* user + system seconds of the child (raw: of this process) */
	double rss[MAX_REPEAT];  /* peak RSS of the child, bytes (0: not a child) */
	int n;
} series;

/* Restoring target shard k of out_shards from the input. */
typedef struct {
	double wall[MAX_REPEAT];
	int n;
	uint64_t needed, read; /* bytes; read is the largest over the repeats */
} shard_series;

static struct {
	uint64_t total_mib, rows, cols, row_bytes, bytes;
	int in_shards, out_shards, repeat, progress;
	dvar_compress compress;
	const char *dir;
	int many; /* --many-shards: 0 no, 1 yes, 2 only */
	char scratch[PATH_MAX];
	char in_dir[PATH_MAX + 16];
	char many_dir[PATH_MAX + 16]; /* the many-shard case's input */
	char out_path[PATH_MAX + 32];
	char err_path[PATH_MAX + 16];
	int64_t in_off[MAX_SHARDS + 1], out_off[MAX_SHARDS + 1];
	int64_t n_out; /* target shards: min(out_shards, rows) */
	char **data_files;
	int n_data_files;
	uint64_t data_bytes; /* sum of the input's data file sizes */
	int drop_ok;         /* /proc/sys/vm/drop_caches works */
	int direct_ok;       /* the raw copy could use O_DIRECT */
	double load_start, make_secs;
	double load[MAX_REPEAT]; /* 1-minute load average at the end of each repeat */
	uint64_t baseline_rss; /* peak RSS of a child that calls nothing */
	series t[T_COUNT];
	shard_series sh[MAX_SHARDS];
	series many_to[MANY_N], many_back[MANY_N]; /* 8 -> MANY_COUNTS[i] -> 8 */
	double many_make_secs;
	int many_refused;          /* DVAR_MAX_SHARDS + 1 was DVAR_EINVAL, nothing written */
	char many_refusal[1024];   /* its message */
	unsigned char *piece; /* PIECE_BYTES, for generating and comparing rows */
} g;

/* On Ctrl-C (or SIGTERM, SIGHUP), before the scratch folder goes: stop the
 * running launcher (its child dies with it), with async-signal-safe calls
 * only. */
static volatile pid_t child_pid;

static void stop_child(void)
{
	if (child_pid > 0) {
		kill(child_pid, SIGKILL);
		waitpid(child_pid, NULL, 0);
	}
}

/* ------------------------------------------------------------------ timing */

static void record(series *s, double wall, double cpu, uint64_t rss)
{
	s->wall[s->n] = wall;
	s->cpu[s->n] = cpu;
	s->rss[s->n++] = (double)rss;
}

/* ------------------------------------------------------------------ data */

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Rows [row0, row0 + nrows) of a table of cols columns, element i a
 * function of i alone:
 * roughly N(0, 0.02^2) (the sum of four 16-bit uniforms, scaled) as an
 * initializer leaves embeddings, every mantissa bit busy, never zero. Any
 * row can be produced again to check what a call wrote.
 */
static void fill_rows(float *dst, uint64_t cols, uint64_t row0, uint64_t nrows)
{
	const double scale = 0.02 * 1.7320508075688772 / 65536.0;
	uint64_t first = row0 * cols, n = nrows * cols;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = mix(SEED + first + i);
		int64_t sum = (int64_t)(r & 0xffff) + (int64_t)(r >> 16 & 0xffff) +
		              (int64_t)(r >> 32 & 0xffff) + (int64_t)(r >> 48) - 131070;

		dst[i] = (float)((double)(sum ? sum : 1) * scale);
	}
}

/* Rows per generated piece: whole rows, at most PIECE_BYTES (at least one row). */
static uint64_t piece_rows(uint64_t row_bytes)
{
	uint64_t n = PIECE_BYTES / row_bytes;

	return n ? n : 1;
}

/* 1 when the nrows rows at buf are rows [row0, row0 + nrows) of the table. */
static int rows_match(const unsigned char *buf, uint64_t row0, uint64_t nrows)
{
	uint64_t step = piece_rows(g.row_bytes);

	for (uint64_t done = 0; done < nrows; done += step) {
		uint64_t n = nrows - done < step ? nrows - done : step;

		fill_rows((float *)g.piece, g.cols, row0 + done, n);
		if (memcmp(buf + done * g.row_bytes, g.piece, n * g.row_bytes) != 0)
			return 0;
	}
	return 1;
}

static void shard_slice(const dvar_shape *shape, const int64_t *off, int64_t k, dvar_slice *out)
{
	dvar_slice_full(out, shape);
	out->start[0] = off[k];
	out->length[0] = off[k + 1] - off[k];
}

static void table_shape(dvar_shape *shape, uint64_t rows, uint64_t cols)
{
	int64_t dims[2] = { (int64_t)rows, (int64_t)cols };

	bench_check(dvar_shape_init(shape, 2, dims), "dvar_shape_init");
}

static void var_shape(dvar_shape *shape)
{
	table_shape(shape, g.rows, g.cols);
}

/*
 * An input at dir: a rows x cols table as `shards` div shards (rows
 * off[k] to off[k + 1]), each streamed through the writer in generated
 * pieces, with the attributes `dvar import --shards` gives (kind=sharded,
 * shards, layout=div); committed, so fsync'ed. Returns seconds.
 */
static double make_input(const char *dir, uint64_t rows, uint64_t cols, int shards,
                         const int64_t *off)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	dvar_shape shape;
	char count[16];
	uint64_t row_bytes = cols * 4, step = piece_rows(row_bytes);
	double t0 = bench_now();

	table_shape(&shape, rows, cols);
	wo.compress = g.compress;
	bench_check(dvar_writer_open(&w, dir, &wo), "input: dvar_writer_open");
	for (int k = 0; k < shards; k++) {
		dvar_slice sl;

		shard_slice(&shape, off, k, &sl);
		bench_check(dvar_writer_begin_slice(w, VAR_NAME, DVAR_FLOAT32, &shape, &sl),
		      "input: dvar_writer_begin_slice");
		for (int64_t r = off[k]; r < off[k + 1]; r += (int64_t)step) {
			uint64_t n = (uint64_t)(off[k + 1] - r) < step ? (uint64_t)(off[k + 1] - r) : step;

			fill_rows((float *)g.piece, cols, (uint64_t)r, n);
			bench_check(dvar_writer_write(w, g.piece, n * row_bytes), "input: dvar_writer_write");
		}
		bench_check(dvar_writer_end_slice(w), "input: dvar_writer_end_slice");
	}
	snprintf(count, sizeof count, "%d", shards);
	bench_check(dvar_writer_set_attr(w, VAR_NAME, DVAR_STORE_ATTR_KIND, DVAR_KIND_SHARDED),
	            "input: attr");
	bench_check(dvar_writer_set_attr(w, VAR_NAME, DVAR_SHARDING_ATTR_SHARDS, count), "input: attr");
	bench_check(dvar_writer_set_attr(w, VAR_NAME, DVAR_SHARDING_ATTR_LAYOUT, DVAR_LAYOUT_DIV),
	            "input: attr");
	bench_check(dvar_writer_commit(w), "input: dvar_writer_commit");
	dvar_writer_free(w);
	return bench_now() - t0;
}

/* The input's data files (data-*), in name order, and their total size. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_data_files(void)
{
	DIR *d = opendir(g.in_dir);
	struct dirent *e;

	if (!d)
		bench_fatal("cannot list %s: %s", g.in_dir, strerror(errno));
	while ((e = readdir(d))) {
		char path[PATH_MAX + 300];
		struct stat st;
		char **p;

		if (strncmp(e->d_name, "data-", 5) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", g.in_dir, e->d_name);
		if (stat(path, &st) != 0)
			bench_fatal("stat %s: %s", path, strerror(errno));
		if (!(p = realloc(g.data_files, (size_t)(g.n_data_files + 1) * sizeof *p)) ||
		    !(p[g.n_data_files] = strdup(path)))
			bench_fatal("out of memory");
		g.data_files = p;
		g.n_data_files++;
		g.data_bytes += (uint64_t)st.st_size;
	}
	closedir(d);
	if (g.n_data_files == 0)
		bench_fatal("the input %s holds no data files", g.in_dir);
	qsort(g.data_files, (size_t)g.n_data_files, sizeof *g.data_files, cmp_str);
}

/* ------------------------------------------------------------------ cache */

static void fadvise_dontneed(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/*
 * Before every case: nothing of the input in the page cache, so that every
 * case reads it from the disk. drop_caches when allowed; the input's files
 * are also evicted with POSIX_FADV_DONTNEED, which works for anyone.
 */
static void cool(void)
{
	DIR *d;
	struct dirent *e;

	if (g.drop_ok)
		bench_drop_caches();
	else
		sync();
	if (!(d = opendir(g.in_dir)))
		return;
	while ((e = readdir(d))) {
		char path[PATH_MAX + 300];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", g.in_dir, e->d_name);
		fadvise_dontneed(path);
	}
	closedir(d);
}

/* After a case: its output gone, and the deletes (and the discards a
 * `discard` mount issues at the journal commit) done before the next case. */
static void settle(void)
{
	bench_syncfs(g.scratch);
}

/* ------------------------------------------------------------------ raw copy */

static void write_all(int fd, const unsigned char *buf, uint64_t len, const char *path)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t w = write(fd, buf + done, len - done);

		if (w <= 0)
			bench_fatal("write %s: %s", path, w < 0 ? strerror(errno) : "nothing written");
		done += (uint64_t)w;
	}
}

/*
 * Copy the input's data files, back to back, into one new file: 4 MiB
 * buffered reads (the reader's pread goes through the page cache too) and
 * 4 MiB writes, O_DIRECT (as dvar's writer writes chunks) or buffered,
 * then fsync. One thread, read then write. Returns seconds.
 */
static double raw_copy(const char *dst, int direct, unsigned char *buf)
{
	double t0 = bench_now();
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
	uint64_t total = 0;

	if (out < 0 && direct && errno == EINVAL) {
		g.direct_ok = 0;
		return -1;
	}
	if (out < 0)
		bench_fatal("create %s: %s", dst, strerror(errno));
	for (int f = 0; f < g.n_data_files; f++) {
		int in = open(g.data_files[f], O_RDONLY);

		if (in < 0)
			bench_fatal("open %s: %s", g.data_files[f], strerror(errno));
		for (;;) {
			uint64_t got = 0;
			ssize_t r = 1;

			while (got < BENCH_IO_BLOCK && (r = read(in, buf + got, BENCH_IO_BLOCK - got)) > 0)
				got += (uint64_t)r;
			if (r < 0)
				bench_fatal("read %s: %s", g.data_files[f], strerror(errno));
			if (got == 0)
				break;
			total += got;
			if (!direct) {
				write_all(out, buf, got, dst);
			} else {
				/* O_DIRECT writes whole pages: pad the tail, cut back below */
				uint64_t padded = (got + 4095) / 4096 * 4096;
				ssize_t w;

				memset(buf + got, 0, padded - got);
				w = write(out, buf, padded);
				if (w < 0 && errno == EINVAL && total == got) {
					/* refused at write time (tmpfs) */
					close(out);
					close(in);
					unlink(dst);
					g.direct_ok = 0;
					return -1;
				}
				if (w != (ssize_t)padded)
					bench_fatal("write %s: %s", dst, w < 0 ? strerror(errno) : "short write");
			}
			if (r == 0)
				break;
		}
		close(in);
	}
	if (ftruncate(out, (off_t)total) != 0 || fsync(out) != 0)
		bench_fatal("fsync %s: %s", dst, strerror(errno));
	close(out);
	return bench_now() - t0;
}

static void case_raw(int which, unsigned char *buf)
{
	int direct = which == T_RAW_DIRECT && g.direct_ok;
	double c0, t;

	snprintf(g.out_path, sizeof g.out_path, "%s/raw.bin", g.scratch);
	cool();
	c0 = bench_cpu_self();
	t = raw_copy(g.out_path, direct, buf);
	if (t < 0) /* no O_DIRECT here: buffered, and said so in the table */
		t = raw_copy(g.out_path, 0, buf);
	record(&g.t[which], t, bench_cpu_self() - c0, 0);
	unlink(g.out_path);
}

/* ------------------------------------------------------------------ library calls in a child */

/* What the child runs: the call with the options the dvar command passes by
 * default (reshard: compress AUTO; both: min(CPUs, 4) threads). */
static int call_op(int op, const char *in, const char *out, int64_t shards)
{
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;

	switch (op) {
	case OP_RESHARD:
		ro.shards = shards;
		return dvar_reshard(in, out, &ro);
	case OP_EXPORT:
		eo.format = DVAR_EXPORT_DVAR;
		return dvar_export(in, out, &eo);
	case OP_SAFETENSORS:
		eo.format = DVAR_EXPORT_SAFETENSORS;
		return dvar_export(in, out, &eo);
	}
	return DVAR_OK;
}

/*
 * A child's ru_maxrss counts the image it was forked from: fork copies the
 * parent's resident pages into the child's count, and exec keeps the peak
 * (a child forked from a process holding 500 MiB reports 500 MiB). So the
 * calls are not forked from here but from a launcher: this program exec'ed
 * afresh (a few MiB) with the hidden first argument --launch, which forks a
 * child that makes the call and exits, waits for it with wait4 and prints
 * its exit status, wall time, CPU time and peak RSS on stdout. The child's
 * stderr (the error message, when the call fails) goes to STDERR_FILE.
 *
 *     dvar_bench_reshard --launch STDERR_FILE OP IN OUT SHARDS
 */
static int launch_main(int argc, char **argv)
{
	struct rusage ru;
	int status, op = -1;
	double t0;
	pid_t pid;

	if (argc != 7)
		return 125;
	for (int k = 0; k < (int)(sizeof OPS / sizeof OPS[0]); k++)
		if (!strcmp(argv[3], OPS[k]))
			op = k;
	if (op < 0)
		return 125;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	t0 = bench_now();
	pid = fork();
	if (pid < 0)
		return 125;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		int err = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int rc;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (null >= 0)
			dup2(null, 1);
		if (err >= 0)
			dup2(err, 2);
		rc = call_op(op, argv[4], argv[5], strtoll(argv[6], NULL, 10));
		if (rc != DVAR_OK)
			fprintf(stderr, "%s (%s)\n", dvar_error_last()->message, dvar_strerror(rc));
		_exit(rc == DVAR_OK ? 0 : 1);
	}
	while (wait4(pid, &status, 0, &ru) < 0)
		if (errno != EINTR)
			return 125;
	printf("%d %d %.9f %.6f %ld\n", WIFEXITED(status) ? 0 : 1,
	       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), bench_now() - t0,
	       bench_cpu_of(&ru), ru.ru_maxrss);
	return 0;
}

/* Run call op(in, out, shards) in a child of the launcher: its wall time
 * (fork to wait4, in the launcher), CPU time (user + system) and peak RSS;
 * bench_fatal with the child's message when the call fails. */
static void run_child(int op, const char *in, const char *out, int64_t shards, double *wall,
                      double *cpu, uint64_t *rss)
{
	char count[24], out_text[256] = "";
	char *argv[] = { PROGRAM, "--launch", g.err_path, (char *)OPS[op], (char *)in, (char *)out,
		         count, NULL };
	int fds[2], status, signaled = 0, code = 0;
	size_t got = 0;
	long maxrss = 0;
	ssize_t r;
	pid_t pid;

	snprintf(count, sizeof count, "%lld", (long long)shards);
	if (pipe(fds) != 0)
		bench_fatal("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		bench_fatal("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		dup2(fds[1], 1);
		execv("/proc/self/exe", argv);
		_exit(126);
	}
	child_pid = pid;
	close(fds[1]);
	while (got < sizeof out_text - 1 &&
	       ((r = read(fds[0], out_text + got, sizeof out_text - 1 - got)) > 0 ||
	        (r < 0 && errno == EINTR)))
		got += r > 0 ? (size_t)r : 0;
	out_text[got] = '\0';
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			bench_fatal("waitpid: %s", strerror(errno));
	child_pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    sscanf(out_text, "%d %d %lf %lf %ld", &signaled, &code, wall, cpu, &maxrss) != 5)
		bench_fatal("the launcher for %s failed (%s %d)", OPS[op],
		      WIFEXITED(status) ? "exit status" : "signal",
		      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	if (signaled || code != 0) {
		char msg[2048] = "";
		FILE *f = fopen(g.err_path, "r");
		size_t len = f ? fread(msg, 1, sizeof msg - 1, f) : 0;

		if (f)
			fclose(f);
		msg[len] = '\0';
		while (len && msg[len - 1] == '\n')
			msg[--len] = '\0';
		bench_fatal("%s %s -> %s failed (%s %d): %s", OPS[op], in, out,
		      signaled ? "signal" : "exit status", code, msg);
	}
	*rss = (uint64_t)maxrss * 1024;
}

/* ------------------------------------------------------------------ checks */

/* The rows every output is checked on: both edges of every input and output
 * shard, the first and last row, and SAMPLE_ROWS pseudo-random ones. */
static int check_rows_list(uint64_t *rows)
{
	int n = 0;

	rows[n++] = 0;
	rows[n++] = g.rows - 1;
	for (int k = 1; k < g.in_shards; k++) {
		rows[n++] = (uint64_t)g.in_off[k] - 1;
		rows[n++] = (uint64_t)g.in_off[k];
	}
	for (int64_t k = 1; k < g.n_out; k++) {
		rows[n++] = (uint64_t)g.out_off[k] - 1;
		rows[n++] = (uint64_t)g.out_off[k];
	}
	for (int i = 0; i < SAMPLE_ROWS; i++)
		rows[n++] = mix(SEED ^ (uint64_t)i) % g.rows;
	return n;
}

static const char *attr_or_none(dvar_reader *r, size_t i, const char *key)
{
	const char *v;

	return dvar_reader_var_attr(r, i, key, &v) == DVAR_OK ? v : "(none)";
}

/*
 * Untimed, on the first repeat: the output holds the one variable with its
 * shape, as `slices` slices in the div layout with the attributes a layout
 * of that many shards has, every checksum holds (dvar_reader_verify), and
 * the edge and sample rows read back bit for bit as generated. export also
 * promises a mappable variable: the rows are compared through the mapping.
 */
static void verify_dvar(const char *path, int64_t slices, const int64_t *off, int map)
{
	dvar_reader *r = NULL;
	dvar_var_info info;
	dvar_shape shape;
	dvar_mapping m = { 0 };
	uint64_t rows[2 + 2 * MAX_SHARDS * 2 + SAMPLE_ROWS], bad = 1;
	int nrows = check_rows_list(rows);
	const char *kind = slices > 1 ? DVAR_KIND_SHARDED : DVAR_KIND_PLAIN;
	char count[16];
	size_t i;

	var_shape(&shape);
	bench_check(dvar_reader_open(&r, path, NULL), "verify: dvar_reader_open");
	bench_check(dvar_reader_find(r, VAR_NAME, &i), "verify: dvar_reader_find");
	bench_check(dvar_reader_var(r, i, &info), "verify: dvar_reader_var");
	if (dvar_reader_num_vars(r) != 1 || info.dtype != DVAR_FLOAT32 ||
	    !dvar_shape_equal(&info.shape, &shape) || info.num_slices != (size_t)slices ||
	    info.raw_bytes != g.bytes)
		bench_fatal("%s: expected one float32 [%llu,%llu] variable of %llu bytes in %lld slices; "
		      "found %zu variables, '%s' in %zu slices, %llu bytes",
		      path, (unsigned long long)g.rows, (unsigned long long)g.cols,
		      (unsigned long long)g.bytes, (long long)slices, dvar_reader_num_vars(r),
		      info.name, info.num_slices, (unsigned long long)info.raw_bytes);
	for (int64_t k = 0; k < slices; k++) {
		dvar_slice got, want;

		bench_check(dvar_reader_var_slice(r, i, (size_t)k, &got), "verify: dvar_reader_var_slice");
		shard_slice(&shape, off, k, &want);
		if (memcmp(&got, &want, sizeof got) != 0)
			bench_fatal("%s: slice %lld is not rows [%lld, %lld)", path, (long long)k,
			      (long long)off[k], (long long)off[k + 1]);
	}
	snprintf(count, sizeof count, "%lld", (long long)slices);
	if (strcmp(attr_or_none(r, i, DVAR_STORE_ATTR_KIND), kind) != 0 ||
	    strcmp(attr_or_none(r, i, DVAR_SHARDING_ATTR_SHARDS), slices > 1 ? count : "(none)") ||
	    strcmp(attr_or_none(r, i, DVAR_SHARDING_ATTR_LAYOUT), slices > 1 ? DVAR_LAYOUT_DIV : "(none)"))
		bench_fatal("%s: attributes kind=%s shards=%s layout=%s, expected kind=%s and %s", path,
		      attr_or_none(r, i, DVAR_STORE_ATTR_KIND),
		      attr_or_none(r, i, DVAR_SHARDING_ATTR_SHARDS),
		      attr_or_none(r, i, DVAR_SHARDING_ATTR_LAYOUT), kind,
		      slices > 1 ? "shards, layout=div" : "no shards or layout");
	bench_check(dvar_reader_verify(r, NULL, NULL, &bad), "verify: dvar_reader_verify");
	if (bad)
		bench_fatal("%s: %llu chunks fail their checksums", path, (unsigned long long)bad);
	if (map)
		bench_check(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), "verify: dvar_reader_map");
	for (int k = 0; k < nrows; k++) {
		const unsigned char *row = NULL;

		if (map) {
			row = (const unsigned char *)m.data + rows[k] * g.row_bytes;
		} else {
			unsigned char *got = g.piece + PIECE_BYTES - g.row_bytes;
			dvar_slice one;

			dvar_slice_full(&one, &shape);
			one.start[0] = (int64_t)rows[k];
			one.length[0] = 1;
			bench_check(dvar_reader_read(r, i, &one, got, g.row_bytes), "verify: dvar_reader_read");
			row = got;
		}
		fill_rows((float *)g.piece, g.cols, rows[k], 1);
		if (memcmp(row, g.piece, g.row_bytes) != 0)
			bench_fatal("%s: row %llu differs from the input", path, (unsigned long long)rows[k]);
	}
	dvar_reader_unmap(&m);
	dvar_reader_free(r);
}

/* The safetensors file: header length, the tensor's dtype, shape and offsets
 * in the header, the file's size, and the rows checked as above. */
static void verify_safetensors(const char *path)
{
	uint64_t rows[2 + 2 * MAX_SHARDS * 2 + SAMPLE_ROWS], hlen = 0;
	int nrows = check_rows_list(rows), fd = open(path, O_RDONLY);
	unsigned char n8[8];
	char want[256], *hdr;
	struct stat st;

	if (fd < 0 || fstat(fd, &st) != 0 || pread(fd, n8, 8, 0) != 8)
		bench_fatal("%s: cannot read: %s", path, strerror(errno));
	for (int b = 0; b < 8; b++)
		hlen |= (uint64_t)n8[b] << (8 * b);
	if (hlen > (1u << 20) || (uint64_t)st.st_size != 8 + hlen + g.bytes ||
	    !(hdr = calloc(1, hlen + 1)))
		bench_fatal("%s: %llu bytes with a %llu-byte header; expected 8 + header + %llu", path,
		      (unsigned long long)st.st_size, (unsigned long long)hlen,
		      (unsigned long long)g.bytes);
	if (pread(fd, hdr, hlen, 8) != (ssize_t)hlen)
		bench_fatal("%s: short header", path);
	snprintf(want, sizeof want,
	         "\"" VAR_NAME "\":{\"dtype\":\"F32\",\"shape\":[%llu,%llu],\"data_offsets\":[0,%llu]}",
	         (unsigned long long)g.rows, (unsigned long long)g.cols, (unsigned long long)g.bytes);
	if (!strstr(hdr, want))
		bench_fatal("%s: the header lacks %s: %.300s", path, want, hdr);
	free(hdr);
	for (int k = 0; k < nrows; k++) {
		unsigned char *row = g.piece + PIECE_BYTES - g.row_bytes;

		if (pread(fd, row, g.row_bytes, (off_t)(8 + hlen + rows[k] * g.row_bytes)) !=
		    (ssize_t)g.row_bytes)
			bench_fatal("%s: short read of row %llu", path, (unsigned long long)rows[k]);
		fill_rows((float *)g.piece, g.cols, rows[k], 1);
		if (memcmp(row, g.piece, g.row_bytes) != 0)
			bench_fatal("%s: row %llu differs from the input", path, (unsigned long long)rows[k]);
	}
	close(fd);
}

/* ------------------------------------------------------------------ cases */

static void case_call(int which, int verify_it)
{
	int op = which == T_RESHARD ? OP_RESHARD : which == T_EXPORT ? OP_EXPORT : OP_SAFETENSORS;
	double wall, cpu;
	uint64_t rss;
	int64_t whole[2] = { 0, (int64_t)g.rows };

	snprintf(g.out_path, sizeof g.out_path, "%s/out%s", g.scratch,
	         which == T_EXPORT_ST ? ".safetensors" : "");
	cool();
	run_child(op, g.in_dir, g.out_path, g.out_shards, &wall, &cpu, &rss);
	record(&g.t[which], wall, cpu, rss);
	if (verify_it && which == T_RESHARD)
		verify_dvar(g.out_path, g.n_out, g.out_off, 0);
	else if (verify_it && which == T_EXPORT)
		verify_dvar(g.out_path, 1, whole, 1);
	else if (verify_it)
		verify_safetensors(g.out_path);
	bench_remove_tree(g.out_path);
}

/*
 * Restore each target shard of the out_shards layout from the in_shards
 * checkpoint, cold, as a worker of the new layout would: one
 * dvar_reader_read of its rows into a pre-faulted buffer, timed from
 * dvar_reader_open; bytes read (dvar_reader_bytes_read) against the
 * shard's bytes.
 */
static void case_shard_reads(int verify_it)
{
	uint64_t cap = 0;
	unsigned char *buf;
	dvar_shape shape;

	var_shape(&shape);
	for (int64_t k = 0; k < g.n_out; k++)
		if ((uint64_t)(g.out_off[k + 1] - g.out_off[k]) * g.row_bytes > cap)
			cap = (uint64_t)(g.out_off[k + 1] - g.out_off[k]) * g.row_bytes;
	buf = bench_alloc_prefaulted(cap);
	for (int64_t k = 0; k < g.n_out; k++) {
		shard_series *s = &g.sh[k];
		dvar_reader *r = NULL;
		dvar_slice sl;
		size_t i;
		double t0;

		shard_slice(&shape, g.out_off, k, &sl);
		s->needed = (uint64_t)sl.length[0] * g.row_bytes;
		cool();
		t0 = bench_now();
		bench_check(dvar_reader_open(&r, g.in_dir, NULL), "dvar_reader_open");
		bench_check(dvar_reader_find(r, VAR_NAME, &i), "dvar_reader_find");
		bench_check(dvar_reader_read(r, i, &sl, buf, s->needed), "dvar_reader_read of a target shard");
		s->wall[s->n++] = bench_now() - t0;
		if (dvar_reader_bytes_read(r) > s->read)
			s->read = dvar_reader_bytes_read(r);
		dvar_reader_free(r);
		if (verify_it && !rows_match(buf, (uint64_t)g.out_off[k], (uint64_t)sl.length[0]))
			bench_fatal("target shard %lld read back different bytes", (long long)k);
	}
	munmap(buf, cap);
}

static void run_case(int k, int first, unsigned char *copy_buf)
{
	switch (k) {
	case K_RAW_DIRECT:
		case_raw(T_RAW_DIRECT, copy_buf);
		break;
	case K_RAW_BUF:
		case_raw(T_RAW_BUF, copy_buf);
		break;
	case K_RESHARD:
		case_call(T_RESHARD, first);
		break;
	case K_EXPORT:
		case_call(T_EXPORT, first);
		break;
	case K_EXPORT_ST:
		case_call(T_EXPORT_ST, first);
		break;
	case K_SHARD_READS:
		case_shard_reads(first);
		break;
	}
	settle();
}

/* ------------------------------------------------------------------ many shards */

/* The variable's digest in the checkpoint at path (from the chunk checksums
 * where the slices tile it: no data read) and its slice count. */
static uint32_t digest_of(const char *path, size_t *slices)
{
	dvar_reader *r = NULL;
	dvar_var_info info;
	uint32_t crc;
	size_t i;

	bench_check(dvar_reader_open(&r, path, NULL), "many shards: dvar_reader_open");
	bench_check(dvar_reader_find(r, VAR_NAME, &i), "many shards: dvar_reader_find");
	bench_check(dvar_reader_var(r, i, &info), "many shards: dvar_reader_var");
	bench_check(dvar_reader_digest(r, i, &crc), "many shards: dvar_reader_digest");
	*slices = info.num_slices;
	dvar_reader_free(r);
	return crc;
}

/*
 * Reshard the many-shard input to MANY_COUNTS[i] shards and that back to
 * MANY_IN_SHARDS, each a child as above, page cache warm (the cost measured
 * is the per-shard work, not the disk). On the first repeat both outputs
 * must hold the input's digest in the expected number of slices.
 */
static void case_many(int i, int verify_it)
{
	char out[PATH_MAX + 32], back[PATH_MAX + 32];
	int64_t m = MANY_COUNTS[i];
	double wall, cpu;
	uint64_t rss;

	snprintf(out, sizeof out, "%s/many-%lld", g.scratch, (long long)m);
	snprintf(back, sizeof back, "%s/many-back", g.scratch);
	run_child(OP_RESHARD, g.many_dir, out, m, &wall, &cpu, &rss);
	record(&g.many_to[i], wall, cpu, rss);
	run_child(OP_RESHARD, out, back, MANY_IN_SHARDS, &wall, &cpu, &rss);
	record(&g.many_back[i], wall, cpu, rss);
	if (verify_it) {
		size_t n_in, n_out, n_back;
		uint32_t want = digest_of(g.many_dir, &n_in), got = digest_of(out, &n_out),
			 got_back = digest_of(back, &n_back);

		if (got != want || n_out != (size_t)m || got_back != want || n_back != MANY_IN_SHARDS)
			bench_fatal("many shards: the input's digest is %08x in %zu slices; %lld shards "
			      "gave %08x in %zu slices and back %08x in %zu", want, n_in, (long long)m,
			      got, n_out, got_back, n_back);
	}
	bench_remove_tree(out);
	bench_remove_tree(back);
	settle();
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		bench_fatal("cannot list %s: %s", dir, strerror(errno));
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* One shard more than DVAR_MAX_SHARDS must be DVAR_EINVAL with nothing left
 * in the scratch folder (no output, no temporary). */
static void case_too_many(void)
{
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	char out[PATH_MAX + 32];
	int before = count_entries(g.scratch), rc;

	snprintf(out, sizeof out, "%s/many-refused", g.scratch);
	ro.shards = DVAR_MAX_SHARDS + 1;
	rc = dvar_reshard(g.many_dir, out, &ro);
	snprintf(g.many_refusal, sizeof g.many_refusal, "%s (%s)",
	         rc == DVAR_OK ? "accepted" : dvar_error_last()->message, dvar_strerror(rc));
	g.many_refused = rc == DVAR_EINVAL && access(out, F_OK) != 0 &&
	                 count_entries(g.scratch) == before;
	bench_remove_tree(out);
}

static void run_many(void)
{
	int64_t off[MANY_IN_SHARDS + 1], n;

	snprintf(g.many_dir, sizeof g.many_dir, "%s/many-in", g.scratch);
	bench_check(dvar_div_layout(MANY_ROWS, MANY_IN_SHARDS, off, &n), "dvar_div_layout");
	g.many_make_secs = make_input(g.many_dir, MANY_ROWS, MANY_COLS, MANY_IN_SHARDS, off);
	for (int r = 0; r < g.repeat; r++) {
		for (int i = 0; i < MANY_N; i++)
			case_many(i, r == 0);
		if (g.progress) {
			fprintf(stderr, "many shards, repeat %d/%d:", r + 1, g.repeat);
			for (int i = 0; i < MANY_N; i++)
				fprintf(stderr, " %s%lld %.3f s, back %.3f", i ? "| " : "",
				        (long long)MANY_COUNTS[i],
				        bench_last(g.many_to[i].wall, g.many_to[i].n),
				        bench_last(g.many_back[i].wall, g.many_back[i].n));
			fputc('\n', stderr);
		}
	}
	case_too_many();
	bench_remove_tree(g.many_dir);
}

static double last(int which)
{
	return bench_last(g.t[which].wall, g.t[which].n);
}

static void progress_line(int r)
{
	if (!g.progress)
		return;
	fprintf(stderr,
	        "repeat %d/%d: raw copy %.2f s, buffered %.2f | reshard %.2f | export %.2f, "
	        "safetensors %.2f | load %.2f\n",
	        r + 1, g.repeat, last(T_RAW_DIRECT), last(T_RAW_BUF), last(T_RESHARD),
	        last(T_EXPORT), last(T_EXPORT_ST), bench_load_average());
}

/* ------------------------------------------------------------------ report */

static double max_of(const double *v, int n)
{
	double m = 0;

	for (int i = 0; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

/* Throughput of a over b (b's time over a's), the median of the per-repeat
 * ratios, so the host's drift between repeats cancels. */
static double speed_ratio(int a, int b)
{
	return bench_median_ratio(g.t[b].wall, g.t[b].n, g.t[a].wall, g.t[a].n);
}

/* One table row; base/base_name give the "vs raw" throughput ratio (none: -1). */
static void row(const char *label, int which, int base, const char *base_name)
{
	const series *s = &g.t[which];
	double lo, hi, med = bench_median(s->wall, s->n);
	char rss[24] = "", vs[48] = "";

	bench_min_max(s->wall, s->n, &lo, &hi);
	if (max_of(s->rss, s->n) > 0)
		snprintf(rss, sizeof rss, "%8.1f", max_of(s->rss, s->n) / BENCH_MIB);
	if (base >= 0)
		snprintf(vs, sizeof vs, "%.2fx %s", speed_ratio(which, base), base_name);
	bench_print_row("  %-48s %7.3f [%6.3f-%6.3f] %6.2f %8s %6.2f  %s", label, med, lo, hi,
	                bench_median(s->cpu, s->n), rss, (double)g.bytes / med / 1e9, vs);
}

/* The 2 GiB part: header, table, shard reads; its goals into gl. Returns
 * how many. */
static int report_main(bench_goal *gl)
{
	const char *dio = g.direct_ok ? "O_DIRECT" : "buffered (no O_DIRECT here)";
	double worst_rss = 0, worst_ratio = 0;
	char label[128];

	for (int w = T_RESHARD; w <= T_EXPORT_ST; w++)
		if (max_of(g.t[w].rss, g.t[w].n) > worst_rss)
			worst_rss = max_of(g.t[w].rss, g.t[w].n);

	printf("'%s' float32 [%llu,%llu] = %llu bytes (%.2f GiB),\n"
	       "saved as %d div shards (data files %llu bytes), compression %s, fsync'ed; "
	       "written in %.2f s\n",
	       VAR_NAME, (unsigned long long)g.rows, (unsigned long long)g.cols,
	       (unsigned long long)g.bytes, BENCH_GIB(g.bytes), g.in_shards,
	       (unsigned long long)g.data_bytes, bench_compress_name(g.compress), g.make_secs);
	printf("calls, each in a child process: dvar_reshard(IN, OUT, shards=%d) | dvar_export(IN, "
	       "OUT, DVAR or SAFETENSORS);\nreshard's compression AUTO, threads min(CPUs, 4): the "
	       "dvar command's defaults\n",
	       g.out_shards);
	printf("page cache emptied before every case: %s\n",
	       g.drop_ok ? "/proc/sys/vm/drop_caches (+ POSIX_FADV_DONTNEED on the input)"
	                 : "POSIX_FADV_DONTNEED on the input's files (drop_caches not allowed)");
	printf("load average (1 min): %.2f at start; after each repeat", g.load_start);
	for (int r = 0; r < g.repeat; r++)
		printf(" %.2f", g.load[r]);
	printf("\nwall = fork to wait4 (calls) or open to fsync (raw), median [min-max]; CPU = user +\n"
	       "system s (median) and peak RSS = ru_maxrss (largest), both of the child; GB/s =\n"
	       "1e9 bytes of the variable per second of median wall; vs raw = throughput over the\n"
	       "raw copy's, median of the per-repeat ratios\n\n");
	printf("  %-48s %7s %-15s %6s %8s %6s  %s\n", "case", "wall s", " [min-max]", "CPU s",
	       "RSS MiB", "GB/s", "vs raw");
	printf("machine, same bytes, same run (one thread, 4 MiB blocks, this process)\n");
	snprintf(label, sizeof label, "raw copy: buffered read, %s write + fsync", dio);
	row(label, T_RAW_DIRECT, -1, "");
	row("raw copy: buffered read, buffered write + fsync", T_RAW_BUF, -1, "");
	printf("library call, a child process\n");
	snprintf(label, sizeof label, "dvar_reshard %d -> %lld shards", g.in_shards,
	         (long long)g.n_out);
	row(label, T_RESHARD, T_RAW_DIRECT, "raw copy");
	row("dvar_export DVAR (one mappable tensor)", T_EXPORT, T_RAW_DIRECT, "raw copy");
	row("dvar_export SAFETENSORS", T_EXPORT_ST, T_RAW_BUF, "raw buffered");
	printf("  (a child that calls nothing, for scale: peak RSS %.1f MiB)\n",
	       (double)g.baseline_rss / BENCH_MIB);

	printf("\nrestoring one target shard of %lld from the %d-shard checkpoint: dvar_reader_read "
	       "of its rows, cold\n",
	       (long long)g.n_out, g.in_shards);
	printf("  %-6s %-20s %13s %13s %11s %7s %6s\n", "shard", "rows", "bytes needed",
	       "bytes read", "read/needed", "wall s", "GB/s");
	for (int64_t k = 0; k < g.n_out; k++) {
		const shard_series *s = &g.sh[k];
		double med = bench_median(s->wall, s->n), q = (double)s->read / (double)s->needed;
		char rows[48];

		snprintf(rows, sizeof rows, "[%lld, %lld)", (long long)g.out_off[k],
		         (long long)g.out_off[k + 1]);
		printf("  %-6lld %-20s %13llu %13llu %11.4f %7.3f %6.2f\n", (long long)k, rows,
		       (unsigned long long)s->needed, (unsigned long long)s->read, q, med,
		       (double)s->needed / med / 1e9);
		worst_ratio = q > worst_ratio ? q : worst_ratio;
	}

	gl[0] = (bench_goal){ "reshard throughput >= 0.8x raw copy",
		              speed_ratio(T_RESHARD, T_RAW_DIRECT), 0.8, 0, "x" };
	gl[1] = (bench_goal){ "export (dvar) throughput >= 0.8x raw copy",
		              speed_ratio(T_EXPORT, T_RAW_DIRECT), 0.8, 0, "x" };
	gl[2] = (bench_goal){ "peak RSS of reshard and export <= 256 MiB", worst_rss / BENCH_MIB, 256,
		              1, "MiB" };
	gl[3] = (bench_goal){ "bytes read / needed, one target shard, worst <= 1.05", worst_ratio,
		              1.05, 1, "x" };
	return 4;
}

/* One row of the many-shard table: a series' median [min-max], CPU, peak
 * RSS and microseconds per shard written or read. */
static void many_cells(char *out, size_t cap, const series *s, int64_t shards)
{
	double lo, hi, med = bench_median(s->wall, s->n);

	bench_min_max(s->wall, s->n, &lo, &hi);
	snprintf(out, cap, "%6.3f [%5.3f-%5.3f] %5.2f %6.1f %6.1f", med, lo, hi,
	         bench_median(s->cpu, s->n), max_of(s->rss, s->n) / BENCH_MIB,
	         med / (double)shards * 1e6);
}

/* The many-shard part; its goals into gl (their texts static). Returns how
 * many. */
static int report_many(bench_goal *gl)
{
	static char text[4][64];
	const int z = MANY_N - 1;
	const long long big = (long long)MANY_COUNTS[z], prev = (long long)MANY_COUNTS[z - 1];

	printf("\nmany shards: '%s' float32 [%d,%d] = %.0f MiB, saved as %d shards (written in "
	       "%.2f s);\ndvar_reshard to M shards and back to %d, each a child as above, page "
	       "cache warm,\n%d repeat%s; us/sh = median wall per shard of M\n",
	       VAR_NAME, MANY_ROWS, MANY_COLS, (double)MANY_ROWS * MANY_COLS * 4 / BENCH_MIB,
	       MANY_IN_SHARDS, g.many_make_secs, MANY_IN_SHARDS, g.repeat, g.repeat > 1 ? "s" : "");
	snprintf(text[0], sizeof text[0], "%d -> M", MANY_IN_SHARDS);
	snprintf(text[1], sizeof text[1], "M -> %d", MANY_IN_SHARDS);
	printf("  %-6s | %-41s | %s\n", "", text[0], text[1]);
	printf("  %-6s | %6s %-13s %5s %6s %6s | %6s %-13s %5s %6s %6s\n", "M", "wall s",
	       " [min-max]", "CPU s", "RSS", "us/sh", "wall s", " [min-max]", "CPU s", "RSS", "us/sh");
	for (int i = 0; i < MANY_N; i++) {
		char to[96], back[96];

		many_cells(to, sizeof to, &g.many_to[i], MANY_COUNTS[i]);
		many_cells(back, sizeof back, &g.many_back[i], MANY_COUNTS[i]);
		bench_print_row("  %-6lld | %s | %s", (long long)MANY_COUNTS[i], to, back);
	}
	printf("  (RSS: MiB, peak)\n  %d shards: %s\n", DVAR_MAX_SHARDS + 1, g.many_refusal);

	snprintf(text[0], sizeof text[0], "reshard %d -> %lld shards <= 1 s", MANY_IN_SHARDS, big);
	snprintf(text[1], sizeof text[1], "reshard %lld -> %d shards <= 1 s", big, MANY_IN_SHARDS);
	snprintf(text[2], sizeof text[2], "time %lld / %lld shards <= 5 (linear 4, quadr. 16)", big,
	         prev);
	snprintf(text[3], sizeof text[3], "%d shards refused, nothing written", DVAR_MAX_SHARDS + 1);
	gl[0] = (bench_goal){ text[0], bench_median(g.many_to[z].wall, g.many_to[z].n), 1, 1, "s" };
	gl[1] = (bench_goal){ text[1], bench_median(g.many_back[z].wall, g.many_back[z].n), 1, 1,
		              "s" };
	gl[2] = (bench_goal){ text[2],
		              bench_median_ratio(g.many_to[z].wall, g.many_to[z].n,
		                                 g.many_to[z - 1].wall, g.many_to[z - 1].n),
		              5, 1, "x" };
	gl[3] = (bench_goal){ text[3], g.many_refused, 1, 0, "" };
	return 4;
}

static void report(void)
{
	static const bench_goal_style style = { 56, 8, 4, 1, 0 };
	bench_goal gl[8];
	int n = 0;

	printf("\n%s: dvar %s; %d repeat%s, scratch in %s; on %ld CPUs\n", PROGRAM, dvar_version(),
	       g.repeat, g.repeat > 1 ? "s" : "", g.dir, sysconf(_SC_NPROCESSORS_ONLN));
	if (g.many != 2)
		n += report_main(gl + n);
	if (g.many)
		n += report_many(gl + n);
	bench_print_goals(gl, n, &style);
}

/* ------------------------------------------------------------------ setup */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROGRAM " [options]\n"
	        "  --total-mib N      MiB of the variable (default 2048)\n"
	        "  --cols N           float32 columns per row (default 256); rows = the rest\n"
	        "  --in-shards N      shards of the input (default 8, at most %d)\n"
	        "  --out-shards M     shards to reshard to (default 3, at most %d)\n"
	        "  --dir DIR          where the scratch folder goes, on the disk to measure\n"
	        "                     (default $TMPDIR or /tmp)\n"
	        "  --repeat N         repeats; medians are reported (default 5, max %d)\n"
	        "  --compress MODE    chunks of the input: none (default), auto or lz4\n"
	        "  --many-shards yes|no|only\n"
	        "                     also reshard a 24 MiB table to 1000, 4000 and 16000\n"
	        "                     shards and back, and try 65537 (default yes; a few\n"
	        "                     seconds); only: nothing else\n"
	        "  --progress, --no-progress\n"
	        "                     a line per repeat on stderr (default: when stderr is a "
	        "terminal)\n"
	        "Needs free space for the input and one output at a time (about 2.1x the\n"
	        "variable plus 512 MiB) and memory for the largest target shard. Run it as\n"
	        "root so that the page cache can be dropped; otherwise the input's pages are\n"
	        "evicted with POSIX_FADV_DONTNEED. Everything it writes is removed.\n",
	        MAX_SHARDS, MAX_SHARDS, MAX_REPEAT);
}

static void parse_args(int argc, char **argv)
{
	g.many = 1;
	g.total_mib = 2048;
	g.cols = 256;
	g.in_shards = 8;
	g.out_shards = 3;
	g.repeat = 5;
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
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--total-mib")) {
			g.total_mib = (uint64_t)bench_parse_num(a, v, 1, 1 << 20);
		} else if (!strcmp(a, "--cols")) {
			g.cols = (uint64_t)bench_parse_num(a, v, 1, 1 << 20);
		} else if (!strcmp(a, "--in-shards")) {
			g.in_shards = (int)bench_parse_num(a, v, 1, MAX_SHARDS);
		} else if (!strcmp(a, "--out-shards")) {
			g.out_shards = (int)bench_parse_num(a, v, 1, MAX_SHARDS);
		} else if (!strcmp(a, "--repeat")) {
			g.repeat = (int)bench_parse_num(a, v, 1, MAX_REPEAT);
		} else if (!strcmp(a, "--many-shards") && v &&
		           (!strcmp(v, "yes") || !strcmp(v, "no") || !strcmp(v, "only"))) {
			g.many = !strcmp(v, "yes") ? 1 : !strcmp(v, "only") ? 2 : 0;
		} else {
			bench_bad_option(a);
		}
		i++;
	}
	g.row_bytes = g.cols * 4;
	g.rows = g.total_mib * BENCH_MIB / g.row_bytes;
	if (g.rows < (uint64_t)g.in_shards || g.rows < (uint64_t)g.out_shards) {
		fprintf(stderr, "%s: --total-mib %llu over rows of %llu floats leaves %llu rows, fewer "
		        "than the shards\n", PROGRAM, (unsigned long long)g.total_mib,
		        (unsigned long long)g.cols, (unsigned long long)g.rows);
		exit(2);
	}
	if (g.row_bytes > PIECE_BYTES / 2) {
		fprintf(stderr, "%s: --cols %llu makes rows of more than %llu bytes\n", PROGRAM,
		        (unsigned long long)g.cols, (unsigned long long)(PIECE_BYTES / 2));
		exit(2);
	}
	g.bytes = g.rows * g.row_bytes;
}

/*
 * At most the input and one output exist at a time (each output is deleted
 * before the next case), each the variable's bytes plus chunk padding: 2x,
 * plus 5% and 512 MiB of headroom (which also holds the many-shard case's
 * input and two outputs). Memory: the largest target shard.
 */
static void check_resources(void)
{
	uint64_t need = bench_space_needed(2, g.bytes), avail, mem, shard = 0;

	if (bench_free_space(g.dir, &avail) != 0)
		bench_fatal("cannot use --dir %s: %s", g.dir, strerror(errno));
	if (g.many == 2)
		need = bench_space_needed(3, (uint64_t)MANY_ROWS * MANY_COLS * 4);
	if (avail < need) {
		fprintf(stderr,
		        "%s: %s has %.2f GiB free; this run needs %.2f GiB (the %.2f GiB input and one "
		        "output at a time, plus 5%% and 512 MiB of headroom). Free some space, pass "
		        "--dir on a larger disk, or lower --total-mib.\n",
		        PROGRAM, g.dir, BENCH_GIB(avail), BENCH_GIB(need), BENCH_GIB(g.bytes));
		exit(1);
	}
	for (int64_t k = 0; k < g.n_out; k++)
		if ((uint64_t)(g.out_off[k + 1] - g.out_off[k]) * g.row_bytes > shard)
			shard = (uint64_t)(g.out_off[k + 1] - g.out_off[k]) * g.row_bytes;
	mem = bench_mem_available();
	if (mem && mem < shard + 256 * BENCH_MIB) {
		fprintf(stderr,
		        "%s: %.2f GiB of memory available; restoring a target shard needs %.2f GiB "
		        "plus 256 MiB. Lower --total-mib or raise --out-shards.\n",
		        PROGRAM, BENCH_GIB(mem), BENCH_GIB(shard));
		exit(1);
	}
}

/* The 2 GiB part: input, repeats of every case, the input removed. */
static void run_main(void)
{
	unsigned char *copy_buf;
	double wall, cpu;

	snprintf(g.in_dir, sizeof g.in_dir, "%s/in", g.scratch);
	if (g.progress)
		fprintf(stderr, "%s: writing the input, %.2f GiB as %d shards, into %s\n", PROGRAM,
		        BENCH_GIB(g.bytes), g.in_shards, g.scratch);
	g.make_secs = make_input(g.in_dir, g.rows, g.cols, g.in_shards, g.in_off);
	list_data_files();
	copy_buf = bench_alloc_prefaulted(BENCH_IO_BLOCK);

	run_child(OP_NOTHING, "-", "-", 0, &wall, &cpu, &g.baseline_rss);
	for (int r = 0; r < g.repeat; r++) {
		/* Every case starts cold and after the previous one's output is
		 * deleted and synced; the first case moves on by one every repeat. */
		for (int k = 0; k < K_COUNT; k++)
			run_case((r + k) % K_COUNT, r == 0, copy_buf);
		g.load[r] = bench_load_average();
		progress_line(r);
	}
	munmap(copy_buf, BENCH_IO_BLOCK);
	bench_remove_tree(g.in_dir);
	settle();
	for (int f = 0; f < g.n_data_files; f++)
		free(g.data_files[f]);
	free(g.data_files);
}

int main(int argc, char **argv)
{
	static const bench_program prog = { PROGRAM, -1, usage, NULL, NULL };
	int64_t n;

	if (argc > 1 && !strcmp(argv[1], "--launch"))
		return launch_main(argc, argv);
	bench_init(&prog);
	parse_args(argc, argv);
	bench_check(dvar_div_layout((int64_t)g.rows, g.in_shards, g.in_off, &n), "dvar_div_layout");
	bench_check(dvar_div_layout((int64_t)g.rows, g.out_shards, g.out_off, &g.n_out),
	      "dvar_div_layout");
	check_resources();
	g.load_start = bench_load_average();
	g.direct_ok = 1;

	if (bench_scratch_create(g.dir, "dvar-bench-reshard", stop_child) != 0)
		bench_fatal("cannot create a scratch folder in %s: %s", g.dir, strerror(errno));
	snprintf(g.scratch, sizeof g.scratch, "%s", bench_scratch());
	snprintf(g.err_path, sizeof g.err_path, "%s/stderr", g.scratch);
	g.drop_ok = bench_drop_caches() == 0;
	if (!(g.piece = aligned_alloc(4096, PIECE_BYTES)))
		bench_fatal("out of memory");

	if (g.many != 2)
		run_main();
	if (g.many)
		run_many();
	report();

	bench_scratch_remove();
	free(g.piece);
	return 0;
}
