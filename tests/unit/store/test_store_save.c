/*
 * tests/unit/store/test_store_save.c - dvar_save and dvar_restore: what each
 * kind of variable saves (TF's saveables: the primary of a mirrored
 * variable, the SUM / MEAN / replica-0 aggregate of a sync-on-read one),
 * the attributes recorded, every value written once by one worker, TF's
 * save/restore tables for two replicas case by case, restore
 * into other replica counts and other kinds (the exact integer SUM split),
 * plain tensors, and the failures: unsaveable scopes, ON_READ NONE, lists
 * that differ between workers, missing names, shape mismatches, and a write
 * that fails on one worker only.
 *
 * The same program runs alone and under `mpirun -np 2` and `-np 3`: every
 * expectation is computed from R, W and the worker id, every rank runs the
 * same tests in the same order, and value checks count mismatches on each
 * worker and sum the counts over all workers before asserting, so that an
 * assert fails on every rank or on none.
 *
 * With arguments it is one half of a save/restore across worker counts:
 * `--save DIR R` saves under this W and checks what was written;
 * `--restore-all --replicas R1,R2 DIR:WS:RS ...` restores what saves with
 * WS workers of RS replicas wrote, into this W with each R, and checks
 * every component.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "store_tu.h"

/* ---------------------------------------------------------------- elements */

static int is_float(int dtype)
{
	return dtype == DVAR_FLOAT32 || dtype == DVAR_FLOAT64 || dtype == DVAR_FLOAT16 ||
	       dtype == DVAR_BFLOAT16;
}

/* ---------------------------------------------------------------- the variables */

enum { P_DEFAULT, P_SEVEN, P_BIG, P_NEG, P_WIDE };

typedef struct {
	char name[64];
	int dtype;
	dvar_shape shape;
	int sync, agg;
	int pattern;
	size_t count;
	dvar_variable *v;
} tvar;

/* Every dvar_dtype (the first five first, as the list began). */
static const int dtypes[] = {
	DVAR_FLOAT32, DVAR_FLOAT64, DVAR_INT32,  DVAR_INT64,  DVAR_FLOAT16, DVAR_BFLOAT16, DVAR_INT8,
	DVAR_INT16,   DVAR_UINT8,   DVAR_UINT16, DVAR_UINT32, DVAR_UINT64,  DVAR_BOOL,
};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])
static const char *const agg_names[] = { "NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA" };
#define MAX_VARS 128

static void set_var(tvar *t, const char *name, int dtype, int rank, const int64_t *dims, int sync,
                    int agg, int pattern)
{
	uint64_t count;

	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->dtype = dtype;
	assert_int_equal(dvar_shape_init(&t->shape, rank, dims), DVAR_OK);
	assert_int_equal(dvar_shape_num_elements(&t->shape, &count), DVAR_OK);
	t->count = (size_t)count;
	t->sync = sync;
	t->agg = agg;
	t->pattern = pattern;
}

/*
 * Every dtype x (mirrored with each aggregation, sync-on-read SUM, MEAN,
 * ONLY_FIRST_REPLICA), MEAN for floats only (TF refuses it for the others),
 * sync-on-read SUM for numbers only (a bool cannot be summed), in sizes 1 (a
 * scalar), 7 and 1023; an int32 scalar SUM whose replicas hold 7, 0, 0, ...;
 * negative int32 / int64 SUMs and int64 / uint64 SUMs above 2^50, whose
 * sums leave every remainder over the restore's N; a SUM of shape [4, 0];
 * with big, a 4 MiB float32 SUM.
 */
static size_t make_list(tvar *list, int big)
{
	static const int64_t d7[] = { 7 }, d1023[] = { 3, 341 }, dbig[] = { 1024, 1024 };
	size_t n = 0, k = 0;

	for (size_t d = 0; d < NUM_DTYPES; d++) {
		for (int sync = DVAR_SYNC_ON_WRITE; sync <= DVAR_SYNC_ON_READ; sync++) {
			for (int agg = DVAR_AGG_NONE; agg <= DVAR_AGG_ONLY_FIRST_REPLICA; agg++) {
				char name[64];
				int size = (int)(k++ % 3);

				if (sync == DVAR_SYNC_ON_READ && agg == DVAR_AGG_NONE)
					continue;
				if (agg == DVAR_AGG_MEAN && !is_float(dtypes[d]))
					continue;
				if (sync == DVAR_SYNC_ON_READ && agg == DVAR_AGG_SUM &&
				    dtypes[d] == DVAR_BOOL)
					continue;
				snprintf(name, sizeof name, "%s/%s_%s", dvar_dtype_name(dtypes[d]),
				         sync == DVAR_SYNC_ON_READ ? "on_read" : "mirrored", agg_names[agg]);
				set_var(&list[n++], name, dtypes[d], size == 0 ? 0 : 1 + (size == 2),
				        size == 1 ? d7 : d1023, sync, agg, P_DEFAULT);
			}
		}
	}
	set_var(&list[n++], "seven", DVAR_INT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, P_SEVEN);
	set_var(&list[n++], "empty", DVAR_FLOAT32, 2, (const int64_t[]){ 4, 0 }, DVAR_SYNC_ON_READ,
	        DVAR_AGG_SUM, P_DEFAULT);
	set_var(&list[n++], "negative/int32", DVAR_INT32, 1, d7, DVAR_SYNC_ON_READ, DVAR_AGG_SUM,
	        P_NEG);
	set_var(&list[n++], "negative/int64", DVAR_INT64, 1, d7, DVAR_SYNC_ON_READ, DVAR_AGG_SUM,
	        P_NEG);
	set_var(&list[n++], "wide/int64", DVAR_INT64, 1, d7, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, P_WIDE);
	set_var(&list[n++], "wide/uint64", DVAR_UINT64, 1, d7, DVAR_SYNC_ON_READ, DVAR_AGG_SUM,
	        P_WIDE);
	assert_true(n + (size_t)big <= MAX_VARS);
	if (big)
		set_var(&list[n++], "big", DVAR_FLOAT32, 2, dbig, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, P_BIG);
	return n;
}

/* What replica r holds at element i (mirrored: every replica). */
static double value_at(const tvar *t, int r, size_t i)
{
	switch (t->pattern) {
	case P_SEVEN: return r == 0 ? 7 : 0;
	case P_BIG: return (double)(i % 11) + r;
	/* Replica 0 differs by element, so that the sums over any N leave
	 * every remainder (3 + 4 + 5 over 3 replicas would leave none). */
	case P_NEG: return r == 0 ? -1 - (double)(i % 7) : -3.0 * r;
	/* 2^50 + ...: sums over up to 4 replicas stay exact in a double. */
	case P_WIDE: return 1125899906842624.0 + (r == 0 ? 1 + (double)(i % 7) : r);
	default:
		if (t->dtype == DVAR_BOOL) /* true and false, differing between replicas */
			return t->sync == DVAR_SYNC_ON_WRITE ? i % 3 == 0 : (i + (size_t)r) % 2 == 0;
		if (t->sync == DVAR_SYNC_ON_WRITE)
			return 2 + (double)(i % 5);
		/* Scalars: replicas 3, 4, 5, ... (TF's [3., 4.] for two). */
		return 3 + r + (double)(i % 7);
	}
}

