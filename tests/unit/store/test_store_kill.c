/*
 * tests/unit/store/test_store_kill.c - a worker process killed in the middle
 * of dvar_save: the previous checkpoint stays the latest and reads back
 * exactly, and nothing of the interrupted save is committed.
 *
 * Two halves, driven by kill_during_save.sh:
 *
 * `--save WORK [--timeout-ms MS]`, under `mpirun -np 2`: both workers save
 * step 1 (committed), then start step 2. Worker 1 has lowered its file size
 * limit (RLIMIT_FSIZE) below the bytes the plan gives it to write, and its
 * SIGXFSZ handler sends it SIGKILL: it dies when its data file reaches the
 * limit, in the middle of round 3 of the save, whatever the timing. The
 * plan depends only on the list and W, so step 2 gives it the bytes it
 * wrote in step 1 (the check makes sure that is more than the limit). No
 * hook in the library is involved. If worker 0's save returns (timeout_ms
 * set, and mpirun has not ended it first), it records the result in
 * WORK/survivor and leaves at once.
 *
 * `--check WORK [--survivor]`, alone: worker 1 was armed and never came
 * back from its save; the root's pointer file still names ckpt-1; no
 * ckpt-2 was committed; whatever worker 0 recorded is a failure, and with
 * --survivor it must have recorded DVAR_ECOMM and removed the staging
 * directory; ckpt-1 reads back exactly (dvar_reader, and dvar_restore into
 * W = 1 x R = 2 with the integer SUM split exactly); and saving step 2
 * again into the same root works.
 *
 * With DVAR_KILL_DELTA=1 in the environment both saves are delta saves
 * (DVAR_SAVE_DELTA) and step 2 changes only rows of the large variables:
 * worker 1 dies writing the row patch of big_b, a delta over ckpt-1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "store_tu.h"

/* Delta saves, and a step 2 that changes rows (DVAR_KILL_DELTA). */
static int delta_mode(void)
{
	const char *e = getenv("DVAR_KILL_DELTA");
	return e && strcmp(e, "1") == 0;
}

/* Rows of the large variables a delta step 2 changes: every fifth one,
 * 12 bytes each with its id, over FSIZE_LIMIT for worker 1's big_b. */
#define CHANGED_ROWS (BIG_ELEMS / 5)

/* Worker 1's file size limit in step 2; it writes BIG_ELEMS * 4 bytes. */
#define FSIZE_LIMIT (1u << 20)
#define BIG_ELEMS ((size_t)1 << 20) /* 4 MiB of float32 */
#define NUM_VARS 6

typedef struct {
	const char *name;
	int dtype;
	int sync, agg;
	int64_t count; /* a vector of count elements, or a scalar when 0 */
} kvar;

/* The largest first: big_a goes to worker 0, big_b to worker 1 (the plan). */
static const kvar vars_list[NUM_VARS] = {
	{ "big_a", DVAR_FLOAT32, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, BIG_ELEMS },
	{ "big_b", DVAR_FLOAT32, DVAR_SYNC_ON_WRITE, DVAR_AGG_MEAN, BIG_ELEMS },
	{ "count", DVAR_INT32, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, 0 },
	{ "wide", DVAR_INT64, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, 5 },
	{ "half", DVAR_FLOAT16, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, 7 },
	{ "mean", DVAR_FLOAT64, DVAR_SYNC_ON_READ, DVAR_AGG_MEAN, 3 },
};

static size_t count_of(const kvar *k)
{
	return k->count ? (size_t)k->count : 1;
}

static size_t nbytes_of(const kvar *k)
{
	return count_of(k) * dvar_dtype_size(k->dtype);
}

/* What global replica r of N holds at element i, at save `step`. */
static double value_at(const kvar *k, int64_t step, int r, size_t i)
{
	double s = (double)step;

	switch (k->dtype) {
	case DVAR_FLOAT32: return (double)(i % 4099) * 0.25 + s + (k->agg == DVAR_AGG_MEAN);
	case DVAR_INT32: return 3 + r + 10 * (s - 1); /* step 1: 3 + 4 = 7 */
	case DVAR_INT64: return 1099511627776.0 * (1 + (double)i) + 7 * r - 5 - s; /* 2^40 (i + 1) */
	case DVAR_FLOAT16: return 0.5 * (double)i - 1.5 + s;
	default: return 1.25 * (double)r + (double)i + s;
	}
}

