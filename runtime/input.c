/*
 * runtime/input.c - distributed input (include/dvar/input.h): array and
 * fixed-record file datasets, and the iterator that gives each local replica
 * its per-replica batch with TensorFlow's rules (docs/INPUT.md):
 *
 *  - legacy rebatch (AUTO/DATA on non-file data, DATA on files): each
 *    global batch of B rows becomes N = R*W sub-batches of ceil(B/N) rows
 *    (the last ones short or empty), and worker w keeps sub-batches
 *    k % W == w (DATA sharding), R of them per step;
 *  - V2 rebatch (OFF, FILE, AUTO on files): the worker's element stream is
 *    cut into outputs of batch_sizes_for_worker(G, W, R, w) rows in turn,
 *    pulling rows across global batches; FILE sharding gives worker w the
 *    files w, w+W, ...;
 *  - REPLICATE: every replica reads everything in batches of batch_size;
 *  - from a function: the worker's own dataset in batches of G/N, handed to
 *    the local replicas in turn.
 *
 * Each worker computes its own outputs; the only cross-worker steps are the
 * agreement at creation and the "any replica has a value" exchange of each
 * step, both through the runtime's coordinator steps (runtime/runtime.h),
 * which do not touch MPI when W = 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "dvar/input.h"
#include "runtime/input_state.h"
#include "runtime/runtime.h"

/* ---------------------------------------------------------------- datasets */

struct dvar_dataset {
	int dtype;
	dvar_shape elem;       /* element shape */
	size_t row_bytes;      /* bytes of one element */
	int64_t rows;          /* elements */
	const unsigned char *data; /* array source; NULL for files */
	size_t n_files;
	char **paths;
	int64_t *file_start;   /* n_files + 1 prefix offsets, in elements */
};

static int elem_bytes(int dtype, const dvar_shape *elem, size_t *out)
{
	uint64_t n;
	int rc;

	if (dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "dataset: unknown dtype %d", dtype);
	if ((rc = dvar_shape_num_bytes(elem, dtype, &n)) != DVAR_OK)
		return rc;
	if (n == 0)
		return dvar_error_set(DVAR_EINVAL, "dataset: elements of zero bytes are not supported");
	if (n > SIZE_MAX / 2)
		return dvar_error_set(DVAR_EINVAL, "dataset: element too large");
	*out = (size_t)n;
	return DVAR_OK;
}

int dvar_dataset_from_array(dvar_dataset **out, int dtype, const dvar_shape *shape,
                            const void *data)
{
	dvar_dataset *ds;
	dvar_shape elem;
	size_t rb = 0;
	int rc;

	if (!out)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_array: out is NULL");
	*out = NULL;
	if (!shape || shape->rank < 1 || shape->rank > DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL,
		                      "dvar_dataset_from_array: the tensor needs rank >= 1 (one row "
		                      "per element)");
	if (dvar_shape_init(&elem, shape->rank - 1, shape->dims + 1) != DVAR_OK || shape->dims[0] < 0)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_array: bad shape");
	if ((rc = elem_bytes(dtype, &elem, &rb)) != DVAR_OK)
		return rc;
	if (shape->dims[0] > 0 && !data)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_array: data is NULL");
	if (shape->dims[0] > 0 && (uint64_t)shape->dims[0] > SIZE_MAX / rb)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_array: tensor too large");
	ds = calloc(1, sizeof *ds);
	if (!ds)
		return dvar_error_set(DVAR_ENOMEM, "dataset: out of memory");
	ds->dtype = dtype;
	ds->elem = elem;
	ds->row_bytes = rb;
	ds->rows = shape->dims[0];
	ds->data = data;
	*out = ds;
	return DVAR_OK;
}

void dvar_dataset_free(dvar_dataset *ds)
{
	if (!ds)
		return;
	for (size_t i = 0; i < ds->n_files; i++)
		free(ds->paths[i]);
	free(ds->paths);
	free(ds->file_start);
	free(ds);
}

int dvar_dataset_from_files(dvar_dataset **out, const char *const *paths, size_t n_paths,
                            int dtype, const dvar_shape *record_shape)
{
	dvar_dataset *ds;
	size_t rb = 0;
	int rc;

	if (!out)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_files: out is NULL");
	*out = NULL;
	if (!paths || n_paths == 0)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_files: no files");
	if (!record_shape || record_shape->rank < 0 || record_shape->rank >= DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_from_files: record_shape must have "
		                      "rank 0..%d", DVAR_MAX_RANK - 1);
	if ((rc = elem_bytes(dtype, record_shape, &rb)) != DVAR_OK)
		return rc;
	ds = calloc(1, sizeof *ds);
	if (!ds)
		return dvar_error_set(DVAR_ENOMEM, "dataset: out of memory");
	ds->dtype = dtype;
	ds->elem = *record_shape;
	ds->row_bytes = rb;
	ds->paths = calloc(n_paths, sizeof *ds->paths);
	ds->file_start = calloc(n_paths + 1, sizeof *ds->file_start);
	if (!ds->paths || !ds->file_start) {
		dvar_dataset_free(ds);
		return dvar_error_set(DVAR_ENOMEM, "dataset: out of memory");
	}
	ds->n_files = n_paths;
	for (size_t i = 0; i < n_paths; i++) {
		struct stat st;

		if (!paths[i] || !(ds->paths[i] = strdup(paths[i]))) {
			dvar_dataset_free(ds);
			return paths[i] ? dvar_error_set(DVAR_ENOMEM, "dataset: out of memory")
			                : dvar_error_set(DVAR_EINVAL, "dataset: path %zu is NULL", i);
		}
		if (stat(paths[i], &st) != 0) {
			int e = errno;

			dvar_dataset_free(ds);
			return dvar_error_set_errno(e == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, e,
			                            "dataset file '%s'", paths[i]);
		}
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size % rb != 0) {
			rc = dvar_error_set(DVAR_EINVAL,
			                    "dataset file '%s' is %" PRIu64
			                    " bytes, not a multiple of the record size %zu",
			                    paths[i], (uint64_t)st.st_size, rb);
			dvar_dataset_free(ds);
			return rc;
		}
		ds->file_start[i + 1] = ds->file_start[i] + (int64_t)((uint64_t)st.st_size / rb);
	}
	ds->rows = ds->file_start[n_paths];
	*out = ds;
	return DVAR_OK;
}