/* The value a save of t over N replicas records, as a double. */
static double saved_at(const tvar *t, int N, size_t i)
{
	double sum = 0;

	if (t->sync == DVAR_SYNC_ON_WRITE || t->agg == DVAR_AGG_ONLY_FIRST_REPLICA)
		return value_at(t, 0, i);
	for (int r = 0; r < N; r++)
		sum += value_at(t, r, i);
	return t->agg == DVAR_AGG_MEAN ? sum / N : sum;
}

static size_t nbytes_of(const tvar *t)
{
	return t->count * dvar_dtype_size(t->dtype);
}

/* The saved value, in the dtype. */
static void *saved_buffer(const tvar *t, int N)
{
	void *buf = malloc(nbytes_of(t) + 1);

	assert_non_null(buf);
	for (size_t i = 0; i < t->count; i++)
		tu_put(t->dtype, buf, i, saved_at(t, N, i));
	return buf;
}

static void create_vars(dvar_strategy *s, tvar *list, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;

		spec.name = list[k].name;
		spec.dtype = list[k].dtype;
		spec.shape = list[k].shape;
		spec.synchronization = list[k].sync;
		spec.aggregation = list[k].agg;
		assert_int_equal(dvar_variable_create(&list[k].v, s, &spec), DVAR_OK);
	}
}

static void free_vars(tvar *list, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		dvar_variable_free(list[k].v);
		list[k].v = NULL;
	}
}

struct fill_job {
	tvar *list;
	size_t n;
	int rc[64];
};

/* ON_READ: each replica assigns its own component (replica context). */
static int fill_replica(dvar_replica *ctx, void *arg)
{
	struct fill_job *j = arg;
	int r = dvar_replica_id(ctx);
	int rc = DVAR_OK;

	for (size_t k = 0; k < j->n && rc == DVAR_OK; k++) {
		tvar *t = &j->list[k];
		unsigned char *buf;

		if (t->sync != DVAR_SYNC_ON_READ)
			continue;
		if (!(buf = malloc(nbytes_of(t) + 1)))
			return DVAR_ENOMEM;
		for (size_t i = 0; i < t->count; i++)
			tu_put(t->dtype, buf, i, value_at(t, r, i));
		rc = dvar_variable_assign(t->v, ctx, buf);
		free(buf);
	}
	j->rc[dvar_replica_local_id(ctx)] = rc;
	return rc;
}

/* Give every variable its test values. */
static void fill_vars(dvar_strategy *s, tvar *list, size_t n)
{
	struct fill_job j = { list, n, { 0 } };

	for (size_t k = 0; k < n; k++) {
		void *buf;

		if (list[k].sync != DVAR_SYNC_ON_WRITE)
			continue;
		buf = saved_buffer(&list[k], 1);
		assert_int_equal(dvar_variable_assign(list[k].v, NULL, buf), DVAR_OK);
		free(buf);
	}
	assert_int_equal(dvar_strategy_run(s, fill_replica, &j), DVAR_OK);
}

static dvar_write_options test_write_options(void)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;

	o.flags = DVAR_WRITE_NO_FSYNC;
	o.compress = DVAR_COMPRESS_NONE;
	o.threads = 1;
	o.chunk_size = 1u << 20;
	return o;
}

/* Plain tensors saved with the variables. */
static int64_t plain_step = 42;
static double plain_table[3] = { 1.5, -2.25, 3.5 };

static void plain_tensors(dvar_store_tensor *t, int64_t *step, double *table)
{
	memset(t, 0, 2 * sizeof *t);
	t[0].name = "step";
	t[0].dtype = DVAR_INT64;
	t[0].data = step;
	t[1].name = "table";
	t[1].dtype = DVAR_FLOAT64;
	t[1].shape.rank = 1;
	t[1].shape.dims[0] = 3;
	t[1].data = table;
}

static int save_list(dvar_strategy *s, const char *root, int64_t step, tvar *list, size_t n,
                     int with_plain)
{
	dvar_variable *vars[MAX_VARS];
	dvar_write_options wo = test_write_options();
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_store_tensor plain[2];

	for (size_t k = 0; k < n; k++)
		vars[k] = list[k].v;
	so.write = &wo;
	if (with_plain) {
		plain_tensors(plain, &plain_step, plain_table);
		so.tensors = plain;
		so.num_tensors = 2;
	}
	return dvar_save(s, root, step, vars, n, &so);
}

/* ---------------------------------------------------------------- reading back */

static const char *kind_of(const tvar *t)
{
	return t->sync == DVAR_SYNC_ON_READ ? "sync_on_read" : "mirrored";
}

static int attr_is(dvar_reader *r, size_t i, const char *key, const char *want)
{
	const char *value = NULL;

	if (dvar_reader_var_attr(r, i, key, &value) != DVAR_OK || strcmp(value, want) != 0) {
		print_error("attribute %s of #%zu is '%s', expected '%s'\n", key, i,
		            value ? value : "(none)", want);
		return 0;
	}
	return 1;
}

/* Mismatches between a buffer and the expected one, the first few printed. */
static int compare(const char *what, int dtype, const void *got, const void *want, size_t count)
{
	size_t es = dvar_dtype_size(dtype);
	int bad = 0;

	for (size_t i = 0; i < count; i++) {
		if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0)
			continue;
		if (bad++ < 3)
			print_error("%s[%zu] = %.17g, expected %.17g\n", what, i, tu_get(dtype, got, i),
			            tu_get(dtype, want, i));
	}
	return bad;
}

/* nbytes in chunks of test_write_options' chunk size, each padded to 4 KiB. */
static uint64_t padded_size(uint64_t nbytes)
{
	const uint64_t chunk = test_write_options().chunk_size, align = 4096;
	uint64_t full = nbytes / chunk, rest = nbytes % chunk;

	return full * ((chunk + align - 1) / align * align) + (rest + align - 1) / align * align;
}

static int data_files(const char *dir, int W, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	*bytes = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char want[64];
		struct stat st;
		char *p;

		if (strncmp(e->d_name, "data-", 5) != 0)
			continue;
		found++;
		for (int w = 0; w < W; w++) {
			snprintf(want, sizeof want, "data-%05d-of-%05d", w, W);
			if (strcmp(e->d_name, want) == 0)
				found += 1000;
		}
		p = tu_path(dir, e->d_name);
		if (stat(p, &st) == 0)
			*bytes += (uint64_t)st.st_size;
		free(p);
	}
	closedir(d);
	return found;
}

/*
 * Read the checkpoint at path back and count what differs from a save of
 * list (and the plain tensors) by N replicas over W workers.
 */