/* The value a save by N replicas records. */
static double saved_at(const kvar *k, int64_t step, int N, size_t i)
{
	double sum = 0;

	if (k->sync == DVAR_SYNC_ON_WRITE)
		return value_at(k, step, 0, i);
	for (int r = 0; r < N; r++)
		sum += value_at(k, step, r, i);
	return k->agg == DVAR_AGG_MEAN ? sum / N : sum;
}

static void *saved_buffer(const kvar *k, int64_t step, int N)
{
	void *buf = malloc(nbytes_of(k));

	assert_non_null(buf);
	for (size_t i = 0; i < count_of(k); i++)
		tu_put(k->dtype, buf, i, saved_at(k, step, N, i));
	return buf;
}

typedef struct {
	stu_topo topo;
	dvar_variable *v[NUM_VARS];
} run;

static int run_open(run *t, int replicas, int timeout_ms)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	int rc;

	memset(t, 0, sizeof *t);
	o.replicas = replicas;
	o.timeout_ms = timeout_ms;
	if ((rc = stu_topo_create(&t->topo, &o)) != DVAR_OK)
		return rc;
	for (int k = 0; k < NUM_VARS; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		const kvar *kv = &vars_list[k];

		spec.name = kv->name;
		spec.dtype = kv->dtype;
		spec.shape.rank = kv->count ? 1 : 0;
		spec.shape.dims[0] = kv->count;
		spec.synchronization = kv->sync;
		spec.aggregation = kv->agg;
		if ((rc = dvar_variable_create(&t->v[k], t->topo.s, &spec)) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

static void run_close(run *t)
{
	for (int k = 0; k < NUM_VARS; k++)
		dvar_variable_free(t->v[k]);
	dvar_strategy_free(t->topo.s);
}

struct fill_job {
	run *t;
	int64_t step;
};

/* Sync-on-read: every replica assigns its own component. */
static int fill_replica(dvar_replica *ctx, void *arg)
{
	struct fill_job *j = arg;
	int r = dvar_replica_id(ctx);
	int rc = DVAR_OK;

	for (int k = 0; k < NUM_VARS && rc == DVAR_OK; k++) {
		const kvar *kv = &vars_list[k];
		unsigned char *buf;

		if (kv->sync != DVAR_SYNC_ON_READ)
			continue;
		if (!(buf = malloc(nbytes_of(kv))))
			return DVAR_ENOMEM;
		for (size_t i = 0; i < count_of(kv); i++)
			tu_put(kv->dtype, buf, i, value_at(kv, j->step, r, i));
		rc = dvar_variable_assign(j->t->v[k], ctx, buf);
		free(buf);
	}
	return rc;
}

/* The values of `step`: mirrored ones from cross-replica context. */
static int fill(run *t, int64_t step)
{
	struct fill_job j = { t, step };
	int rc;

	for (int k = 0; k < NUM_VARS; k++) {
		void *buf;

		if (vars_list[k].sync != DVAR_SYNC_ON_WRITE)
			continue;
		buf = saved_buffer(&vars_list[k], step, 1);
		rc = dvar_variable_assign(t->v[k], NULL, buf);
		free(buf);
		if (rc != DVAR_OK)
			return rc;
	}
	return dvar_strategy_run(t->topo.s, fill_replica, &j);
}

static int save_step(run *t, const char *root, int64_t step)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	wo.compress = DVAR_COMPRESS_NONE; /* the sizes are the plan's bytes */
	wo.chunk_size = 1u << 20;
	wo.threads = 1;
	so.write = &wo;
	so.flags = delta_mode() ? DVAR_SAVE_DELTA : 0;
	return dvar_save(t->topo.s, root, step, t->v, NUM_VARS, &so);
}

/* A delta's step 2: rows of the large variables change (big_b is MEAN: no
 * scatter_update there, an add of 1 to each). */
static int change_rows(run *t)
{
	int64_t *idx = malloc(CHANGED_ROWS * sizeof *idx);
	float *ones = malloc(CHANGED_ROWS * sizeof *ones);
	int rc = idx && ones ? DVAR_OK : DVAR_ENOMEM;

	for (size_t k = 0; rc == DVAR_OK && k < CHANGED_ROWS; k++) {
		idx[k] = (int64_t)(5 * k);
		ones[k] = 1.0f;
	}
	for (int v = 0; v < 2 && rc == DVAR_OK; v++)
		rc = dvar_variable_scatter(t->v[v], NULL, DVAR_SCATTER_ADD, idx, CHANGED_ROWS, ones);
	free(idx);
	free(ones);
	return rc;
}

/* Write text to path whole or not at all (a kill may come at any time). */
static void write_file(const char *path, const char *text)
{
	size_t n = strlen(path) + 8;
	char *tmp = malloc(n);
	FILE *f;

	if (!tmp)
		return;
	snprintf(tmp, n, "%s.tmp", path);
	if ((f = fopen(tmp, "w")) != NULL) {
		fputs(text, f);
		if (fclose(f) == 0)
			rename(tmp, path);
	}
	free(tmp);
}

static void on_sigxfsz(int sig)
{
	(void)sig;
	kill(getpid(), SIGKILL);
}

/* Worker 1 dies at its next write past FSIZE_LIMIT bytes of any file. */
static int arm(void)
{
	struct sigaction sa;
	struct rlimit lim;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigxfsz;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGXFSZ, &sa, NULL) != 0 || getrlimit(RLIMIT_FSIZE, &lim) != 0)
		return -1;
	lim.rlim_cur = FSIZE_LIMIT;
	return setrlimit(RLIMIT_FSIZE, &lim);
}

