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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "dvar/input.h"
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

struct dvar_input_iterator {
	dvar_strategy *s;
	dvar_dataset *ds;
	int owns_ds;
	int W, worker, R, N;
	plan_kind kind;
	int64_t batch;         /* G (legacy, V2), per-replica (REPLICATE, FN) */
	int drop_remainder;
	/* the worker's stream */
	segment *segs;
	size_t n_segs;
	int64_t stream_len;    /* after dropping a short last batch */
	/* progress */
	int64_t step;          /* legacy / REPLICATE: input batch; FN: next batch */
	int64_t pos;           /* V2: stream position */
	int64_t out_no;        /* V2: outputs made */
	int v2_ended;
	int64_t *sizes;        /* V2: W*R */
	int finished;
	/* per local replica */
	int64_t cap;           /* max rows per replica batch */
	int64_t **idx;
	unsigned char **buf;   /* file sources */
	int *fds;              /* file sources: one per file, -1 until opened */
};

void dvar_input_iterator_free(dvar_input_iterator *it)
{
	if (!it)
		return;
	if (it->idx)
		for (int r = 0; r < it->R; r++)
			free(it->idx[r]);
	if (it->buf)
		for (int r = 0; r < it->R; r++)
			free(it->buf[r]);
	if (it->fds && it->ds)
		for (size_t f = 0; f < it->ds->n_files; f++)
			if (it->fds[f] >= 0)
				close(it->fds[f]);
	free(it->fds);
	free(it->idx);
	free(it->buf);
	free(it->sizes);
	free(it->segs);
	if (it->owns_ds)
		dvar_dataset_free(it->ds);
	free(it);
}

static const char file_shard_error[] =
	"Could not apply FILE based sharding: the dataset only has %zu file(s), which is not "
	"enough for the required %d shards/workers. If you are using datasets with distribution "
	"strategy, consider setting the auto sharding policy to either DATA or OFF using the "
	"`experimental_distribute.auto_shard_policy` option of `tf.data.Options()`. Or, split "
	"your input files into a larger number of small files such that number of files is "
	"greater than number of shards/workers.";