static int check_checkpoint(const char *path, const tvar *list, size_t n, int N, int W)
{
	dvar_reader *r = NULL;
	uint64_t unique = 0, chunks = 0, stored = 0, files = 0, padded = 0;
	int bad = 0;

	if (dvar_reader_open(&r, path, NULL) != DVAR_OK) {
		print_error("open %s: %s\n", path, dvar_error_last()->message);
		return 1;
	}
	if (dvar_reader_num_vars(r) != n + 2) {
		print_error("%zu variables, expected %zu\n", dvar_reader_num_vars(r), n + 2);
		bad++;
	}
	for (size_t k = 0; k < n; k++) {
		const tvar *t = &list[k];
		dvar_var_info info;
		size_t i;
		void *got, *want;

		if (dvar_reader_find(r, t->name, &i) != DVAR_OK ||
		    dvar_reader_var(r, i, &info) != DVAR_OK) {
			print_error("'%s' is missing\n", t->name);
			bad++;
			continue;
		}
		/* One entry, written once: one slice, the whole variable. */
		if (info.dtype != t->dtype || !dvar_shape_equal(&info.shape, &t->shape) ||
		    info.num_slices != 1 || info.raw_bytes != nbytes_of(t)) {
			print_error("'%s': dtype %d, %zu slices, %llu bytes\n", t->name, info.dtype,
			            info.num_slices, (unsigned long long)info.raw_bytes);
			bad++;
		}
		unique += nbytes_of(t);
		padded += padded_size(nbytes_of(t));
		stored += info.stored_bytes;
		chunks += info.num_chunks;
		bad += !attr_is(r, i, DVAR_STORE_ATTR_KIND, kind_of(t));
		bad += !attr_is(r, i, DVAR_STORE_ATTR_SYNCHRONIZATION,
		                t->sync == DVAR_SYNC_ON_READ ? "ON_READ" : "ON_WRITE");
		bad += !attr_is(r, i, DVAR_STORE_ATTR_AGGREGATION, agg_names[t->agg]);
		got = malloc(nbytes_of(t) + 1);
		want = saved_buffer(t, N);
		if (dvar_reader_read(r, i, NULL, got, nbytes_of(t)) != DVAR_OK) {
			print_error("read '%s': %s\n", t->name, dvar_error_last()->message);
			bad++;
		} else {
			bad += compare(t->name, t->dtype, got, want, t->count);
		}
		free(got);
		free(want);
	}
	/* The plain tensors: the chief's values, kind plain. */
	{
		int64_t step = 0;
		double table[3] = { 0 };
		size_t i;

		if (dvar_reader_find(r, "step", &i) != DVAR_OK ||
		    dvar_reader_read(r, i, NULL, &step, sizeof step) != DVAR_OK || step != plain_step ||
		    !attr_is(r, i, DVAR_STORE_ATTR_KIND, "plain"))
			bad++;
		if (dvar_reader_find(r, "table", &i) != DVAR_OK ||
		    dvar_reader_read(r, i, NULL, table, sizeof table) != DVAR_OK ||
		    memcmp(table, plain_table, sizeof table) != 0)
			bad++;
		for (int k = 0; k < 2; k++) {
			dvar_var_info info;

			if (dvar_reader_find(r, k ? "table" : "step", &i) == DVAR_OK &&
			    dvar_reader_var(r, i, &info) == DVAR_OK) {
				stored += info.stored_bytes;
				chunks += info.num_chunks;
			}
		}
		unique += sizeof step + sizeof table;
		padded += padded_size(sizeof step) + padded_size(sizeof table);
	}
	/* W data files, each value in exactly one of them: what they hold is
	 * the unique bytes plus alignment padding, at most each chunk rounded up
	 * to 4 KiB (so at most 1.001 x unique + 4 KiB per chunk); a value
	 * written twice would exceed it. */
	if (data_files(dvar_reader_path(r), W, &files) != 1001 * W) {
		print_error("the checkpoint does not hold exactly %d data files\n", W);
		bad++;
	}
	if (files < unique || files > padded || stored < unique || stored > padded ||
	    (double)files > 1.001 * (double)unique + 4096.0 * (double)chunks) {
		print_error("data files hold %llu bytes (stored %llu) for %llu unique bytes, "
		            "%llu with each chunk padded\n",
		            (unsigned long long)files, (unsigned long long)stored,
		            (unsigned long long)unique, (unsigned long long)padded);
		bad++;
	}
	dvar_reader_free(r);
	return bad;
}

/* ---------------------------------------------------------------- restore expectations */

/* What replica g of N receives when a value saved as s is restored into t. */
static double restored_at(const tvar *t, double s, int g, int N)
{
	double q;

	if (t->sync != DVAR_SYNC_ON_READ || t->agg != DVAR_AGG_SUM)
		return s;
	if (is_float(t->dtype))
		return s / N;
	/* The exact split: floor division, the remainder one each to the first. */
	q = (s - (double)(((int64_t)s % N + N) % N)) / N;
	return q + (g < (((int64_t)s % N + N) % N));
}

/*
 * Count the components of every variable in targets that differ from a
 * restore of a save of saved (N_saved replicas). targets[k] has saved[k]'s
 * name, dtype and shape, and any kind. Integer SUM targets must also read
 * back the saved value exactly.
 */
static int check_restored(const stu_topo *t, const tvar *saved, const tvar *targets, size_t n,
                          int N_saved)
{
	int bad = 0;

	for (size_t k = 0; k < n; k++) {
		const tvar *tv = &targets[k];
		void *sbuf = saved_buffer(&saved[k], N_saved);
		void *want = malloc(nbytes_of(tv) + 1);
		void *got = malloc(nbytes_of(tv) + 1);
		char what[160];

		for (int l = 0; l < t->R; l++) {
			int g = t->worker * t->R + l;

			for (size_t i = 0; i < tv->count; i++)
				tu_put(tv->dtype, want, i, restored_at(tv, tu_get(tv->dtype, sbuf, i), g, t->N));
			if (dvar_variable_read_local(tv->v, l, got, nbytes_of(tv)) != DVAR_OK) {
				bad++;
				continue;
			}
			snprintf(what, sizeof what, "%.64s (replica %d of %d)", tv->name, g, t->N);
			bad += compare(what, tv->dtype, got, want, tv->count);
		}
		if (tv->sync == DVAR_SYNC_ON_READ && tv->agg == DVAR_AGG_SUM && !is_float(tv->dtype)) {
			/* Collective: every worker reads every such variable. */
			if (dvar_variable_read(tv->v, NULL, got, nbytes_of(tv)) != DVAR_OK)
				bad++;
			else
				bad += compare(tv->name, tv->dtype, got, sbuf, tv->count);
		}
		free(sbuf);
		free(want);
		free(got);
	}
	return bad;
}

/* A target of another kind: mirrored becomes sync-on-read SUM (a bool,
 * which cannot be split, ONLY_FIRST_REPLICA), and back. */
static void swap_kind(tvar *t)
{
	if (t->sync == DVAR_SYNC_ON_WRITE) {
		t->sync = DVAR_SYNC_ON_READ;
		t->agg = t->dtype == DVAR_BOOL ? DVAR_AGG_ONLY_FIRST_REPLICA : DVAR_AGG_SUM;
	} else {
		t->sync = DVAR_SYNC_ON_WRITE;
		t->agg = DVAR_AGG_NONE;
	}
}

static int restore_list(dvar_strategy *s, const char *path, tvar *list, size_t n,
                        dvar_store_tensor *tensors, size_t nt)
{
	dvar_variable *vars[MAX_VARS];
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;

	for (size_t k = 0; k < n; k++)
		vars[k] = list[k].v;
	ro.tensors = tensors;
	ro.num_tensors = nt;
	return dvar_restore(s, path, vars, n, &ro);
}