/* `--save WORK [--timeout-ms MS]`: the half that runs under mpirun -np 2. */
static int main_save(const char *work, int timeout_ms)
{
	char *root = tu_path(work, "root");
	char text[1200];
	run t;
	int rc;

	if ((rc = run_open(&t, 1, timeout_ms)) != DVAR_OK) {
		fprintf(stderr, "setup: %s\n", dvar_error_last()->message);
		return 1;
	}
	if (t.topo.W != 2) {
		fprintf(stderr, "run this half under mpirun -np 2 (W is %d)\n", t.topo.W);
		return 1;
	}
	if ((rc = fill(&t, 1)) != DVAR_OK || (rc = save_step(&t, root, 1)) != DVAR_OK) {
		fprintf(stderr, "worker %d: step 1: %s\n", t.topo.worker, dvar_error_last()->message);
		return 1;
	}
	/* New values, so that a committed step 2 could not pass for step 1. */
	if ((rc = delta_mode() ? change_rows(&t) : fill(&t, 2)) != DVAR_OK) {
		fprintf(stderr, "worker %d: step 2 values: %s\n", t.topo.worker,
		        dvar_error_last()->message);
		return 1;
	}
	if (t.topo.worker == 1) {
		char *armed = tu_path(work, "armed");

		if (arm() != 0) {
			fprintf(stderr, "worker 1: cannot set the file size limit: %s\n", strerror(errno));
			return 1;
		}
		write_file(armed, "1\n"); /* well under the limit */
		free(armed);
	}
	rc = save_step(&t, root, 2);

	/* Worker 1 never gets here. Worker 0 does when its collectives time
	 * out before mpirun ends it. */
	snprintf(text, sizeof text, "worker %d: rc %d (%s): %s\n", t.topo.worker, rc, dvar_strerror(rc),
	         rc ? dvar_error_last()->message : "");
	fputs(text, stderr);
	{
		char *p = tu_path(work, t.topo.worker ? "returned-1" : "survivor");

		write_file(p, text);
		free(p);
	}
	free(root);
	/* Leave at once: the peer is gone, the strategy is broken (a timeout
	 * abandons the buffers of requests in flight, which LeakSanitizer would
	 * report) and the check runs in a process of its own. */
	fflush(NULL);
	_exit(rc == DVAR_OK ? 3 : 0);
}