int dvar_dataset_num_elements(const dvar_dataset *ds, int64_t *out)
{
	if (!ds || !out)
		return dvar_error_set(DVAR_EINVAL, "dvar_dataset_num_elements: NULL argument");
	*out = ds->rows;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- input context */

int dvar_input_context_per_replica_batch_size(const dvar_input_context *ctx,
                                              int64_t global_batch_size, int64_t *out)
{
	if (!ctx || !out)
		return dvar_error_set(DVAR_EINVAL, "per_replica_batch_size: NULL argument");
	if (ctx->num_replicas_in_sync < 1)
		return dvar_error_set(DVAR_EINVAL, "num_replicas_in_sync must be greater than zero.");
	if (global_batch_size % ctx->num_replicas_in_sync != 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "The `global_batch_size` %" PRId64
		                      " is not divisible by `num_replicas_in_sync` %d ",
		                      global_batch_size, ctx->num_replicas_in_sync);
	*out = global_batch_size / ctx->num_replicas_in_sync;
	return DVAR_OK;
}

int dvar_input_batch_sizes_for_worker(int64_t global_batch_size, int num_workers,
                                      int replicas_per_worker, int worker, int64_t *out)
{
	int64_t n, floor_, num_ceil, offset;

	if (!out || global_batch_size < 0 || num_workers < 1 || replicas_per_worker < 1 ||
	    worker < 0 || worker >= num_workers)
		return dvar_error_set(DVAR_EINVAL,
		                      "batch_sizes_for_worker: bad arguments (global %" PRId64
		                      ", %d workers, %d replicas, worker %d)",
		                      global_batch_size, num_workers, replicas_per_worker, worker);
	n = (int64_t)num_workers * replicas_per_worker;
	floor_ = global_batch_size / n;
	num_ceil = global_batch_size - n * floor_;
	offset = (int64_t)worker * replicas_per_worker;
	/* worker_0[offset:] + worker_0[:offset] */
	for (int64_t i = 0; i < n; i++) {
		int64_t j = (i + offset) % n;

		out[i] = j < num_ceil ? floor_ + 1 : floor_;
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- iterator */

typedef enum { PLAN_LEGACY, PLAN_V2, PLAN_REPLICATE, PLAN_FN } plan_kind;

/* A run of the worker's element stream: global elements [start, start+len). */
typedef struct {
	int64_t start, len;
} segment;

/* Where an iterator is in its stream: what a step changes. */
typedef struct {
	int64_t step;          /* legacy / REPLICATE: input batch; FN: next batch; all: steps made */
	int64_t pos;           /* V2: stream position */
	int64_t out_no;        /* V2: outputs made */
	int v2_ended;
} progress;

/* One step's batches, prepared by next() or by the prefetch thread. */
typedef struct {
	int64_t **idx;         /* per local replica: cap indices */
	unsigned char **buf;   /* per local replica: cap rows (file sources) */
	dvar_replica_batch *b; /* R */
	int *has;              /* R */
	int rc;                /* the step's status; its message below */
	char *message;
	progress after;        /* the position once this step is consumed */
} slot;

struct dvar_input_iterator {
	dvar_strategy *s;
	dvar_dataset *ds;
	int owns_ds;
	char *name;
	int W, worker, R, N;
	plan_kind kind;
	int64_t batch;         /* G (legacy, V2), per-replica (REPLICATE, FN) */
	int64_t opt_batch;     /* the options' batch_size */
	int mode, policy;      /* the options' */
	int drop_remainder;
	/* the worker's stream */
	segment *segs;
	size_t n_segs;
	int64_t stream_len;    /* after dropping a short last batch */
	int64_t *sizes;        /* V2: W*R */
	int64_t cap;           /* max rows per replica batch */
	int *fds;              /* file sources: one per file, -1 until opened */
	/* the caller's side (the coordinator thread) */
	progress cons;         /* consumed: what a checkpoint records */
	int64_t steps;         /* steps returned with a value */
	int64_t rows;          /* rows handed to this worker's replicas */
	int finished;
	int err;               /* a failed step: every later call fails alike */
	char *err_message;
	/* the producer's side: next() itself, or the prefetch thread */
	progress prod;
	int ahead;             /* steps prepared ahead; 0: no thread */
	int nslots;            /* ahead + 1 */
	slot *slots;
	pthread_t thread;
	int running;           /* the thread exists */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_init;
	int stop;              /* under mu: the thread is to exit */
	int64_t produced, consumed; /* under mu: steps */
};

static void stop_prefetch(dvar_input_iterator *it)
{
	if (!it->running)
		return;
	pthread_mutex_lock(&it->mu);
	it->stop = 1;
	pthread_cond_broadcast(&it->cv);
	pthread_mutex_unlock(&it->mu);
	pthread_join(it->thread, NULL);
	it->running = 0;
	it->stop = 0;
	it->produced = it->consumed = 0;
}

void dvar_input_iterator_free(dvar_input_iterator *it)
{
	if (!it)
		return;
	stop_prefetch(it);
	for (int k = 0; it->slots && k < it->nslots; k++) {
		slot *sl = &it->slots[k];

		for (int r = 0; r < it->R; r++) {
			if (sl->idx)
				free(sl->idx[r]);
			if (sl->buf)
				free(sl->buf[r]);
		}
		free(sl->idx);
		free(sl->buf);
		free(sl->b);
		free(sl->has);
		free(sl->message);
	}
	free(it->slots);
	if (it->sync_init) {
		pthread_mutex_destroy(&it->mu);
		pthread_cond_destroy(&it->cv);
	}
	if (it->fds && it->ds)
		for (size_t f = 0; f < it->ds->n_files; f++)
			if (it->fds[f] >= 0)
				close(it->fds[f]);
	free(it->fds);
	free(it->sizes);
	free(it->segs);
	free(it->name);
	free(it->err_message);
	if (it->owns_ds)
		dvar_dataset_free(it->ds);
	free(it);
}

const char *dvar_input_iterator_name(const dvar_input_iterator *it)
{
	return it ? it->name : NULL;
}

static const char file_shard_error[] =
	"Could not apply FILE based sharding: the dataset only has %zu file(s), which is not "
	"enough for the required %d shards/workers. If you are using datasets with distribution "
	"strategy, consider setting the auto sharding policy to either DATA or OFF using the "
	"`experimental_distribute.auto_shard_policy` option of `tf.data.Options()`. Or, split "
	"your input files into a larger number of small files such that number of files is "
	"greater than number of shards/workers.";

int dvar_input_options_init(dvar_input_options *opts, unsigned int version)
{
	static const dvar_input_options init = DVAR_INPUT_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_input_options", version,
	                         DVAR_INPUT_OPTIONS_VERSION);
}

static int check_options(const dvar_input_options *o, int from_fn)
{
	if (!o)
		return dvar_error_set(DVAR_EINVAL, "input options are NULL (batch_size has no default)");
	if (dvar_check_version("dvar_input_options", o->version, DVAR_INPUT_OPTIONS_VERSION))
		return DVAR_EINVAL;
	if (o->batch_size < 1)
		return dvar_error_set(DVAR_EINVAL, "input options: batch_size %" PRId64
		                      " must be at least 1", o->batch_size);
	if (o->auto_shard_policy < DVAR_AUTO_SHARD_OFF || o->auto_shard_policy > DVAR_AUTO_SHARD_DATA)
		return dvar_error_set(DVAR_EINVAL,
		                      "input options: auto_shard_policy %d is not OFF (-1), AUTO (0), "
		                      "FILE (1) or DATA (2)",
		                      o->auto_shard_policy);
	if (o->mode != DVAR_INPUT_SPLIT && o->mode != DVAR_INPUT_REPLICATE)
		return dvar_error_set(DVAR_EINVAL, "input options: mode %d is not SPLIT (0) or "
		                      "REPLICATE (1)", o->mode);
	if (o->prefetch < DVAR_INPUT_PREFETCH_OFF)
		return dvar_error_set(DVAR_EINVAL, "input options: prefetch %" PRId64 " is not 0 (the "
		                      "default), a number of batches or DVAR_INPUT_PREFETCH_OFF (-1)",
		                      o->prefetch);
	if (o->name && (o->name[0] == '\0' || strnlen(o->name, 1025) > 1024))
		return dvar_error_set(DVAR_EINVAL, "input options: a name needs 1 to 1024 bytes");
	if (o->mode == DVAR_INPUT_REPLICATE && from_fn)
		return dvar_error_set(DVAR_EINVAL, "input options: distribute_datasets_from_function "
		                      "needs mode SPLIT");
	if (o->mode == DVAR_INPUT_REPLICATE && !from_fn &&
	    (o->auto_shard_policy == DVAR_AUTO_SHARD_FILE ||
	     o->auto_shard_policy == DVAR_AUTO_SHARD_DATA))
		return dvar_error_set(DVAR_EINVAL, "input options: mode REPLICATE gives every replica "
		                      "the whole dataset; auto_shard_policy must be OFF or AUTO");
	return DVAR_OK;
}

static int alloc_iter(dvar_input_iterator **out, dvar_strategy *s)
{
	dvar_input_iterator *it = calloc(1, sizeof *it);

	*out = it;
	if (!it)
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	it->s = s;
	it->W = dvar_strategy_num_workers(s);
	it->worker = dvar_strategy_worker_id(s);
	it->R = dvar_strategy_local_replicas(s);
	it->N = dvar_strategy_num_replicas_in_sync(s);
	return DVAR_OK;
}

/* A step's buffers: R batches, indices, and rows for file sources. */
static int alloc_slot(dvar_input_iterator *it, slot *sl)
{
	dvar_dataset *ds = it->ds;

	sl->idx = calloc((size_t)it->R, sizeof *sl->idx);
	sl->buf = calloc((size_t)it->R, sizeof *sl->buf);
	sl->b = calloc((size_t)it->R, sizeof *sl->b);
	sl->has = calloc((size_t)it->R, sizeof *sl->has);
	if (!sl->idx || !sl->buf || !sl->b || !sl->has)
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	for (int r = 0; r < it->R; r++) {
		sl->idx[r] = malloc((size_t)it->cap * sizeof(int64_t));
		if (!sl->idx[r])
			return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		if (ds->n_files) {
			sl->buf[r] = malloc((size_t)it->cap * ds->row_bytes);
			if (!sl->buf[r])
				return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		}
	}
	return DVAR_OK;
}

/* Per-step buffers, the stream's length after drop_remainder, V2 sizes. */
static int finish_iter(dvar_input_iterator *it, const dvar_input_options *o)
{
	dvar_dataset *ds = it->ds;
	int rc;

	it->stream_len = 0;
	for (size_t i = 0; i < it->n_segs; i++)
		it->stream_len += it->segs[i].len;
	if (it->drop_remainder)
		it->stream_len -= it->stream_len % it->batch;
	if (it->cap > it->stream_len)
		it->cap = it->stream_len;
	if (it->cap < 1)
		it->cap = 1;
	if ((uint64_t)it->cap > SIZE_MAX / ds->row_bytes / 2)
		return dvar_error_set(DVAR_EINVAL, "input iterator: batch of %" PRId64 " rows too large",
		                      it->cap);
	it->opt_batch = o->batch_size;
	it->mode = o->mode;
	it->policy = o->auto_shard_policy;
	if (o->name && !(it->name = strdup(o->name)))
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	/* Prefetch: whole steps of R batches, at least one ahead. */
	if (o->prefetch == DVAR_INPUT_PREFETCH_OFF)
		it->ahead = 0;
	else if (o->prefetch == 0)
		it->ahead = 1;
	else
		it->ahead = (int)((o->prefetch + it->R - 1) / it->R < 64 ? (o->prefetch + it->R - 1) / it->R
		                                                         : 64);
	it->nslots = it->ahead + 1;
	if (it->ahead) {
		if (pthread_mutex_init(&it->mu, NULL) != 0)
			return dvar_error_set(DVAR_ERROR, "input iterator: no mutex");
		if (pthread_cond_init(&it->cv, NULL) != 0) {
			pthread_mutex_destroy(&it->mu);
			return dvar_error_set(DVAR_ERROR, "input iterator: no condition variable");
		}
		it->sync_init = 1;
	}
	if (!(it->slots = calloc((size_t)it->nslots, sizeof *it->slots)))
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	for (int k = 0; k < it->nslots; k++)
		if ((rc = alloc_slot(it, &it->slots[k])) != DVAR_OK)
			return rc;
	if (ds->n_files) {
		it->fds = malloc(ds->n_files * sizeof *it->fds);
		if (!it->fds)
			return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		for (size_t f = 0; f < ds->n_files; f++)
			it->fds[f] = -1;
	}
	if (it->kind == PLAN_V2) {
		it->sizes = malloc((size_t)it->N * sizeof *it->sizes);
		if (!it->sizes)
			return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		return dvar_input_batch_sizes_for_worker(it->batch, it->W, it->R, it->worker, it->sizes);
	}
	return DVAR_OK;
}

static int whole_stream(dvar_input_iterator *it)
{
	it->segs = malloc(sizeof *it->segs);
	if (!it->segs)
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	it->segs[0].start = 0;
	it->segs[0].len = it->ds->rows;
	it->n_segs = 1;
	return DVAR_OK;
}

/* The local part of dvar_distribute_dataset: the plan, no communication. */
static int plan_dataset(dvar_input_iterator *it, const dvar_input_options *o)
{
	dvar_dataset *ds = it->ds;
	int policy = o->auto_shard_policy, rc;

	it->batch = o->batch_size;
	it->drop_remainder = o->drop_remainder != 0;
	if (o->mode == DVAR_INPUT_REPLICATE) {
		it->kind = PLAN_REPLICATE;
		it->cap = it->batch;
		return whole_stream(it);
	}
	/* AUTO: FILE when the source is a reader (files), else DATA. */
	if (policy == DVAR_AUTO_SHARD_AUTO)
		policy = ds->n_files ? DVAR_AUTO_SHARD_FILE : DVAR_AUTO_SHARD_DATA;
	it->cap = (it->batch + it->N - 1) / it->N;
	if (policy == DVAR_AUTO_SHARD_DATA) {
		/* RebatchDatasetV2 is rewritten to the legacy rebatch, then shard(W, w). */
		it->kind = PLAN_LEGACY;
		return whole_stream(it);
	}
	it->kind = PLAN_V2;
	if (policy == DVAR_AUTO_SHARD_OFF || (it->W == 1 && it->worker == 0))
		return whole_stream(it); /* FILE is skipped for W = 1, index 0 */
	/* FILE, W > 1 */
	if (!ds->n_files)
		return dvar_error_set(DVAR_EINVAL,
		                      "Found an unshardable source dataset: an in-memory array cannot "
		                      "be sharded by FILE; use auto_shard_policy DATA, AUTO or OFF");
	if (ds->n_files < (size_t)it->W)
		return dvar_error_set(DVAR_EINVAL, file_shard_error, ds->n_files, it->W);
	it->segs = calloc((ds->n_files + (size_t)it->W - 1) / (size_t)it->W, sizeof *it->segs);
	if (!it->segs)
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	for (size_t f = (size_t)it->worker; f < ds->n_files; f += (size_t)it->W) {
		it->segs[it->n_segs].start = ds->file_start[f];
		it->segs[it->n_segs].len = ds->file_start[f + 1] - ds->file_start[f];
		it->n_segs++;
	}
	rc = DVAR_OK;
	return rc;
}

static int distribute_common(dvar_input_iterator **out, dvar_input_iterator *it, int rc,
                             const dvar_input_options *o, const char *kind)
{
	char what[256];

	if (rc == DVAR_OK)
		rc = finish_iter(it, o);
	/* The options are part of the step's name: workers that disagree fail.
	 * (prefetch may differ: the batches are the same.) */
	snprintf(what, sizeof what, "%s (batch %" PRId64 ", drop %d, policy %d, mode %d, name %.48s)",
	         kind, o ? o->batch_size : 0, o ? o->drop_remainder != 0 : 0,
	         o ? o->auto_shard_policy : 0, o ? o->mode : 0, o && o->name ? o->name : "-");
	if (it && it->W > 1) {
		/* A worker that failed itself keeps its own code and message (the same
		 * text everywhere for the deterministic errors, such as TF's); the
		 * others get the lowest failing worker's, as "worker W: ...". */
		char *mine = rc != DVAR_OK ? strdup(dvar_error_last()->message) : NULL;
		int local = rc;

		rc = dvar_strategy_agree(it->s, rc, what);
		if (local != DVAR_OK && rc != DVAR_ECOMM && mine)
			rc = dvar_error_restore(local, mine);
		free(mine);
	}
	if (rc != DVAR_OK) {
		dvar_input_iterator_free(it);
		return rc;
	}
	*out = it;
	return DVAR_OK;
}

int dvar_distribute_dataset(dvar_input_iterator **out, dvar_strategy *s, dvar_dataset *dataset,
                            const dvar_input_options *opts)
{
	dvar_input_iterator *it = NULL;
	int rc;

	if (!out || !s)
		return dvar_error_set(DVAR_EINVAL, "dvar_distribute_dataset: NULL argument");
	*out = NULL;
	if ((rc = alloc_iter(&it, s)) != DVAR_OK)
		return dvar_strategy_num_workers(s) > 1
		               ? dvar_strategy_agree(s, rc, "distribute dataset")
		               : rc;
	it->ds = dataset;
	if (!dataset)
		rc = dvar_error_set(DVAR_EINVAL, "dvar_distribute_dataset: dataset is NULL");
	else if ((rc = check_options(opts, 0)) == DVAR_OK)
		rc = plan_dataset(it, opts);
	return distribute_common(out, it, rc, opts, "distribute dataset");
}

int dvar_distribute_datasets_from_function(dvar_input_iterator **out, dvar_strategy *s,
                                           dvar_dataset_fn fn, void *arg,
                                           const dvar_input_options *opts)
{
	dvar_input_iterator *it = NULL;
	dvar_input_context ctx;
	int rc;

	if (!out || !s)
		return dvar_error_set(DVAR_EINVAL, "dvar_distribute_datasets_from_function: NULL "
		                      "argument");
	*out = NULL;
	if ((rc = alloc_iter(&it, s)) != DVAR_OK)
		return dvar_strategy_num_workers(s) > 1
		               ? dvar_strategy_agree(s, rc, "distribute datasets from function")
		               : rc;
	ctx.num_input_pipelines = it->W;
	ctx.input_pipeline_id = it->worker;
	ctx.num_replicas_in_sync = it->N;
	it->kind = PLAN_FN;
	if (!fn)
		rc = dvar_error_set(DVAR_EINVAL, "dvar_distribute_datasets_from_function: fn is NULL");
	else if ((rc = check_options(opts, 1)) == DVAR_OK &&
	         (rc = dvar_input_context_per_replica_batch_size(&ctx, opts->batch_size,
	                                                         &it->batch)) == DVAR_OK) {
		dvar_dataset *ds = NULL;

		dvar_error_clear();
		rc = fn(&ds, &ctx, arg);
		if (rc == DVAR_OK && !ds)
			rc = dvar_error_set(DVAR_EINVAL, "input function returned no dataset");
		else if (rc != DVAR_OK && dvar_error_last()->message[0] == '\0')
			dvar_error_set(rc, "input function failed (%s)", dvar_strerror(rc));
		if (rc != DVAR_OK)
			dvar_dataset_free(ds);
		else {
			it->ds = ds;
			it->owns_ds = 1;
			it->drop_remainder = opts->drop_remainder != 0;
			it->cap = it->batch;
			rc = whole_stream(it);
		}
	}
	return distribute_common(out, it, rc, opts, "distribute datasets from function");
}

/* ---------------------------------------------------------------- next */

/* Stream position p -> global element index. */
static int64_t global_of(const dvar_input_iterator *it, int64_t p)
{
	for (size_t i = 0; i < it->n_segs; i++) {
		if (p < it->segs[i].len)
			return it->segs[i].start + p;
		p -= it->segs[i].len;
	}
	return -1; /* not reached */
}

static int read_rows(dvar_input_iterator *it, int64_t g, int64_t n, unsigned char *dst)
{
	dvar_dataset *ds = it->ds;
	size_t f = 0;

	while (n > 0) {
		int64_t take;
		off_t off;
		size_t want, got = 0;

		while (ds->file_start[f + 1] <= g)
			f++;
		take = ds->file_start[f + 1] - g;
		if (take > n)
			take = n;
		if (it->fds[f] < 0 && (it->fds[f] = open(ds->paths[f], O_RDONLY | O_CLOEXEC)) < 0)
			return dvar_error_set_errno(errno == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, errno,
			                            "dataset file '%s'", ds->paths[f]);
		off = (off_t)((uint64_t)(g - ds->file_start[f]) * ds->row_bytes);
		want = (size_t)take * ds->row_bytes;
		while (got < want) {
			ssize_t r = pread(it->fds[f], dst + got, want - got, off + (off_t)got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return dvar_error_set_errno(DVAR_EIO, errno, "read dataset file '%s'",
				                            ds->paths[f]);
			if (r == 0)
				return dvar_error_set(DVAR_EIO, "dataset file '%s' is shorter than when the "
				                      "dataset was made", ds->paths[f]);
			got += (size_t)r;
		}
		dst += want;
		g += take;
		n -= take;
	}
	return DVAR_OK;
}

/* Fill batch b with stream rows [p, p+n), into the step's buffers idx and buf. */
static int fill(dvar_input_iterator *it, int64_t *idx, unsigned char *buf, int64_t p, int64_t n,
                dvar_replica_batch *b)
{
	dvar_dataset *ds = it->ds;

	b->rows = n;
	b->shape.rank = ds->elem.rank + 1;
	b->shape.dims[0] = n;
	for (int d = 0; d < ds->elem.rank; d++)
		b->shape.dims[d + 1] = ds->elem.dims[d];
	if (n == 0) {
		b->data = NULL;
		b->indices = NULL;
		return DVAR_OK;
	}
	for (int64_t i = 0; i < n; i++)
		idx[i] = global_of(it, p + i);
	b->indices = idx;
	if (!ds->n_files) {
		/* An array stream is one segment: the rows are contiguous. */
		b->data = ds->data + (size_t)idx[0] * ds->row_bytes;
		return DVAR_OK;
	}
	b->data = buf;
	for (int64_t i = 0; i < n;) {
		int64_t j = i + 1;
		int rc;

		while (j < n && idx[j] == idx[j - 1] + 1)
			j++;
		rc = read_rows(it, idx[i], j - i, buf + (size_t)i * ds->row_bytes);
		if (rc != DVAR_OK)
			return rc;
		i = j;
	}
	return DVAR_OK;
}

/*
 * Local replica r's output of the step pg is at: stream rows [*p, *p + *n);
 * 1 when the replica has a value. Advances pg's V2 position; the caller
 * advances pg->step once the R outputs are made. No data is touched, so a
 * restore replays steps with it.
 */
static int plan_output(const dvar_input_iterator *it, progress *pg, int r, int64_t *p,
                       int64_t *n)
{
	int64_t len = it->stream_len;

	*p = 0;
	*n = 0;
	switch (it->kind) {
	case PLAN_LEGACY: {
		/* Input batch `step`; sub-batch i = worker + r*W of N (shard(W, w)). */
		int64_t start = pg->step * it->batch, B, interval, i, lo, hi;

		if (start >= len)
			return 0;
		B = len - start < it->batch ? len - start : it->batch;
		interval = (B + it->N - 1) / it->N;
		i = (int64_t)it->worker + (int64_t)r * it->W;
		lo = i * interval < B ? i * interval : B;
		hi = (i + 1) * interval < B ? (i + 1) * interval : B;
		*p = start + lo;
		*n = hi - lo;
		return 1;
	}
	case PLAN_V2: {
		int64_t want = it->sizes[pg->out_no % it->N], left = len - pg->pos;

		pg->out_no++;
		if (pg->v2_ended)
			return 0;
		if (want == 0) /* an empty batch, no input consumed */
			return 1;
		if (left == 0 || (it->drop_remainder && left < want)) {
			pg->v2_ended = 1;
			return 0;
		}
		*n = left < want ? left : want;
		*p = pg->pos;
		pg->pos += *n;
		return 1;
	}
	case PLAN_REPLICATE: {
		int64_t start = pg->step * it->batch;

		if (start >= len)
			return 0;
		*p = start;
		*n = len - start < it->batch ? len - start : it->batch;
		return 1;
	}
	case PLAN_FN: {
		int64_t start = (pg->step * it->R + r) * it->batch;

		if (start >= len)
			return 0;
		*p = start;
		*n = len - start < it->batch ? len - start : it->batch;
		return 1;
	}
	}
	return 0;
}

/* This worker's outputs for the step pg is at, into sl (no MPI: the
 * prefetch thread runs it). */
static int local_step(dvar_input_iterator *it, progress *pg, slot *sl)
{
	int rc = DVAR_OK;

	for (int r = 0; r < it->R; r++) {
		int64_t p, n;

		sl->has[r] = plan_output(it, pg, r, &p, &n);
		if (rc == DVAR_OK)
			rc = fill(it, sl->idx[r], sl->buf[r], p, n, &sl->b[r]);
	}
	pg->step++;
	sl->after = *pg;
	return rc;
}

/* ---------------------------------------------------------------- prefetch */

/* Keep a step's failure with it (the error record is per thread). */
static void keep_message(slot *sl, int rc)
{
	free(sl->message);
	sl->message = rc != DVAR_OK ? strdup(dvar_error_last()->message) : NULL;
	sl->rc = rc;
}

/* The prefetch thread: prepares steps until `ahead` wait unconsumed, stops
 * after a failed one. Only it touches it->prod and the files meanwhile. */
static void *prefetch_main(void *arg)
{
	dvar_input_iterator *it = arg;

	pthread_mutex_lock(&it->mu);
	for (;;) {
		slot *sl;
		int rc;

		while (!it->stop && it->produced - it->consumed >= it->ahead)
			pthread_cond_wait(&it->cv, &it->mu);
		if (it->stop)
			break;
		/* Never the slot the caller holds: (consumed - 1) % nslots. */
		sl = &it->slots[it->produced % it->nslots];
		pthread_mutex_unlock(&it->mu);
		rc = local_step(it, &it->prod, sl);
		keep_message(sl, rc);
		pthread_mutex_lock(&it->mu);
		it->produced++;
		pthread_cond_broadcast(&it->cv);
		if (rc != DVAR_OK)
			break;
	}
	pthread_mutex_unlock(&it->mu);
	return NULL;
}

/* The next step's slot: from the prefetch thread, or made here. */
static slot *take_step(dvar_input_iterator *it)
{
	slot *sl;

	if (it->ahead && !it->running) {
		it->produced = it->consumed = 0;
		it->stop = 0;
		if (pthread_create(&it->thread, NULL, prefetch_main, it) == 0)
			it->running = 1;
		else
			it->ahead = 0; /* no thread to be had: prepare steps here */
	}
	if (!it->running) {
		sl = &it->slots[0];
		keep_message(sl, local_step(it, &it->prod, sl));
		return sl;
	}
	pthread_mutex_lock(&it->mu);
	while (it->produced == it->consumed)
		pthread_cond_wait(&it->cv, &it->mu);
	sl = &it->slots[it->consumed % it->nslots];
	it->consumed++;
	pthread_cond_broadcast(&it->cv);
	pthread_mutex_unlock(&it->mu);
	return sl;
}

/* ---------------------------------------------------------------- next */

int dvar_input_iterator_next(dvar_input_iterator *it, dvar_replica_batch *batches,
                             int *has_value)
{
	int rc = DVAR_OK, any = 0;
	slot *sl;

	if (!it || !batches || !has_value)
		return dvar_error_set(DVAR_EINVAL, "dvar_input_iterator_next: NULL argument");
	*has_value = 0;
	memset(batches, 0, (size_t)it->R * sizeof *batches);
	if (it->err)
		return dvar_error_restore(it->err, it->err_message ? it->err_message : "");
	if (it->finished)
		return DVAR_OK;
	sl = take_step(it);
	rc = sl->rc;
	if (rc != DVAR_OK)
		dvar_error_restore(rc, sl->message ? sl->message : "");
	for (int r = 0; r < it->R; r++)
		any |= sl->has[r];
	if (it->W > 1) {
		/* Every worker tells every other whether any of its replicas has a
		 * value: here, on the calling thread, never on the prefetch thread. */
		uint64_t *sb = calloc((size_t)it->W * 2, sizeof *sb), *rb = sb ? sb + it->W : NULL;
		unsigned char *flags = malloc((size_t)it->W);
		void *recv = NULL;

		if (!sb || !flags) {
			free(sb);
			free(flags);
			sb = NULL;
			flags = NULL;
			if (rc == DVAR_OK)
				rc = dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
			rc = dvar_strategy_agree(it->s, rc, "input iterator next");
		} else {
			for (int w = 0; w < it->W; w++) {
				sb[w] = 1;
				flags[w] = (unsigned char)any;
			}
			rc = dvar_strategy_all_to_all(it->s, rc, flags, sb, &recv, rb,
			                               "input iterator next");
			if (rc == DVAR_OK)
				for (int w = 0; w < it->W; w++)
					any |= ((const unsigned char *)recv)[w];
			free(recv);
			free(sb);
			free(flags);
		}
	}
	if (rc != DVAR_OK) {
		/* Sticky: the workers agreed on the failure, so all stop here. */
		it->err = rc;
		free(it->err_message);
		it->err_message = strdup(dvar_error_last()->message);
		return rc;
	}
	it->cons = sl->after;
	if (!any) {
		it->finished = 1;
		return DVAR_OK;
	}
	memcpy(batches, sl->b, (size_t)it->R * sizeof *batches);
	for (int r = 0; r < it->R; r++)
		it->rows += sl->b[r].rows;
	it->steps++;
	*has_value = 1;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- checkpoints */

enum {
	C_VERSION, C_WORKER, C_W, C_R, C_PLAN, C_MODE, C_POLICY, C_BATCH, C_DROP, C_DATASET,
	C_STREAM, C_STEPS, C_FINISHED, C_STEP, C_POS, C_OUTS, C_ENDED, C_ROWS
};

void dvar_input_state_row(const dvar_input_iterator *it, int64_t *row)
{
	memset(row, 0, DVAR_INPUT__STATE_COLUMNS * sizeof *row);
	row[C_VERSION] = DVAR_INPUT__STATE_VERSION;
	row[C_WORKER] = it->worker;
	row[C_W] = it->W;
	row[C_R] = it->R;
	row[C_PLAN] = it->kind;
	row[C_MODE] = it->mode;
	row[C_POLICY] = it->policy;
	row[C_BATCH] = it->opt_batch;
	row[C_DROP] = it->drop_remainder;
	row[C_DATASET] = it->ds->rows;
	row[C_STREAM] = it->stream_len;
	row[C_STEPS] = it->steps;
	row[C_FINISHED] = it->finished;
	row[C_STEP] = it->cons.step;
	row[C_POS] = it->cons.pos;
	row[C_OUTS] = it->cons.out_no;
	row[C_ENDED] = it->cons.v2_ended;
	row[C_ROWS] = it->rows;
}

static const char *plan_name(int64_t kind)
{
	static const char *const names[] = { "legacy rebatch", "V2 rebatch", "replicate",
		                             "from a function" };

	return kind >= 0 && kind <= PLAN_FN ? names[kind] : "unknown";
}

/*
 * How a position carries over to another topology: GLOBAL when a step is
 * one global batch of the dataset in its own order (legacy, whatever W; V2
 * over one worker, whose stream is the whole dataset), REPLICATE (a step is
 * batch k of the whole dataset on every replica), or LOCAL when each worker
 * reads a stream of its own (V2 over several workers, a function's
 * datasets): those restore on the same topology only.
 */
enum { ORDER_GLOBAL, ORDER_REPLICATE, ORDER_LOCAL };

static int order_of(int64_t kind, int64_t W)
{
	if (kind == PLAN_LEGACY || (kind == PLAN_V2 && W == 1))
		return ORDER_GLOBAL;
	return kind == PLAN_REPLICATE ? ORDER_REPLICATE : ORDER_LOCAL;
}

/* Back to the start of the stream, as a new iterator: the prefetched steps
 * are discarded, the thread restarts at the next call, a failure is forgotten. */
static void rewind_stream(dvar_input_iterator *it)
{
	stop_prefetch(it);
	it->err = 0;
	free(it->err_message);
	it->err_message = NULL;
	memset(&it->cons, 0, sizeof it->cons);
	it->prod = it->cons;
	it->steps = 0;
	it->rows = 0;
	it->finished = 0;
}

int dvar_input_iterator_reset(dvar_input_iterator *it)
{
	if (!it)
		return dvar_error_set(DVAR_EINVAL, "dvar_input_iterator_reset: iterator is NULL");
	rewind_stream(it);
	return DVAR_OK;
}

int dvar_input_restore_state(dvar_input_iterator *it, const int64_t *table, int64_t rows,
                              const char *name, int apply)
{
	const int64_t *t0 = table, *mine;
	int same;

	/* The table itself: one row per worker, the shared columns equal. */
	for (int64_t w = 0; w < rows; w++) {
		const int64_t *t = table + w * DVAR_INPUT__STATE_COLUMNS;

		if (t[C_VERSION] != DVAR_INPUT__STATE_VERSION)
			return dvar_error_set(DVAR_EVERSION, "iterator '%s': saved state version %" PRId64
			                      ", this library reads %d", name, t[C_VERSION],
			                      DVAR_INPUT__STATE_VERSION);
		if (t[C_WORKER] != w || t[C_W] != rows || t[C_R] != t0[C_R] ||
		    t[C_PLAN] != t0[C_PLAN] || t[C_MODE] != t0[C_MODE] || t[C_POLICY] != t0[C_POLICY] ||
		    t[C_BATCH] != t0[C_BATCH] || t[C_DROP] != t0[C_DROP] ||
		    t[C_STEPS] != t0[C_STEPS] || t[C_FINISHED] != t0[C_FINISHED] || t[C_R] < 1 ||
		    t[C_STEPS] < 0 || t[C_STEP] < 0 || t[C_POS] < 0 || t[C_OUTS] < 0)
			return dvar_error_set(DVAR_ECORRUPT, "iterator '%s': the saved state is "
			                      "inconsistent (row %" PRId64 ")", name, w);
	}
	if (t0[C_MODE] != it->mode)
		return dvar_error_set(DVAR_EINVAL, "iterator '%s' was saved in mode %" PRId64
		                      ", this iterator has mode %d: the saved position cannot apply",
		                      name, t0[C_MODE], it->mode);
	if (t0[C_BATCH] != it->opt_batch)
		return dvar_error_set(DVAR_EINVAL, "iterator '%s' was saved with batch_size %" PRId64
		                      ", this iterator has %" PRId64 ": the saved position cannot apply",
		                      name, t0[C_BATCH], it->opt_batch);
	if (t0[C_DROP] != it->drop_remainder)
		return dvar_error_set(DVAR_EINVAL, "iterator '%s' was saved with drop_remainder %" PRId64
		                      ", this iterator has %d: the saved position cannot apply",
		                      name, t0[C_DROP], it->drop_remainder);
	same = rows == it->W && t0[C_R] == it->R && t0[C_PLAN] == it->kind &&
	       t0[C_POLICY] == it->policy;
	mine = same ? table + (int64_t)it->worker * DVAR_INPUT__STATE_COLUMNS : NULL;
	/* The dataset: the whole one's size, or, from a function, this worker's. */
	if (it->kind == PLAN_FN ? same && mine[C_DATASET] != it->ds->rows
	                        : t0[C_DATASET] != it->ds->rows)
		return dvar_error_set(DVAR_EINVAL, "iterator '%s' was saved over a dataset of %" PRId64
		                      " elements, this iterator's has %" PRId64
		                      ": the saved position cannot apply",
		                      name, (it->kind == PLAN_FN ? mine : t0)[C_DATASET], it->ds->rows);
	if (same && (mine[C_STREAM] != it->stream_len || mine[C_POS] > it->stream_len))
		return dvar_error_set(DVAR_ECORRUPT, "iterator '%s': the saved stream of %" PRId64
		                      " elements does not match this worker's %" PRId64, name,
		                      mine[C_STREAM], it->stream_len);
	if (!same && (order_of(t0[C_PLAN], rows) != order_of(it->kind, it->W) ||
	              order_of(it->kind, it->W) == ORDER_LOCAL))
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "iterator '%s' was saved by %" PRId64 " worker(s) x %" PRId64
		                      " replica(s) with the %s (policy %" PRId64 "); this iterator is "
		                      "%d x %d with the %s (policy %d): a position carries over to "
		                      "another topology only when both read the dataset in its own "
		                      "order (DATA sharding, or one worker) or both replicate it",
		                      name, rows, t0[C_R], plan_name(t0[C_PLAN]), t0[C_POLICY], it->W,
		                      it->R, plan_name(it->kind), it->policy);
	if (!apply)
		return DVAR_OK;

	rewind_stream(it);
	it->steps = t0[C_STEPS];
	if (same) {
		it->cons.step = mine[C_STEP];
		it->cons.pos = mine[C_POS];
		it->cons.out_no = mine[C_OUTS];
		it->cons.v2_ended = mine[C_ENDED] != 0;
		it->rows = mine[C_ROWS];
		it->finished = mine[C_FINISHED] != 0;
	} else {
		/* Replay the saved number of steps here: the same global batches. */
		for (int64_t k = 0; k < it->steps; k++) {
			for (int r = 0; r < it->R; r++) {
				int64_t p, n;

				plan_output(it, &it->cons, r, &p, &n);
				it->rows += n;
			}
			it->cons.step++;
		}
	}
	it->prod = it->cons;
	return DVAR_OK;
}

int dvar_input_iterator_element(const dvar_input_iterator *it, int *dtype,
                                dvar_shape *element_shape)
{
	if (!it)
		return dvar_error_set(DVAR_EINVAL, "dvar_input_iterator_element: iterator is NULL");
	if (dtype)
		*dtype = it->ds->dtype;
	if (element_shape)
		*element_shape = it->ds->elem;
	return DVAR_OK;
}