/*
 * Restore the checkpoint at root (saved from list by N_saved replicas) into
 * a new strategy of R replicas per worker, once into the same kinds and
 * once into swapped kinds, with the plain tensors into plain buffers and
 * into a sync-on-read SUM variable. Returns the mismatches over all workers.
 */
static int64_t restore_into(const char *root, const tvar *list, size_t n, int N_saved, int R)
{
	tvar targets[MAX_VARS];
	int64_t bad = 0;
	stu_topo t;

	if (stu_topo_open(&t, R) != DVAR_OK)
		return 1;
	for (int swapped = 0; swapped < 2; swapped++) {
		int64_t step = 0;
		double table[3] = { 0 };
		dvar_store_tensor plain[2];
		tvar from_plain[2];
		int rc;

		memcpy(targets, list, n * sizeof *targets);
		for (size_t k = 0; swapped && k < n; k++)
			swap_kind(&targets[k]);
		create_vars(t.s, targets, n);
		plain_tensors(plain, &step, table);
		rc = restore_list(t.s, root, targets, n, plain, 2);
		if (rc != DVAR_OK) {
			print_error("restore: %s\n", dvar_error_last()->message);
			bad++;
		} else {
			bad += check_restored(&t, list, targets, n, N_saved);
			bad += step != plain_step || memcmp(table, plain_table, sizeof table) != 0;
		}
		free_vars(targets, n);

		/* A plain value restored into a variable, and a SUM aggregate
		 * restored into a plain tensor (TF: 7.0 for SUM). */
		set_var(&from_plain[0], "table", DVAR_FLOAT64, 1, (int64_t[]){ 3 }, DVAR_SYNC_ON_READ,
		        DVAR_AGG_SUM, P_DEFAULT);
		create_vars(t.s, from_plain, 1);
		rc = restore_list(t.s, root, from_plain, 1, NULL, 0);
		for (int l = 0; rc == DVAR_OK && l < t.R; l++) {
			double got[3];

			rc = dvar_variable_read_local(from_plain[0].v, l, got, sizeof got);
			for (int i = 0; rc == DVAR_OK && i < 3; i++)
				bad += got[i] != plain_table[i] / t.N;
		}
		bad += rc != DVAR_OK;
		free_vars(from_plain, 1);
		{
			const tvar *seven = NULL;
			int32_t total = 0;
			dvar_store_tensor x = { .name = "seven", .dtype = DVAR_INT32, .data = &total };

			for (size_t k = 0; k < n; k++)
				if (strcmp(list[k].name, "seven") == 0)
					seven = &list[k];
			rc = restore_list(t.s, root, NULL, 0, &x, 1);
			bad += !seven || rc != DVAR_OK || total != (int32_t)saved_at(seven, N_saved, 0);
		}
	}
	bad = stu_sum_over_workers(t.s, bad);
	dvar_strategy_free(t.s);
	return bad;
}

/* ---------------------------------------------------------------- saving */

/*
 * Save the full list with R replicas per worker into a fresh root, check
 * what was written, then restore it into other replica counts.
 */
static void save_and_restore(int R, int big)
{
	tvar list[MAX_VARS];
	size_t n = make_list(list, big);
	char *root;
	int64_t bad;
	stu_topo t;
	int N_saved;

	assert_int_equal(stu_topo_open(&t, R), DVAR_OK);
	N_saved = t.N;
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, n);
	fill_vars(t.s, list, n);
	assert_int_equal(save_list(t.s, root, 1, list, n, 1), DVAR_OK);
	bad = stu_sum_over_workers(t.s, check_checkpoint(root, list, n, t.N, t.W));
	assert_int_equal(bad, 0);

	/* TF's table (reference 1.3) for two replicas: [3, 4] saves 7, 3.5, 3. */
	if (t.N == 2) {
		for (size_t k = 0; k < n; k++) {
			if (strcmp(list[k].name, "float32/on_read_SUM") == 0 && list[k].count == 1)
				assert_true(saved_at(&list[k], 2, 0) == 7.0);
			if (strcmp(list[k].name, "float32/on_read_MEAN") == 0 && list[k].count == 1)
				assert_true(saved_at(&list[k], 2, 0) == 3.5);
		}
	}
	free_vars(list, n);
	dvar_strategy_free(t.s);

	/* Other replica counts: 7 over N' with 7 % N' != 0 must read back 7. */
	for (int r = 1; r <= 3; r++) {
		if (r == R)
			continue;
		/* Each strategy is freed before the next one exists. */
		bad = restore_into(root, list, n, N_saved, r);
		assert_int_equal(bad, 0);
	}
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_store__save_restore_r1(void **state)
{
	(void)state;
	save_and_restore(1, 1);
}

static void test_store__save_restore_r2(void **state)
{
	(void)state;
	save_and_restore(2, 1);
}

/* R = 3 runs alone only, to keep the MPI runs short on two cores. */
static void test_store__save_restore_r3(void **state)
{
	stu_topo t;
	int W;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	W = t.W;
	dvar_strategy_free(t.s);
	if (W == 1)
		save_and_restore(3, 0);
}

/* The plan spreads the bytes: with W equal variables every worker writes one. */
static void test_store__balanced(void **state)
{
	tvar list[8];
	char *root, *dir;
	dvar_reader *r = NULL;
	uint64_t files;
	stu_topo t;
	size_t n;
	int64_t bad = 0;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	n = (size_t)t.W;
	for (size_t k = 0; k < n; k++) {
		char name[32];

		snprintf(name, sizeof name, "w%zu", k);
		set_var(&list[k], name, DVAR_FLOAT32, 1, (int64_t[]){ 65536 }, DVAR_SYNC_ON_WRITE,
		        DVAR_AGG_NONE, P_DEFAULT);
	}
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, n);
	fill_vars(t.s, list, n);
	assert_int_equal(save_list(t.s, root, 3, list, n, 0), DVAR_OK);
	dir = tu_path(root, "ckpt-3");
	/* Each data file holds one variable: 256 KiB. */
	for (int w = 0; w < t.W; w++) {
		char name[64];
		struct stat st;
		char *p;

		snprintf(name, sizeof name, "data-%05d-of-%05d", w, t.W);
		p = tu_path(dir, name);
		bad += stat(p, &st) != 0 || st.st_size != 65536 * 4;
		free(p);
	}
	bad += data_files(dir, t.W, &files) != 1001 * t.W;
	bad += dvar_reader_open(&r, root, NULL) != DVAR_OK;
	dvar_reader_free(r);
	free(dir);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	free_vars(list, n);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- TF's tables */

/*
 * Reference 1.2 and 1.4 for two replicas, case by case: what replicas 0 and
 * 1 hold, what is saved, and what each replica of the target holds after
 * the restore. sync 0 is a plain tensor. Integer SUMs are split exactly
 * where TF truncates (7 over 2: TF 3 + 3, dvar 4 + 3).
 */
typedef struct {
	int dtype;
	int from_sync, from_agg;
	double replicas[2];
	double saved;
	int to_sync, to_agg;
	double restored[2];
} tf_case;

