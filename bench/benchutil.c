/*
 * benchutil.c - what the benchmark programs in bench/ share. Owned by
 * bench/, for its programs only; see benchutil.h.
 */
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const bench_program *prog;

/* ------------------------------------------------------------------ scratch folder */

static char scratch[PATH_MAX];
static char *rm_argv[5];
static volatile sig_atomic_t rm_armed;
static void (*signal_hook)(void);

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	remove(path);
	return 0;
}

void bench_remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void on_signal(int sig)
{
	if (signal_hook)
		signal_hook();
	if (rm_armed) {
		pid_t p = fork();

		if (p == 0) {
			char *envp[] = { NULL };
			execve("/bin/rm", rm_argv, envp);
			_exit(127);
		}
		if (p > 0)
			waitpid(p, NULL, 0);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

int bench_scratch_create(const char *dir, const char *stem, void (*on_signal_hook)(void))
{
	static char rm[] = "rm", rf[] = "-rf", dd[] = "--";
	char tmpl[PATH_MAX];

	snprintf(tmpl, sizeof tmpl, "%s/%s-XXXXXX", dir, stem);
	if (!mkdtemp(tmpl))
		return -1;
	snprintf(scratch, sizeof scratch, "%s", tmpl);
	rm_argv[0] = rm;
	rm_argv[1] = rf;
	rm_argv[2] = dd;
	rm_argv[3] = scratch;
	rm_argv[4] = NULL;
	signal_hook = on_signal_hook;
	rm_armed = 1;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	return 0;
}

const char *bench_scratch(void)
{
	return scratch;
}

void bench_scratch_remove(void)
{
	if (rm_armed) {
		rm_armed = 0;
		bench_remove_tree(scratch);
	}
}

/* ------------------------------------------------------------------ program */

void bench_init(const bench_program *p)
{
	prog = p;
}

void bench_fatal(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog ? prog->name : "dvar_bench");
	if (prog && prog->rank >= 0)
		fprintf(stderr, "worker %d: ", prog->rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	bench_scratch_remove();
	if (prog && prog->on_fatal)
		prog->on_fatal();
	exit(1);
}

void bench_check(int rc, const char *what)
{
	if (rc != DVAR_OK)
		bench_fatal("%s: %s (%s)", what, dvar_error_last()->message, dvar_strerror(rc));
}

/* ------------------------------------------------------------------ options */

static void bad_args(void) __attribute__((noreturn));

static void bad_args(void)
{
	if (prog && prog->rank <= 0 && prog->usage)
		prog->usage(stderr);
	if (prog && prog->on_bad_args)
		prog->on_bad_args();
	exit(2);
}

long bench_parse_num(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = s ? strtol(s, &end, 10) : 0;
	if (!s || errno || *end || v < lo || v > hi) {
		if (!prog || prog->rank <= 0)
			fprintf(stderr, "%s: %s needs a number from %ld to %ld\n",
			        prog ? prog->name : "dvar_bench", opt, lo, hi);
		bad_args();
	}
	return v;
}

void bench_bad_option(const char *opt)
{
	if (!prog || prog->rank <= 0)
		fprintf(stderr, "%s: unknown or incomplete option '%s'\n",
		        prog ? prog->name : "dvar_bench", opt);
	bad_args();
}

int bench_common_option(const char *a, const char *v, int *progress, const char **dir,
                        dvar_compress *compress)
{
	if (progress && (!strcmp(a, "--progress") || !strcmp(a, "--no-progress"))) {
		*progress = !strcmp(a, "--progress");
		return 1;
	}
	if (dir && !strcmp(a, "--dir")) {
		if (!v)
			bench_bad_option(a);
		*dir = v;
		return 2;
	}
	if (compress && !strcmp(a, "--compress")) {
		if (v && !strcmp(v, "none"))
			*compress = DVAR_COMPRESS_NONE;
		else if (v && !strcmp(v, "auto"))
			*compress = DVAR_COMPRESS_AUTO;
		else if (v && !strcmp(v, "lz4"))
			*compress = DVAR_COMPRESS_LZ4;
		else
			bench_bad_option(a);
		return 2;
	}
	return 0;
}

const char *bench_compress_name(dvar_compress c)
{
	return c == DVAR_COMPRESS_NONE ? "off" : c == DVAR_COMPRESS_AUTO ? "AUTO" : "LZ4";
}

const char *bench_default_dir(void)
{
	const char *t = getenv("TMPDIR");

	return t && t[0] ? t : "/tmp";
}

void bench_threads_text(char *out, size_t cap, int threads)
{
	if (threads > 0)
		snprintf(out, cap, "%d", threads);
	else
		snprintf(out, cap, "the library's default for %ld CPUs", sysconf(_SC_NPROCESSORS_ONLN));
}

/* ------------------------------------------------------------------ timing */

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_cpu_of(const struct rusage *ru)
{
	return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
	       (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e-6;
}

double bench_cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return bench_cpu_of(&ru);
}

double bench_load_average(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double l1 = -1;

	if (f) {
		if (fscanf(f, "%lf", &l1) != 1)
			l1 = -1;
		fclose(f);
	}
	return l1;
}

/* ------------------------------------------------------------------ statistics */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_median(const double *src, int n)
{
	double v[BENCH_MAX_SAMPLES];

	if (n <= 0)
		return 0;
	if (n > BENCH_MAX_SAMPLES)
		n = BENCH_MAX_SAMPLES;
	memcpy(v, src, (size_t)n * sizeof *v);
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_median_ratio(const double *a, int na, const double *b, int nb)
{
	double v[BENCH_MAX_SAMPLES];

	if (na == 0 || nb != na)
		return 0;
	if (na > BENCH_MAX_SAMPLES)
		na = BENCH_MAX_SAMPLES;
	for (int i = 0; i < na; i++)
		v[i] = a[i] / b[i];
	return bench_median(v, na);
}

void bench_min_max(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = n ? v[0] : 0;
	for (int i = 1; i < n; i++) {
		*lo = v[i] < *lo ? v[i] : *lo;
		*hi = v[i] > *hi ? v[i] : *hi;
	}
}

void bench_ratio_min_max(const double *a, int na, const double *b, int nb, double *lo,
                         double *hi)
{
	double v[BENCH_MAX_SAMPLES] = { 0 };

	*lo = *hi = 0;
	if (na == 0 || nb != na)
		return;
	if (na > BENCH_MAX_SAMPLES)
		na = BENCH_MAX_SAMPLES;
	for (int i = 0; i < na; i++)
		v[i] = a[i] / b[i];
	bench_min_max(v, na, lo, hi);
}

double bench_last(const double *v, int n)
{
	return n ? v[n - 1] : 0;
}

void bench_print_row(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 1)
		n = (int)sizeof line - 1;
	while (n > 0 && line[n - 1] == ' ')
		n--;
	printf("%.*s\n", n, line);
}

/* ------------------------------------------------------------------ goals */

int bench_print_goals(const bench_goal *gl, int n, const bench_goal_style *st)
{
	int met = 0;

	printf("\ngoals\n");
	for (int i = 0; i < n; i++) {
		int measured = !st->zero_is_missing || gl[i].value > 0;
		int ok = measured &&
		         (gl[i].at_most ? gl[i].value <= gl[i].bound : gl[i].value >= gl[i].bound);
		char bound[48] = "";

		met += ok;
		if (st->show_bound)
			snprintf(bound, sizeof bound, " (goal %s %g)", gl[i].at_most ? "<=" : ">=",
			         gl[i].bound);
		if (measured)
			printf("  %-*s %*.3f %-*s%s  %s\n", st->text_width, gl[i].text,
			       st->value_width, gl[i].value, st->unit_width, gl[i].unit, bound,
			       ok ? "met" : "MISSED");
		else
			printf("  %-*s %*s %-*s%s  MISSED\n", st->text_width, gl[i].text,
			       st->value_width, "n/a", st->unit_width, "", bound);
	}
	printf("%d of %d goals met\n", met, n);
	return met;
}

/* ------------------------------------------------------------------ memory and data */

void *bench_alloc_prefaulted(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		bench_fatal("cannot map %llu bytes: %s", (unsigned long long)bytes, strerror(errno));
	madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	return p;
}

uint64_t bench_xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* ------------------------------------------------------------------ raw I/O */

double bench_raw_write(const char *path, const void *buf, uint64_t bytes, int direct,
                       int do_fsync)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
	double t0 = bench_now();

	if (fd < 0 && direct && errno == EINVAL)
		return -1;
	if (fd < 0)
		bench_fatal("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < bytes;) {
		uint64_t n = bytes - done < BENCH_IO_BLOCK ? bytes - done : BENCH_IO_BLOCK;
		ssize_t w = write(fd, (const char *)buf + done, n);

		if (w < 0 && direct && errno == EINVAL && done == 0) {
			/* refused at write time (tmpfs) */
			close(fd);
			return -1;
		}
		if (w <= 0)
			bench_fatal("write %s: %s", path, w < 0 ? strerror(errno) : "nothing written");
		done += (uint64_t)w;
	}
	if (do_fsync && fsync(fd) != 0)
		bench_fatal("fsync %s: %s", path, strerror(errno));
	close(fd);
	return bench_now() - t0;
}

double bench_raw_read(const char *path, void *buf, uint64_t bytes, int direct)
{
	int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	double t0 = bench_now();

	if (fd < 0)
		bench_fatal("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < bytes;) {
		uint64_t n = bytes - done < BENCH_IO_BLOCK ? bytes - done : BENCH_IO_BLOCK;
		ssize_t r = read(fd, (char *)buf + done, n);

		if (r <= 0)
			bench_fatal("read %s: %s", path, r < 0 ? strerror(errno) : "short file");
		done += (uint64_t)r;
	}
	close(fd);
	return bench_now() - t0;
}

typedef struct {
	int fd;
	unsigned char *buf;
	uint64_t off, len;
	atomic_uint_least64_t next;
} range_read;

static void *range_reader(void *arg)
{
	range_read *rr = arg;

	for (;;) {
		uint64_t at = atomic_fetch_add(&rr->next, BENCH_IO_BLOCK);
		if (at >= rr->len)
			return NULL;
		uint64_t n = rr->len - at < BENCH_IO_BLOCK ? rr->len - at : BENCH_IO_BLOCK;
		if (pread(rr->fd, rr->buf + at, (size_t)n, (off_t)(rr->off + at)) != (ssize_t)n)
			bench_fatal("O_DIRECT read of %llu bytes at %llu: %s", (unsigned long long)n,
			            (unsigned long long)(rr->off + at), strerror(errno));
	}
}

double bench_raw_read_range(const char *path, void *buf, uint64_t off, uint64_t len, int threads,
                            int cold, int direct)
{
	uint64_t lo = off / 4096 * 4096, hi = (off + len + 4095) / 4096 * 4096;
	pthread_t th[64];
	double t0;
	int fd;

	if (cold)
		bench_drop_caches();
	t0 = bench_now();
	if (direct && (fd = open(path, O_RDONLY | O_DIRECT)) >= 0) {
		range_read rr = { fd, buf, lo, hi - lo, 0 };
		if (threads < 1)
			threads = 1;
		if (threads > 64)
			threads = 64;
		for (int k = 0; k < threads; k++)
			if (pthread_create(&th[k], NULL, range_reader, &rr))
				bench_fatal("cannot start a thread");
		for (int k = 0; k < threads; k++)
			pthread_join(th[k], NULL);
		close(fd);
		return bench_now() - t0;
	}
	/* Buffered, or where O_DIRECT is refused (tmpfs). */
	if ((fd = open(path, O_RDONLY)) < 0)
		bench_fatal("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < len;) {
		uint64_t n = len - done < BENCH_IO_BLOCK ? len - done : BENCH_IO_BLOCK;
		ssize_t r = pread(fd, (char *)buf + done, (size_t)n, (off_t)(off + done));
		if (r <= 0)
			bench_fatal("read %s: %s", path, r < 0 ? strerror(errno) : "short file");
		done += (uint64_t)r;
	}
	close(fd);
	return bench_now() - t0;
}

int bench_drop_caches(void)
{
	int fd, ok;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return -1;
	ok = write(fd, "3\n", 2) == 2;
	close(fd);
	return ok ? 0 : -1;
}

void bench_syncfs(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);

	if (fd >= 0) {
		syncfs(fd);
		close(fd);
	}
}

/* ------------------------------------------------------------------ disk and memory */

int bench_free_space(const char *dir, uint64_t *avail)
{
	struct statvfs vfs;

	if (statvfs(dir, &vfs) != 0)
		return -1;
	*avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	return 0;
}

uint64_t bench_space_needed(uint64_t copies, uint64_t bytes)
{
	return copies * (bytes + bytes / 20) + 512 * BENCH_MIB;
}

uint64_t bench_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

uint64_t bench_file_bytes(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		bench_fatal("stat %s: %s", path, strerror(errno));
	return (uint64_t)st.st_size;
}

void bench_ckpt_path(char *out, size_t cap, const char *root, int64_t step)
{
	snprintf(out, cap, "%s/ckpt-%lld", root, (long long)step);
}