/* ---------------------------------------------------------------- checking */

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 4096);

	assert_non_null(buf);
	if (f) {
		size_t n = fread(buf, 1, 4095, f);

		buf[n] = '\0';
		fclose(f);
	}
	return buf;
}

/* Every variable of checkpoint `path` equals a save of `step` by N replicas. */
static int check_values(const char *path, int64_t step, int N)
{
	dvar_reader *r = NULL;
	int bad = 0;

	if (dvar_reader_open(&r, path, NULL) != DVAR_OK) {
		print_error("open %s: %s\n", path, dvar_error_last()->message);
		return 1;
	}
	for (int k = 0; k < NUM_VARS; k++) {
		const kvar *kv = &vars_list[k];
		void *want = saved_buffer(kv, step, N);
		void *got = calloc(1, nbytes_of(kv));
		size_t i;

		assert_non_null(got);
		if (dvar_reader_find(r, kv->name, &i) != DVAR_OK ||
		    dvar_reader_read(r, i, NULL, got, nbytes_of(kv)) != DVAR_OK) {
			print_error("%s: %s\n", kv->name, dvar_error_last()->message);
			bad++;
		} else if (memcmp(got, want, nbytes_of(kv)) != 0) {
			print_error("%s differs from step %lld's values\n", kv->name, (long long)step);
			bad++;
		}
		free(got);
		free(want);
	}
	dvar_reader_free(r);
	return bad;
}

/* Restore the root's latest into W = 1 x R = 2 and read every value back. */
static int check_restore(const char *root, int64_t step, int N_saved)
{
	run t;
	int bad = 0;

	assert_int_equal(run_open(&t, 2, 0), DVAR_OK);
	assert_int_equal(t.topo.W, 1);
	if (dvar_restore(t.topo.s, root, t.v, NUM_VARS, NULL) != DVAR_OK) {
		print_error("restore: %s\n", dvar_error_last()->message);
		run_close(&t);
		return 1;
	}
	for (int k = 0; k < NUM_VARS; k++) {
		const kvar *kv = &vars_list[k];
		void *want = saved_buffer(kv, step, N_saved);
		void *got = calloc(1, nbytes_of(kv));

		assert_non_null(got);
		/* The cross-replica read gives the saved value back: exactly for
		 * the int32 7 split 4 + 3 and the int64 SUM; float MEAN as is. */
		if (dvar_variable_read(t.v[k], NULL, got, nbytes_of(kv)) != DVAR_OK ||
		    memcmp(got, want, nbytes_of(kv)) != 0) {
			print_error("'%s' does not read back step %lld's value after the restore\n",
			            kv->name, (long long)step);
			bad++;
		}
		free(got);
		free(want);
	}
	/* The exact split of the int32 SUM: 7 (step 1, N = 2) is 4 + 3. */
	{
		int32_t parts[2] = { 0, 0 };

		assert_int_equal(dvar_variable_read_local(t.v[2], 0, &parts[0], 4), DVAR_OK);
		assert_int_equal(dvar_variable_read_local(t.v[2], 1, &parts[1], 4), DVAR_OK);
		if (step == 1 && N_saved == 2 && (parts[0] != 4 || parts[1] != 3)) {
			print_error("count restored as %d + %d, expected 4 + 3\n", parts[0], parts[1]);
			bad++;
		}
	}
	run_close(&t);
	return bad;
}