#define ON_W DVAR_SYNC_ON_WRITE
#define ON_R DVAR_SYNC_ON_READ
#define F32 DVAR_FLOAT32

static const tf_case tf_cases[] = {
	/* values_test: SUM [3, 4] saves 7 and restores [3.5, 3.5]; SUM [1.5, 2]. */
	{ F32, ON_R, DVAR_AGG_SUM, { 3, 4 }, 7, ON_R, DVAR_AGG_SUM, { 3.5, 3.5 } },
	{ F32, ON_R, DVAR_AGG_SUM, { 1.5, 2 }, 3.5, ON_R, DVAR_AGG_SUM, { 1.75, 1.75 } },
	{ F32, ON_R, DVAR_AGG_MEAN, { 3, 4 }, 3.5, ON_R, DVAR_AGG_MEAN, { 3.5, 3.5 } },
	{ F32, ON_R, DVAR_AGG_ONLY_FIRST_REPLICA, { 3, 4 }, 3, ON_R, DVAR_AGG_ONLY_FIRST_REPLICA,
	  { 3, 3 } },
	/* Sync-on-read into a plain variable: the aggregate. */
	{ F32, ON_R, DVAR_AGG_SUM, { 1.5, 2 }, 3.5, 0, 0, { 3.5 } },
	{ F32, ON_R, DVAR_AGG_MEAN, { 3, 4 }, 3.5, 0, 0, { 3.5 } },
	/* A plain value into sync-on-read: SUM divides, MEAN does not. */
	{ F32, 0, 0, { 3.5 }, 3.5, ON_R, DVAR_AGG_SUM, { 1.75, 1.75 } },
	{ F32, 0, 0, { 2 }, 2, ON_R, DVAR_AGG_SUM, { 1, 1 } },
	{ F32, 0, 0, { 3.5 }, 3.5, ON_R, DVAR_AGG_MEAN, { 3.5, 3.5 } },
	/* vars_test testSaveAndRestoreOnWrite, every aggregation; and plain. */
	{ F32, ON_W, DVAR_AGG_NONE, { 2 }, 2, ON_W, DVAR_AGG_NONE, { 2, 2 } },
	{ F32, ON_W, DVAR_AGG_SUM, { 2 }, 2, ON_W, DVAR_AGG_SUM, { 2, 2 } },
	{ F32, ON_W, DVAR_AGG_MEAN, { 2 }, 2, ON_W, DVAR_AGG_MEAN, { 2, 2 } },
	{ F32, ON_W, DVAR_AGG_ONLY_FIRST_REPLICA, { 2 }, 2, ON_W, DVAR_AGG_ONLY_FIRST_REPLICA,
	  { 2, 2 } },
	{ F32, ON_W, DVAR_AGG_SUM, { 2 }, 2, 0, 0, { 2 } },
	{ F32, 0, 0, { 3 }, 3, ON_W, DVAR_AGG_MEAN, { 3, 3 } },
	/* Integers: the exact split. */
	{ DVAR_INT32, ON_R, DVAR_AGG_SUM, { 3, 4 }, 7, ON_R, DVAR_AGG_SUM, { 4, 3 } },
	{ DVAR_INT32, 0, 0, { -7 }, -7, ON_R, DVAR_AGG_SUM, { -3, -4 } },
	{ DVAR_INT32, 0, 0, { 1 }, 1, ON_R, DVAR_AGG_SUM, { 1, 0 } },
	/* 2^52 + 1 (TF: 2^51 + 2^51, one lost). */
	{ DVAR_INT64, 0, 0, { 4503599627370497.0 }, 4503599627370497.0, ON_R, DVAR_AGG_SUM,
	  { 2251799813685249.0, 2251799813685248.0 } },
};

struct scalar_job {
	dvar_variable *v;
	const tf_case *c;
	int rc[2];
};

static int scalar_replica(dvar_replica *ctx, void *arg)
{
	struct scalar_job *j = arg;
	int64_t buf = 0;

	tu_put(j->c->dtype, &buf, 0, j->c->replicas[dvar_replica_id(ctx)]);
	return j->rc[dvar_replica_local_id(ctx)] = dvar_variable_assign(j->v, ctx, &buf);
}

static dvar_variable *scalar_var(dvar_strategy *s, const char *name, int dtype, int sync, int agg)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_variable *v = NULL;

	spec.name = name;
	spec.dtype = dtype;
	spec.synchronization = sync;
	spec.aggregation = agg;
	assert_int_equal(dvar_variable_create(&v, s, &spec), DVAR_OK);
	return v;
}

