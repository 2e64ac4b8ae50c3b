/*
 * tests/fault/fault_driver.c - every write point of an operation, failed
 * one at a time. Run with the shim preloaded (LD_PRELOAD=libdvar_fault.so,
 * tests/fault/fault.c):
 *
 *   fault_driver OP WORK [--sample N] [--seed S]
 *
 * OP is save (a manager save that retention follows), delta (a delta save
 * over the root's latest), import, reshard, export-dvar, export-safetensors,
 * export-tf or export-npy. The driver counts the file-system calls the
 * operation makes (in a child process, the shim counting), then repeats it
 * in a child for every call k and every fault kind (EIO, ENOSPC, EDQUOT, a
 * short write, a crash), or for N of those pairs drawn at random with
 * --sample. After each it checks, in the parent: the operation failed (or,
 * when the fault came after its commit point, succeeded) and its message
 * names the output; what it wrote is absent or whole (a root's latest
 * checkpoint, and every one it lists, opens and verifies and holds the
 * values; an offline output reads back the source's digests); and the same
 * operation, run again unarmed, succeeds and leaves no temporary file of
 * the dead child behind. Prints the calls, trials and failures per kind.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dvar/dvar.h"

/* The shim's controls, found at run time (a run without it is refused). */
static void (*dvar_fault_arm)(int on, long at, int kind);
static long (*dvar_fault_calls)(void);
static int (*dvar_fault_hit)(const char **what);

enum { FAULT_EIO, FAULT_ENOSPC, FAULT_EDQUOT, FAULT_SHORT, FAULT_CRASH, NKINDS };
static const char *const kind_names[NKINDS] = { "EIO", "ENOSPC", "EDQUOT", "short write", "crash" };

#define ROWS 512
#define COLS 32

static const char *op;
/* Paths stay short (a temporary directory's): messages quote them whole. */
static char work[1024], src[1100], root[1100], out[1100], npy1[1100], npy2[1100];
static int64_t next_step = 3;

static void die(const char *what)
{
	fprintf(stderr, "fault_driver: %s: %s\n", what, dvar_error_last()->message);
	exit(2);
}

static void join(char *dst, const char *a, const char *b)
{
	snprintf(dst, 1100, "%s/%s", a, b);
}

/* The values every checkpoint of this driver holds at step s. */
static void values(float *v, int64_t s)
{
	for (int i = 0; i < ROWS * COLS; i++)
		v[i] = (float)(s * 1000 + i % 997);
}

static int is_save(void)
{
	return strcmp(op, "save") == 0 || strcmp(op, "delta") == 0;
}

/* A strategy (one worker) with the variable "w" holding step s's values. */
static void model(dvar_strategy **s, dvar_variable **v, int64_t step)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	float *x = malloc(ROWS * COLS * sizeof *x);

	so.replicas = 1;
	if (!x || dvar_strategy_create(s, &so) != DVAR_OK)
		die("strategy");
	spec.name = "w";
	spec.dtype = DVAR_FLOAT32;
	spec.shape.rank = 2;
	spec.shape.dims[0] = ROWS;
	spec.shape.dims[1] = COLS;
	if (dvar_variable_create(v, *s, &spec) != DVAR_OK)
		die("variable");
	values(x, step);
	if (dvar_variable_assign(*v, NULL, x) != DVAR_OK)
		die("assign");
	free(x);
}

static int save(dvar_strategy *s, dvar_variable *v, int64_t step, unsigned flags)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options o = DVAR_SAVE_OPTIONS_INIT;

	wo.threads = 1; /* one order of calls from run to run */
	wo.keep_last = 2;
	o.write = &wo;
	o.flags = flags;
	return dvar_save(s, root, step, &v, 1, &o);
}

/* What the runs share: a source checkpoint, .npy files, a root with two
 * checkpoints (the second a delta over the first). */