static int check_options(const dvar_input_options *o, int from_fn)
{
	if (!o)
		return dvar_error_set(DVAR_EINVAL, "input options are NULL (batch_size has no default)");
	if (o->version != DVAR_INPUT_OPTIONS_VERSION)
		return dvar_error_set(DVAR_EINVAL, "input options: version %u, expected %d",
		                      o->version, DVAR_INPUT_OPTIONS_VERSION);
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

/* Per-replica buffers, the stream's length after drop_remainder, V2 sizes. */
static int finish_iter(dvar_input_iterator *it)
{
	dvar_dataset *ds = it->ds;

	it->stream_len = 0;
	for (size_t i = 0; i < it->n_segs; i++)
		it->stream_len += it->segs[i].len;
	if (it->drop_remainder)
		it->stream_len -= it->stream_len % it->batch;
	it->idx = calloc((size_t)it->R, sizeof *it->idx);
	it->buf = calloc((size_t)it->R, sizeof *it->buf);
	if (!it->idx || !it->buf)
		return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	if (it->cap > it->stream_len)
		it->cap = it->stream_len;
	if (it->cap < 1)
		it->cap = 1;
	if ((uint64_t)it->cap > SIZE_MAX / ds->row_bytes / 2)
		return dvar_error_set(DVAR_EINVAL, "input iterator: batch of %" PRId64 " rows too large",
		                      it->cap);
	for (int r = 0; r < it->R; r++) {
		it->idx[r] = malloc((size_t)it->cap * sizeof(int64_t));
		if (!it->idx[r])
			return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		if (ds->n_files) {
			it->buf[r] = malloc((size_t)it->cap * ds->row_bytes);
			if (!it->buf[r])
				return dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
		}
	}
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
	char what[160];

	if (rc == DVAR_OK)
		rc = finish_iter(it);
	/* The options are part of the step's name: workers that disagree fail. */
	snprintf(what, sizeof what, "%s (batch %" PRId64 ", drop %d, policy %d, mode %d)", kind,
	         o ? o->batch_size : 0, o ? o->drop_remainder != 0 : 0,
	         o ? o->auto_shard_policy : 0, o ? o->mode : 0);
	if (it && it->W > 1) {
		/* A worker that failed itself keeps its own code and message (the same
		 * text everywhere for the deterministic errors, such as TF's); the
		 * others get the lowest failing worker's, as "worker W: ...". */
		char *mine = rc != DVAR_OK ? strdup(dvar_error_last()->message) : NULL;
		int local = rc;

		rc = dvar_strategy__agree(it->s, rc, what);
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
		               ? dvar_strategy__agree(s, rc, "distribute dataset")
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
		               ? dvar_strategy__agree(s, rc, "distribute datasets from function")
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

/* Fill local replica r's batch with stream rows [p, p+n). */
static int fill(dvar_input_iterator *it, int r, int64_t p, int64_t n, dvar_replica_batch *b)
{
	dvar_dataset *ds = it->ds;
	int64_t *idx = it->idx[r];

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
	b->data = it->buf[r];
	for (int64_t i = 0; i < n;) {
		int64_t j = i + 1;
		int rc;

		while (j < n && idx[j] == idx[j - 1] + 1)
			j++;
		rc = read_rows(it, idx[i], j - i, it->buf[r] + (size_t)i * ds->row_bytes);
		if (rc != DVAR_OK)
			return rc;
		i = j;
	}
	return DVAR_OK;
}

/* This worker's outputs for one step: has[r] = 1 when replica r has a value. */
static int local_step(dvar_input_iterator *it, dvar_replica_batch *b, int *has)
{
	int64_t len = it->stream_len;
	int rc = DVAR_OK;

	for (int r = 0; r < it->R && rc == DVAR_OK; r++) {
		int64_t p = 0, n = 0;

		has[r] = 0;
		switch (it->kind) {
		case PLAN_LEGACY: {
			/* Input batch `step`; sub-batch i = worker + r*W of N (shard(W, w)). */
			int64_t start = it->step * it->batch, B, interval, i, lo, hi;

			if (start >= len)
				break;
			B = len - start < it->batch ? len - start : it->batch;
			interval = (B + it->N - 1) / it->N;
			i = (int64_t)it->worker + (int64_t)r * it->W;
			lo = i * interval < B ? i * interval : B;
			hi = (i + 1) * interval < B ? (i + 1) * interval : B;
			has[r] = 1;
			p = start + lo;
			n = hi - lo;
			break;
		}
		case PLAN_V2: {
			int64_t want = it->sizes[it->out_no % it->N], left = len - it->pos;

			it->out_no++;
			if (it->v2_ended)
				break;
			if (want == 0) { /* an empty batch, no input consumed */
				has[r] = 1;
				break;
			}
			if (left == 0 || (it->drop_remainder && left < want)) {
				it->v2_ended = 1;
				break;
			}
			n = left < want ? left : want;
			p = it->pos;
			it->pos += n;
			has[r] = 1;
			break;
		}
		case PLAN_REPLICATE: {
			int64_t start = it->step * it->batch;

			if (start >= len)
				break;
			p = start;
			n = len - start < it->batch ? len - start : it->batch;
			has[r] = 1;
			break;
		}
		case PLAN_FN: {
			int64_t start = (it->step * it->R + r) * it->batch;

			if (start >= len)
				break;
			p = start;
			n = len - start < it->batch ? len - start : it->batch;
			has[r] = 1;
			break;
		}
		}
		rc = fill(it, r, p, n, &b[r]);
	}
	it->step++;
	return rc;
}

int dvar_input_iterator_next(dvar_input_iterator *it, dvar_replica_batch *batches,
                             int *has_value)
{
	int rc = DVAR_OK, any = 0, *has = NULL;

	if (!it || !batches || !has_value)
		return dvar_error_set(DVAR_EINVAL, "dvar_input_iterator_next: NULL argument");
	*has_value = 0;
	memset(batches, 0, (size_t)it->R * sizeof *batches);
	if (it->finished)
		return DVAR_OK;
	has = calloc((size_t)it->R, sizeof *has);
	if (!has)
		rc = dvar_error_set(DVAR_ENOMEM, "input iterator: out of memory");
	else
		rc = local_step(it, batches, has);
	for (int r = 0; has && r < it->R; r++)
		any |= has[r];
	free(has);
	if (it->W > 1) {
		/* Every worker tells every other whether any of its replicas has a value. */
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
			rc = dvar_strategy__agree(it->s, rc, "input iterator next");
		} else {
			for (int w = 0; w < it->W; w++) {
				sb[w] = 1;
				flags[w] = (unsigned char)any;
			}
			rc = dvar_strategy__all_to_all(it->s, rc, flags, sb, &recv, rb,
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
		memset(batches, 0, (size_t)it->R * sizeof *batches);
		return rc;
	}
	if (!any) {
		it->finished = 1;
		memset(batches, 0, (size_t)it->R * sizeof *batches);
		return DVAR_OK;
	}
	*has_value = 1;
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