static void test_store__tf_tables(void **state)
{
	dvar_write_options wo = test_write_options();
	char *root;
	stu_topo t;
	int W;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	W = t.W;
	dvar_strategy_free(t.s);
	/* The cases need two replicas in all (W = 1 x R = 2, or W = 2 x R = 1): not with 3 workers. */
	if (W > 2)
		skip();
	assert_int_equal(stu_topo_open(&t, 2 / W), DVAR_OK);
	root = stu_shared_dir(t.s);
	for (size_t k = 0; k < sizeof tf_cases / sizeof tf_cases[0]; k++) {
		const tf_case *c = &tf_cases[k];
		dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
		dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
		dvar_store_tensor plain = { .name = "v", .dtype = c->dtype };
		dvar_variable *from = NULL, *to = NULL;
		int64_t value = 0, want = 0, got = 0;
		dvar_reader *r = NULL;
		char dir[32];
		size_t i;
		int bad = 0;

		/* Save. */
		so.write = &wo;
		if (c->from_sync) {
			from = scalar_var(t.s, "v", c->dtype, c->from_sync, c->from_agg);
			if (c->from_sync == ON_R) {
				struct scalar_job j = { from, c, { 0 } };

				assert_int_equal(dvar_strategy_run(t.s, scalar_replica, &j), DVAR_OK);
			} else {
				tu_put(c->dtype, &value, 0, c->replicas[0]);
				assert_int_equal(dvar_variable_assign(from, NULL, &value), DVAR_OK);
			}
		} else {
			tu_put(c->dtype, &value, 0, c->replicas[0]);
			plain.data = &value;
			so.tensors = &plain;
			so.num_tensors = 1;
		}
		assert_int_equal(dvar_save(t.s, root, (int64_t)k, from ? &from : NULL, from ? 1 : 0, &so),
		                 DVAR_OK);
		dvar_variable_free(from);
		snprintf(dir, sizeof dir, "ckpt-%zu", k);

		/* What was saved. */
		tu_put(c->dtype, &want, 0, c->saved);
		bad += dvar_reader_open(&r, root, NULL) != DVAR_OK ||
		       strcmp(strrchr(dvar_reader_path(r), '/') + 1, dir) != 0 ||
		       dvar_reader_find(r, "v", &i) != DVAR_OK ||
		       dvar_reader_read(r, i, NULL, &got, dvar_dtype_size(c->dtype)) != DVAR_OK ||
		       got != want;
		dvar_reader_free(r);

		/* What each replica of the target gets. */
		value = 0;
		if (c->to_sync) {
			to = scalar_var(t.s, "v", c->dtype, c->to_sync, c->to_agg);
			assert_int_equal(dvar_restore(t.s, root, &to, 1, NULL), DVAR_OK);
			for (int l = 0; l < t.R; l++) {
				tu_put(c->dtype, &want, 0, c->restored[t.worker * t.R + l]);
				got = 0;
				bad += dvar_variable_read_local(to, l, &got, sizeof got) != DVAR_OK ||
				       got != want;
			}
			dvar_variable_free(to);
		} else {
			plain.data = &value;
			ro.tensors = &plain;
			ro.num_tensors = 1;
			assert_int_equal(dvar_restore(t.s, root, NULL, 0, &ro), DVAR_OK);
			tu_put(c->dtype, &want, 0, c->restored[0]);
			bad += value != want;
		}
		if (bad)
			print_error("case %zu failed on worker %d\n", k, t.worker);
		assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	}
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- errors */

static void test_store__unsaveable(void **state)
{
	tvar list[2];
	char *root;
	stu_topo t;
	float one = 1.0f;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	set_var(&list[0], "m", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, P_DEFAULT);
	set_var(&list[1], "acc", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, P_DEFAULT);
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, 2);
	fill_vars(t.s, list, 2);

	/* A scope that assigned: refused, nothing written. */
	assert_int_equal(dvar_strategy_function_begin(t.s, "train_step"), DVAR_OK);
	assert_int_equal(dvar_variable_assign(list[0].v, NULL, &one), DVAR_OK);
	assert_int_equal(save_list(t.s, root, 5, list, 2, 0), DVAR_EINVAL);
	tu_assert_error_contains("Unable to save function train_step for the following reason(s):");
	tu_assert_error_contains("f_with_input_signature");
	assert_int_equal(dvar_strategy_function_end(t.s), DVAR_OK);
	stu_sum_over_workers(t.s, 0);
	assert_false(stu_exists_in(root, "ckpt-5"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-5"), 0);
	assert_false(stu_exists_in(root, "checkpoint"));

	/* A scope that did nothing unsaveable: saving works, and saving (which
	 * reads the SUM aggregate) does not mark it, so it works twice. */
	assert_int_equal(dvar_strategy_function_begin(t.s, "eval_step"), DVAR_OK);
	assert_int_equal(save_list(t.s, root, 6, list, 2, 0), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(t.s), DVAR_OK);
	assert_int_equal(save_list(t.s, root, 7, list, 2, 0), DVAR_OK);
	/* Restoring marks nothing either (TF's restore ops do not). */
	{
		dvar_variable *vars[2] = { list[0].v, list[1].v };

		assert_int_equal(dvar_restore(t.s, root, vars, 2, NULL), DVAR_OK);
	}
	assert_int_equal(dvar_strategy_check_saveable(t.s), DVAR_OK);
	assert_int_equal(dvar_strategy_function_end(t.s), DVAR_OK);
	{
		char latest[64];

		stu_latest_of(root, latest, sizeof latest);
		assert_string_equal(latest, "ckpt-7");
	}
	/* The same step again: the checkpoint exists, on every worker. */
	assert_int_equal(save_list(t.s, root, 7, list, 2, 0), DVAR_EEXISTS);
	stu_sum_over_workers(t.s, 0);
	assert_int_equal(stu_count_prefix(root, ".ckpt-7"), 0);
	free_vars(list, 2);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_store__on_read_none(void **state)
{
	tvar list[2];
	char *root;
	stu_topo t;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	set_var(&list[0], "fine", DVAR_FLOAT32, 1, (int64_t[]){ 4 }, DVAR_SYNC_ON_WRITE,
	        DVAR_AGG_NONE, P_DEFAULT);
	set_var(&list[1], "metric", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_NONE,
	        P_DEFAULT);
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, 2);
	assert_int_equal(save_list(t.s, root, 1, list, 2, 0), DVAR_EINVAL);
	tu_assert_error_contains("'metric'");
	tu_assert_error_contains("Could not convert from `tf.VariableAggregation` "
	                         "VariableAggregation.NONE to`tf.distribute.ReduceOp` type");
	stu_sum_over_workers(t.s, 0);
	assert_false(stu_exists_in(root, "ckpt-1"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-1"), 0);

	/* Restoring into ON_READ NONE works: the value as it is, everywhere. */
	assert_int_equal(save_list(t.s, root, 2, list, 1, 0), DVAR_OK);
	{
		tvar target;
		float got[4];
		int bad = 0;

		set_var(&target, "fine", DVAR_FLOAT32, 1, (int64_t[]){ 4 }, DVAR_SYNC_ON_READ,
		        DVAR_AGG_NONE, P_DEFAULT);
		create_vars(t.s, &target, 1);
		assert_int_equal(restore_list(t.s, root, &target, 1, NULL, 0), DVAR_OK);
		for (int l = 0; l < t.R; l++) {
			assert_int_equal(dvar_variable_read_local(target.v, l, got, sizeof got), DVAR_OK);
			for (int i = 0; i < 4; i++)
				bad += got[i] != 0.0f; /* never assigned: zeros were saved */
		}
		assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
		free_vars(&target, 1);
	}
	free_vars(list, 2);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* Workers passing different lists: refused on every worker. */
static void test_store__different_lists(void **state)
{
	tvar list[2];
	dvar_variable *vars[2];
	char *root;
	stu_topo t;
	int rc;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	set_var(&list[0], "a", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, P_DEFAULT);
	set_var(&list[1], "b", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, P_DEFAULT);
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, 2);
	vars[0] = list[0].v;
	vars[1] = list[1].v;
	/* The last worker leaves out b (alone, there is no one to differ from). */
	rc = dvar_save(t.s, root, 1, vars, t.worker == t.W - 1 && t.W > 1 ? 1 : 2, NULL);
	if (t.W > 1) {
		assert_int_equal(rc, DVAR_EINVAL);
		tu_assert_error_contains("the workers save different lists");
		stu_sum_over_workers(t.s, 0);
		assert_false(stu_exists_in(root, "ckpt-1"));
	} else {
		assert_int_equal(rc, DVAR_OK);
	}
	/* The same name twice. */
	vars[1] = list[0].v;
	assert_int_equal(dvar_save(t.s, root, 2, vars, 2, NULL), DVAR_EINVAL);
	tu_assert_error_contains("'a' is given twice");
	free_vars(list, 2);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_store__restore_errors(void **state)
{
	tvar list[2], targets[3];
	char *root;
	stu_topo t;
	int64_t bad = 0;
	int rc;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	set_var(&list[0], "x", DVAR_INT32, 1, (int64_t[]){ 7 }, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE,
	        P_DEFAULT);
	set_var(&list[1], "y", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_MEAN, P_DEFAULT);
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, 2);
	fill_vars(t.s, list, 2);
	assert_int_equal(save_list(t.s, root, 1, list, 2, 0), DVAR_OK);
	free_vars(list, 2);

	/* A name the checkpoint lacks, on the last worker only: every worker
	 * fails, and nothing changes anywhere (x stays zero). */
	set_var(&targets[0], "x", DVAR_INT32, 1, (int64_t[]){ 7 }, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE,
	        P_DEFAULT);
	set_var(&targets[1], "absent", DVAR_INT32, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE,
	        P_DEFAULT);
	set_var(&targets[2], "y", DVAR_FLOAT32, 1, (int64_t[]){ 2 }, DVAR_SYNC_ON_READ, DVAR_AGG_SUM,
	        P_DEFAULT);
	create_vars(t.s, targets, 3);
	rc = restore_list(t.s, root, targets, t.worker == t.W - 1 ? 2 : 1, NULL, 0);
	assert_int_equal(rc, DVAR_ENOTFOUND);
	tu_assert_error_contains("'absent' is not in checkpoint");
	tu_assert_error_contains("ckpt-1");
	if (t.W > 1) {
		char want[32];

		snprintf(want, sizeof want, "worker %d:", t.W - 1);
		tu_assert_error_contains(want);
	}
	for (int l = 0; l < t.R; l++) {
		int32_t got[7];

		assert_int_equal(dvar_variable_read_local(targets[0].v, l, got, sizeof got), DVAR_OK);
		for (int i = 0; i < 7; i++)
			bad += got[i] != 0;
	}
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);

	/* A shape that differs: both shapes in the message. */
	{
		dvar_variable *vars[1] = { targets[2].v };

		assert_int_equal(dvar_restore(t.s, root, vars, 1, NULL), DVAR_ESHAPE);
		tu_assert_error_contains("holds float32 []");
		tu_assert_error_contains("the variable is float32 [2]");
	}
	/* No checkpoint at all. */
	{
		char *nowhere = tu_path(root, "nowhere");
		dvar_variable *vars[1] = { targets[0].v };

		assert_int_equal(dvar_restore(t.s, nowhere, vars, 1, NULL), DVAR_ENOTFOUND);
		free(nowhere);
	}
	/* A specific checkpoint directory works as well as the root. */
	{
		char *dir = tu_path(root, "ckpt-1");
		dvar_variable *vars[1] = { targets[0].v };
		int32_t got[7];

		assert_int_equal(dvar_restore(t.s, dir, vars, 1, NULL), DVAR_OK);
		assert_int_equal(dvar_variable_read_local(targets[0].v, t.R - 1, got, sizeof got),
		                 DVAR_OK);
		assert_int_equal(got[6], 2 + 6 % 5);
		free(dir);
	}
	free_vars(targets, 3);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* Save plain tensors t[0..n) alone; the result and message of the call. */
static int save_tensors(dvar_strategy *s, const char *root, int64_t step,
                        const dvar_store_tensor *t, size_t n)
{
	dvar_write_options wo = test_write_options();
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	so.write = &wo;
	so.tensors = t;
	so.num_tensors = n;
	return dvar_save(s, root, step, NULL, 0, &so);
}

/* Bad arguments fail on every worker with a message saying which, and
 * nothing is written. */
static void test_store__bad_arguments(void **state)
{
	int64_t value = 5;
	dvar_store_tensor x = { .name = "x", .dtype = DVAR_INT64, .data = &value };
	dvar_store_tensor bad;
	dvar_strategy *other;
	dvar_strategy_options o1 = DVAR_STRATEGY_OPTIONS_INIT;
	tvar list[1];
	char *root;
	stu_topo t;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	root = stu_shared_dir(t.s);

	bad = x;
	bad.name = "";
	assert_int_equal(save_tensors(t.s, root, 1, &bad, 1), DVAR_EINVAL);
	tu_assert_error_contains("tensor #0: a name of 1 to 1024 bytes is needed");
	bad = x;
	bad.dtype = 99;
	assert_int_equal(save_tensors(t.s, root, 1, &bad, 1), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'x': unknown dtype 99");
	bad = x;
	bad.shape.rank = 1;
	bad.shape.dims[0] = -3;
	assert_int_equal(save_tensors(t.s, root, 1, &bad, 1), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'x'");
	/* The chief's data is what is written: its NULL fails every worker. */
	bad = x;
	bad.data = NULL;
	assert_int_equal(save_tensors(t.s, root, 1, &bad, 1), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'x': data is NULL");
	stu_sum_over_workers(t.s, 0);
	assert_false(stu_exists_in(root, "ckpt-1"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-1"), 0);
	assert_false(stu_exists_in(root, "checkpoint"));

	/* A variable of another strategy. */
	o1.workers = 1;
	assert_int_equal(dvar_strategy_create(&other, &o1), DVAR_OK);
	set_var(&list[0], "w", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, P_DEFAULT);
	create_vars(other, list, 1);
	assert_int_equal(save_list(t.s, root, 1, list, 1, 0), DVAR_EINVAL);
	tu_assert_error_contains("variable 'w' belongs to another strategy");
	assert_int_equal(restore_list(t.s, root, list, 1, NULL, 0), DVAR_EINVAL);
	tu_assert_error_contains("variable 'w' belongs to another strategy");
	free_vars(list, 1);
	dvar_strategy_free(other);

	/* Restore: a tensor without a destination, after a good save. */
	assert_int_equal(save_tensors(t.s, root, 2, &x, 1), DVAR_OK);
	bad = x;
	bad.data = NULL;
	value = 0;
	assert_int_equal(restore_list(t.s, root, NULL, 0, &bad, 1), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'x': data is NULL");
	assert_int_equal(restore_list(t.s, root, NULL, 0, &x, 1), DVAR_OK);
	assert_int_equal(value, 5);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/*
 * A save of step 2 that failed after its commit's rename, before the
 * pointer file (a crash there, say), left ckpt-2 under the root, unlisted.
 * Saving step 2 again replaces it on every worker count: the chief drops
 * it under the root's lock, and the other workers' parts, which may open
 * before that, do not refuse it. A listed step is still refused.
 */
static void test_store__unlisted_step(void **state)
{
	int64_t value = 5;
	dvar_store_tensor x = { .name = "x", .dtype = DVAR_INT64, .data = &value };
	char *root, latest[64];
	stu_topo t;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	assert_int_equal(save_tensors(t.s, root, 1, &x, 1), DVAR_OK);
	if (dvar_strategy_worker_id(t.s) == 0) {
		/* A committed checkpoint of step 2 that the pointer file does not name. */
		int64_t stale = 99;
		dvar_shape scalar = { 0, { 0 } };
		dvar_writer *w;
		char *dir = tu_path(root, "ckpt-2");
		assert_int_equal(dvar_writer_open(&w, dir, NULL), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, "x", DVAR_INT64, &scalar, NULL, &stale), DVAR_OK);
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);
		free(dir);
	}
	stu_sum_over_workers(t.s, 0);
	value = 7;
	assert_int_equal(save_tensors(t.s, root, 2, &x, 1), DVAR_OK);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-2");
	value = 0;
	assert_int_equal(restore_list(t.s, root, NULL, 0, &x, 1), DVAR_OK);
	assert_int_equal(value, 7);
	assert_int_equal(stu_count_prefix(root, ".ckpt-2"), 0);
	/* Published now: the same step again is refused everywhere. */
	assert_int_equal(save_tensors(t.s, root, 2, &x, 1), DVAR_EEXISTS);
	tu_assert_error_contains("already exists");
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/*
 * The last worker cannot write its data file (a file size limit: writes
 * fail with EFBIG, as on a full disk). Every worker gets the error naming
 * it; no checkpoint is committed; the previous one stays the latest; the
 * staging directory is gone.
 */
static void test_store__one_worker_fails(void **state)
{
	tvar list[8];
	char *root;
	char latest[64];
	stu_fsize limit;
	stu_topo t;
	size_t n;
	int rc, failing;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	failing = t.W - 1;
	n = (size_t)t.W;
	for (size_t k = 0; k < n; k++) {
		char name[32];

		snprintf(name, sizeof name, "v%zu", k);
		set_var(&list[k], name, DVAR_FLOAT32, 1, (int64_t[]){ 262144 }, k % 2 ? DVAR_SYNC_ON_READ
		                                                                    : DVAR_SYNC_ON_WRITE,
		        DVAR_AGG_SUM, P_DEFAULT);
	}
	root = stu_shared_dir(t.s);
	create_vars(t.s, list, n);
	fill_vars(t.s, list, n);
	assert_int_equal(save_list(t.s, root, 1, list, n, 0), DVAR_OK);

	stu_fsize_limit(&limit, t.worker == failing, 65536);
	rc = save_list(t.s, root, 2, list, n, 0);
	stu_fsize_restore(&limit);
	assert_int_not_equal(rc, DVAR_OK);
	tu_assert_error_contains("saving step 2");
	if (t.W > 1) {
		char want[32];

		snprintf(want, sizeof want, "worker %d:", failing);
		tu_assert_error_contains(want);
	}
	assert_false(stu_exists_in(root, "ckpt-2"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-2"), 0);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-1");

	/* The next save works. */
	assert_int_equal(save_list(t.s, root, 3, list, n, 0), DVAR_OK);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-3");
	free_vars(list, n);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- across worker counts */

/*
 * Integer SUMs whose saved value leaves a remainder over N: without them a
 * restore into N replicas would not exercise the exact split. Returns the
 * dtypes (int32, int64) the list lacks such an element for.
 */
static int missing_remainders(const tvar *list, size_t n, int N_saved, int N)
{
	static const int ints[] = { DVAR_INT32, DVAR_INT64 };
	int missing = 0;

	for (size_t d = 0; N > 1 && d < 2; d++) {
		int found = 0;

		for (size_t k = 0; k < n && !found; k++) {
			if (list[k].dtype != ints[d] || list[k].sync != DVAR_SYNC_ON_READ ||
			    list[k].agg != DVAR_AGG_SUM)
				continue;
			for (size_t i = 0; i < list[k].count && !found; i++)
				found = (int64_t)saved_at(&list[k], N_saved, i) % N != 0;
		}
		if (!found) {
			print_error("no %s SUM leaves a remainder over %d replicas\n",
			            dvar_dtype_name(ints[d]), N);
			missing++;
		}
	}
	return missing;
}

/*
 * `--save DIR R`: save the list under this W x R into DIR (replaced) and
 * check what was written: every value once, in W data files holding the
 * unique bytes plus at most the alignment of each chunk.
 */
static int main_save(const char *dir, int R)
{
	tvar list[MAX_VARS];
	size_t n = make_list(list, 1);
	int64_t bad;
	stu_topo t;
	int rc;

	if (stu_topo_open(&t, R) != DVAR_OK)
		return 1;
	if (t.worker == 0)
		tu_rmtree(dir);
	stu_sum_over_workers(t.s, 0);
	create_vars(t.s, list, n);
	fill_vars(t.s, list, n);
	rc = save_list(t.s, dir, 1, list, n, 1);
	if (rc != DVAR_OK)
		fprintf(stderr, "save: %s\n", dvar_error_last()->message);
	bad = stu_sum_over_workers(t.s, rc == DVAR_OK ? check_checkpoint(dir, list, n, t.N, t.W) : 1);
	if (t.worker == 0 && rc == DVAR_OK) {
		char *ckpt = tu_path(dir, "ckpt-1");
		uint64_t files = 0, unique = sizeof plain_step + sizeof plain_table;

		for (size_t k = 0; k < n; k++)
			unique += nbytes_of(&list[k]);
		data_files(ckpt, t.W, &files);
		printf("saved W=%d R=%d: %zu variables; %d data files hold %llu bytes for %llu unique "
		       "bytes\n", t.W, t.R, n, t.W, (unsigned long long)files,
		       (unsigned long long)unique);
		free(ckpt);
	}
	free_vars(list, n);
	dvar_strategy_free(t.s);
	return rc != DVAR_OK || bad != 0;
}

/*
 * `--restore-all --replicas R1,R2,.. DIR:WS:RS ...`: restore each save (by
 * WS workers x RS replicas) into this W with each R, into the same kinds and
 * into swapped ones, and check every component of every replica.
 */
static int main_restore_all(int argc, char **argv)
{
	tvar list[MAX_VARS];
	size_t n = make_list(list, 1);
	int reps[8], nreps = 0, W, worker;
	int64_t total = 0;
	char *copy, *tok, *save_ptr = NULL;
	stu_topo t;

	if (argc < 5 || strcmp(argv[2], "--replicas") != 0)
		return 2;
	copy = strdup(argv[3]);
	for (tok = strtok_r(copy, ",", &save_ptr); tok && nreps < 8;
	     tok = strtok_r(NULL, ",", &save_ptr))
		reps[nreps++] = atoi(tok);
	free(copy);
	if (stu_topo_open(&t, 1) != DVAR_OK)
		return 1;
	W = t.W;
	worker = t.worker;
	dvar_strategy_free(t.s);
	for (int a = 4; a < argc; a++) {
		char dir[512];
		char *colon;
		int WS, RS;

		/* DIR:WS:RS, the numbers after the last two colons. */
		snprintf(dir, sizeof dir, "%s", argv[a]);
		if (!(colon = strrchr(dir, ':')))
			return 2;
		RS = atoi(colon + 1);
		*colon = '\0';
		if (!(colon = strrchr(dir, ':')))
			return 2;
		WS = atoi(colon + 1);
		*colon = '\0';
		for (int k = 0; k < nreps; k++) {
			int64_t bad = restore_into(dir, list, n, WS * RS, reps[k]);

			bad += missing_remainders(list, n, WS * RS, W * reps[k]);
			if (worker == 0)
				printf("w%dr%d -> w%dr%d: %s\n", WS, RS, W, reps[k],
				       bad ? "FAILED" : "ok");
			total += bad;
		}
	}
	if (total)
		fprintf(stderr, "%lld mismatches\n", (long long)total);
	return total != 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store__save_restore_r1),
		cmocka_unit_test(test_store__save_restore_r2),
		cmocka_unit_test(test_store__save_restore_r3),
		cmocka_unit_test(test_store__balanced),
		cmocka_unit_test(test_store__tf_tables),
		cmocka_unit_test(test_store__unsaveable),
		cmocka_unit_test(test_store__on_read_none),
		cmocka_unit_test(test_store__different_lists),
		cmocka_unit_test(test_store__restore_errors),
		cmocka_unit_test(test_store__bad_arguments),
		cmocka_unit_test(test_store__unlisted_step),
		cmocka_unit_test(test_store__one_worker_fails),
	};

	if (argc == 4 && strcmp(argv[1], "--save") == 0)
		return main_save(argv[2], atoi(argv[3]));
	if (argc >= 5 && strcmp(argv[1], "--restore-all") == 0)
		return main_restore_all(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