static void setup(void)
{
	dvar_strategy *s;
	dvar_variable *v;
	float *x = malloc(ROWS * COLS * sizeof *x);
	unsigned char head[256];
	size_t hl;
	dvar_shape sh = { .rank = 2, .dims = { ROWS, COLS } };

	join(src, work, "src");
	join(root, work, "root");
	join(npy1, work, "a.npy");
	join(npy2, work, "b.npy");
	values(x, 7);
	dvar_writer *w;
	dvar_slice top = { .rank = 2, .start = { 0, 0 }, .length = { ROWS / 2, COLS } };
	dvar_slice bottom = { .rank = 2, .start = { ROWS / 2, 0 }, .length = { ROWS / 2, COLS } };
	if (dvar_writer_open(&w, src, NULL) != DVAR_OK ||
	    dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, &top, x) != DVAR_OK ||
	    dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, &bottom, x + ROWS / 2 * COLS) != DVAR_OK ||
	    dvar_writer_set_attr(w, "w", "kind", "sharded") != DVAR_OK ||
	    dvar_writer_add(w, "b", DVAR_FLOAT32, &(dvar_shape){ .rank = 1, .dims = { 9 } }, NULL, x) !=
	            DVAR_OK ||
	    dvar_writer_commit(w) != DVAR_OK)
		die("source");
	dvar_writer_free(w);
	for (int f = 0; f < 2; f++) {
		FILE *fp = fopen(f ? npy2 : npy1, "wb");
		if (!fp || dvar_npy_header(head, sizeof head, &hl, DVAR_FLOAT32, &sh) != DVAR_OK)
			die("npy");
		fwrite(head, 1, hl, fp);
		fwrite(x, sizeof *x, ROWS * COLS, fp);
		fclose(fp);
	}
	model(&s, &v, 1);
	if (save(s, v, 1, DVAR_SAVE_DELTA) != DVAR_OK)
		die("ckpt-1");
	values(x, 2);
	if (dvar_variable_assign(v, NULL, x) != DVAR_OK || save(s, v, 2, DVAR_SAVE_DELTA) != DVAR_OK)
		die("ckpt-2");
	dvar_variable_free(v);
	dvar_strategy_free(s);
	free(x);
}

/* The state of a save operation's job, made before the shim is armed. */
typedef struct {
	dvar_strategy *s;
	dvar_variable *v;
} job;

/* A job resumed from the root's latest (the base of its delta), with one
 * row changed: the values of step next_step. */
static void prepare(job *j)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	int64_t row = 5;
	float r[COLS];

	if (!is_save())
		return;
	model(&j->s, &j->v, 0);
	if (dvar_restore(j->s, root, &j->v, 1, &ro) != DVAR_OK)
		die("restore");
	for (int c = 0; c < COLS; c++)
		r[c] = (float)(next_step * 1000 + (row * COLS + c) % 997);
	if (dvar_variable_scatter(j->v, NULL, DVAR_SCATTER_UPDATE, &row, 1, r) != DVAR_OK)
		die("scatter");
}

/* The operation: into root at next_step, or into out. */
static int act(job *j)
{
	if (is_save())
		return save(j->s, j->v, next_step, strcmp(op, "delta") == 0 ? DVAR_SAVE_DELTA : 0);
	if (strcmp(op, "import") == 0) {
		dvar_import_source in[2] = { { npy1, "a" }, { npy2, "b" } };
		dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
		o.threads = 1;
		return dvar_import(out, in, 2, &o);
	}
	if (strcmp(op, "reshard") == 0) {
		dvar_reshard_options o = DVAR_RESHARD_OPTIONS_INIT;
		o.shards = 3;
		o.threads = 1;
		return dvar_reshard(src, out, &o);
	}
	dvar_export_options o = DVAR_EXPORT_OPTIONS_INIT;
	o.threads = 1;
	o.flags = DVAR_EXPORT_KEEP_SHARDS * 0;
	o.format = strcmp(op, "export-safetensors") == 0 ? DVAR_EXPORT_SAFETENSORS :
	           strcmp(op, "export-tf") == 0 ? DVAR_EXPORT_TF :
	           strcmp(op, "export-npy") == 0 ? DVAR_EXPORT_NPY : DVAR_EXPORT_DVAR;
	return dvar_export(src, out, &o);
}

/* What a child reports: the call count, or the status and message. */
typedef struct {
	long calls;
	int rc, hit;
	char message[512];
	char what[64];
} report;

/* Run the operation in a child with the shim armed at call `at` (0:
 * counting) for kind; *crashed when it ended in the injected crash. */