/* `--check WORK [--survivor]`: alone, after the killed run. */
static int main_check(const char *work, int survivor)
{
	char *root = tu_path(work, "root");
	char *pointer = tu_path(root, "checkpoint");
	char *ckpt1 = tu_path(root, "ckpt-1");
	char *text;
	int bad = 0, staging;

	/* The run got as far as the kill, and the kill came. */
	if (!stu_exists_in(work, "armed")) {
		fprintf(stderr, "FAIL: worker 1 never armed its file size limit: the run did not "
		                "reach step 2\n");
		return 1;
	}
	if (stu_exists_in(work, "returned-1")) {
		char *p = tu_path(work, "returned-1");

		text = read_text(p);
		fprintf(stderr, "FAIL: worker 1 survived its save: %s", text);
		free(text);
		free(p);
		return 1;
	}
	/* Why the kill is certain: step 1 wrote more than the limit into
	 * worker 1's file, and step 2 gives it the same bytes. */
	{
		char *p = tu_path(ckpt1, "data-00001-of-00002");
		struct stat st;

		if (stat(p, &st) != 0 || st.st_size <= FSIZE_LIMIT) {
			fprintf(stderr, "FAIL: %s is not larger than the limit\n", p);
			bad++;
		}
		free(p);
	}
	printf("root after the kill:");
	stu_list_prefix(root, "", stdout);
	printf("\n");
	staging = stu_list_prefix(root, ".ckpt-2.dvartmp-", stdout);
	printf(" (%d staging directories of step 2)\n", staging);

	/* The pointer file still names step 1; nothing of step 2 is committed. */
	text = read_text(pointer);
	if (!strstr(text, "model_checkpoint_path: \"ckpt-1\"\n") || strstr(text, "ckpt-2")) {
		fprintf(stderr, "FAIL: the pointer file says:\n%s", text);
		bad++;
	}
	free(text);
	if (stu_exists_in(root, "ckpt-2")) {
		fprintf(stderr, "FAIL: ckpt-2 was committed\n");
		bad++;
	}
	/* What worker 0's save returned, if it returned before mpirun ended it:
	 * a failure. With --survivor (timeout_ms, and mpirun told to let the
	 * job go on) it must have returned DVAR_ECOMM and, being the chief,
	 * removed the staging directory. */
	if (stu_exists_in(work, "survivor")) {
		char *p = tu_path(work, "survivor");
		int w = -1, rc = DVAR_OK;

		text = read_text(p);
		printf("worker 0's save returned: %s", text);
		if (sscanf(text, "worker %d: rc %d", &w, &rc) != 2 || w != 0 || rc == DVAR_OK) {
			fprintf(stderr, "FAIL: worker 0's save did not fail\n");
			bad++;
		} else if (survivor && (rc != DVAR_ECOMM || staging != 0)) {
			fprintf(stderr, "FAIL: expected DVAR_ECOMM and no staging directory left\n");
			bad++;
		}
		free(text);
		free(p);
	} else if (survivor) {
		fprintf(stderr, "FAIL: worker 0's save never returned\n");
		bad++;
	} else {
		printf("worker 0 was ended by mpirun before its save returned\n");
	}
	/* Step 1 reads back exactly, by the reader and by a restore. */
	bad += check_values(root, 1, 2);
	bad += check_values(ckpt1, 1, 2);
	bad += check_restore(root, 1, 2);

	/* The root takes the same step again, alone. */
	{
		run t;

		assert_int_equal(run_open(&t, 1, 0), DVAR_OK);
		assert_int_equal(fill(&t, 2), DVAR_OK);
		if (save_step(&t, root, 2) != DVAR_OK) {
			fprintf(stderr, "FAIL: saving step 2 again: %s\n", dvar_error_last()->message);
			bad++;
		}
		run_close(&t);
		bad += check_values(root, 2, 1);
	}
	free(root);
	free(pointer);
	free(ckpt1);
	if (bad)
		fprintf(stderr, "FAIL: %d problems\n", bad);
	else
		printf("ok: ckpt-1 is still the latest and reads back; nothing of step 2 was "
		       "committed; step 2 saves again\n");
	return bad != 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--save") == 0)
		return main_save(argv[2], 0);
	if (argc == 5 && strcmp(argv[1], "--save") == 0 && strcmp(argv[3], "--timeout-ms") == 0)
		return main_save(argv[2], atoi(argv[4]));
	if (argc == 3 && strcmp(argv[1], "--check") == 0)
		return main_check(argv[2], 0);
	if (argc == 4 && strcmp(argv[1], "--check") == 0 && strcmp(argv[3], "--survivor") == 0)
		return main_check(argv[2], 1);
	fprintf(stderr, "usage: %s --save WORK [--timeout-ms MS] | --check WORK [--survivor]\n",
	        argv[0]);
	return 2;
}