static report trial(long at, int kind, int *crashed)
{
	report r = { 0 };
	int fds[2], status;
	pid_t pid;

	if (pipe(fds) != 0)
		die("pipe");
	if ((pid = fork()) == 0) {
		job j = { 0 };
		const char *what = "";
		close(fds[0]);
		prepare(&j);
		dvar_fault_arm(1, at, kind);
		r.rc = act(&j);
		r.calls = dvar_fault_calls();
		r.hit = dvar_fault_hit(&what);
		dvar_fault_arm(0, 0, 0);
		snprintf(r.what, sizeof r.what, "%s", what);
		snprintf(r.message, sizeof r.message, "%s", r.rc ? dvar_error_last()->message : "");
		if (write(fds[1], &r, sizeof r) != (ssize_t)sizeof r)
			_exit(3);
		_exit(0); /* no cleanup: a test of what is left behind */
	}
	close(fds[1]);
	*crashed = 0;
	if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r)
		*crashed = 1;
	close(fds[0]);
	waitpid(pid, &status, 0);
	if (*crashed && !(WIFEXITED(status) && WEXITSTATUS(status) == 77)) {
		fprintf(stderr, "fault_driver: the child died unexpectedly (status %d)\n", status);
		exit(2);
	}
	return r;
}

/* Each variable of path holds the values the operation put there: the
 * source's variable of the same name (import: a and b hold w's). */
static int same_as_source(const char *path)
{
	dvar_reader *a, *b;
	int same = 1;
	if (dvar_reader_open(&a, src, NULL) != DVAR_OK)
		die("source");
	if (dvar_reader_open(&b, path, NULL) != DVAR_OK) {
		dvar_reader_free(a);
		return 0;
	}
	int import = strcmp(op, "import") == 0;
	for (size_t i = 0; i < dvar_reader_num_vars(import ? b : a) && same; i++) {
		dvar_var_info info;
		size_t k;
		uint32_t ca, cb;
		dvar_reader_var(import ? b : a, i, &info);
		if (import)
			same = dvar_reader_find(a, "w", &k) == DVAR_OK &&
			       dvar_reader_digest(a, k, &ca) == DVAR_OK &&
			       dvar_reader_digest(b, i, &cb) == DVAR_OK && ca == cb;
		else
			same = dvar_reader_find(b, info.name, &k) == DVAR_OK &&
			       dvar_reader_digest(a, i, &ca) == DVAR_OK &&
			       dvar_reader_digest(b, k, &cb) == DVAR_OK && ca == cb;
	}
	same = same && (!import || dvar_reader_num_vars(b) == 2);
	dvar_reader_free(a);
	dvar_reader_free(b);
	return same;
}

/* Names in dir that hold marker; 0 when none. */
static int count_named(const char *dir, const char *marker)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += strstr(e->d_name, marker) != NULL;
	closedir(d);
	return n;
}

/* What a trial left: nothing, or the output whole. 0 when fine. */
static int check_output(const report *r, int crashed, long at, int kind)
{
	char what[256];
	int bad = 0;
	snprintf(what, sizeof what, "%s, %s at call %ld (%s)", op, kind_names[kind], at,
	         crashed ? "crash" : r->what);
	/* A failure names where: the output, or the file the failing call was on. */
	if (!crashed && r->hit && r->rc != DVAR_OK && !strchr(r->message, '/')) {
		printf("  %s: the message names no path: %s\n", what, r->message);
		bad++;
	}
	if (!crashed && r->hit && r->rc == DVAR_OK)
		printf("  (%s: succeeded: a call it can do without, or one after its commit point)\n", what);
	if (is_save()) {
		dvar_reader *rd;
		uint64_t nbad = 0;
		if (dvar_reader_open(&rd, root, NULL) != DVAR_OK) {
			printf("  %s: the root's latest does not open: %s\n", what,
			       dvar_error_last()->message);
			return bad + 1;
		}
		if (dvar_reader_verify(rd, NULL, NULL, &nbad) != DVAR_OK || nbad) {
			printf("  %s: the root's latest does not verify\n", what);
			bad++;
		}
		dvar_reader_free(rd);
		/* Every checkpoint the root lists opens: none is half written. */
		dvar_root_list *l;
		if (dvar_root_list_open(&l, root) != DVAR_OK)
			return bad + 1;
		for (size_t i = 0; i < dvar_root_list_count(l); i++) {
			dvar_root_entry e;
			char ck[1200];
			dvar_root_list_get(l, i, &e);
			snprintf(ck, sizeof ck, "%s/%s", root, e.name);
			if (dvar_reader_open(&rd, ck, NULL) != DVAR_OK) {
				printf("  %s: %s is listed but does not open: %s\n", what, e.name,
				       dvar_error_last()->message);
				bad++;
			} else {
				dvar_reader_free(rd);
			}
		}
		dvar_root_list_free(l);
		return bad;
	}
	struct stat st;
	if (stat(out, &st) != 0)
		return bad; /* nothing: fine */
	int whole;
	if (strcmp(op, "export-safetensors") == 0 || strcmp(op, "export-npy") == 0) {
		/* Read back through import into a scratch checkpoint. */
		char back[1100];
		join(back, work, "back");
		dvar_import_source in = { out, NULL };
		dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
		whole = 1;
		if (strcmp(op, "export-npy") == 0) {
			char a[1200];
			snprintf(a, sizeof a, "%s/w.npy", out);
			in.path = a;
			in.name = "w";
			whole = dvar_import(back, &in, 1, &o) == DVAR_OK;
		} else {
			whole = dvar_import(back, &in, 1, &o) == DVAR_OK;
		}
		char cmd[4096];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", back);
		if (system(cmd) != 0)
			die("rm");
	} else {
		whole = same_as_source(out);
	}
	if (!whole) {
		printf("  %s: the output is there but not whole (rc %d: %s)\n", what, r->rc, r->message);
		bad++;
	}
	return bad;
}

/* Clear the output for the next trial, after checking that an unarmed run
 * succeeds and sweeps what the dead child left. */
static int rerun_and_sweep(long at, int kind)
{
	int crashed, bad = 0;
	char cmd[4096], parent[1100];
	report r;

	if (!is_save()) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.index '%s'.data-*", out, out, out);
		if (system(cmd) != 0)
			die("rm");
	} else {
		next_step++; /* the trial's step may have been committed */
	}
	r = trial(-1, 0, &crashed); /* -1: never fails */
	if (crashed || r.rc != DVAR_OK) {
		printf("  %s after %s at call %ld: the next run fails: %s\n", op, kind_names[kind], at,
		       r.message);
		bad++;
	}
	snprintf(parent, sizeof parent, "%s", is_save() ? root : work);
	if (count_named(parent, ".dvartmp-")) {
		printf("  %s after %s at call %ld: temporary files left in %s\n", op, kind_names[kind],
		       at, parent);
		bad++;
	}
	if (is_save())
		next_step++;
	else {
		snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.index '%s'.data-*", out, out, out);
		if (system(cmd) != 0)
			die("rm");
	}
	return bad;
}

int main(int argc, char **argv)
{
	long sample = 0;
	unsigned long seed = 1;
	int crashed, failures = 0, tried[NKINDS] = { 0 };
	report count;

	if (argc < 3) {
		fprintf(stderr, "usage: fault_driver OP WORK [--sample N] [--seed S]\n");
		return 2;
	}
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--sample"))
			sample = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoul(argv[i + 1], NULL, 10);
	}
	dvar_fault_arm = (void (*)(int, long, int))dlsym(RTLD_DEFAULT, "dvar_fault_arm");
	dvar_fault_calls = (long (*)(void))dlsym(RTLD_DEFAULT, "dvar_fault_calls");
	dvar_fault_hit = (int (*)(const char **))dlsym(RTLD_DEFAULT, "dvar_fault_hit");
	if (!dvar_fault_arm || !dvar_fault_calls || !dvar_fault_hit) {
		fprintf(stderr, "fault_driver: run it with LD_PRELOAD=libdvar_fault.so\n");
		return 2;
	}
	op = argv[1];
	snprintf(work, sizeof work, "%s", argv[2]);
	{
		/* A fresh work folder: an earlier run's is removed first. */
		char cmd[1100];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
		if (system(cmd) != 0)
			die("rm");
	}
	mkdir(work, 0777);
	setup();
	join(out, work, strcmp(op, "export-safetensors") == 0 ? "out.safetensors" : "out");
	count = trial(0, 0, &crashed);
	if (crashed || count.rc != DVAR_OK) {
		fprintf(stderr, "fault_driver: %s fails without a fault: %s\n", op, count.message);
		return 2;
	}
	/* The calls vary a little with the step names: a few more are tried. */
	long n = count.calls + 2;
	long total = n * NKINDS;
	failures += rerun_and_sweep(0, 0);
	for (long t = 0; t < (sample ? sample : total); t++) {
		long pick = sample ? (long)((seed = seed * 6364136223846793005ul + 1442695040888963407ul) >> 33) % total : t;
		long at = pick / NKINDS + 1;
		int kind = (int)(pick % NKINDS);
		report r = trial(at, kind, &crashed);
		tried[kind]++;
		failures += check_output(&r, crashed, at, kind);
		failures += rerun_and_sweep(at, kind);
	}
	printf("%s: %ld file-system calls; trials:", op, count.calls);
	for (int k = 0; k < NKINDS; k++)
		printf(" %d %s", tried[k], kind_names[k]);
	printf("; %d failures\n", failures);
	return failures != 0;
}
