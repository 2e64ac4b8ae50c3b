/*
 * runtime/variable.c - distributed variables: one component per local
 * replica, read and updated with TensorFlow's two policies. ON_WRITE
 * (mirrored) keeps every component equal by aggregating updates made in
 * replica context; ON_READ (sync-on-read) lets the components differ and
 * aggregates when read across replicas.
 *
 * Every collective step here is one dvar_strategy_run whose replica
 * functions call the replica collectives, so the engine's failure handling
 * applies: a replica that fails makes its peers' collectives fail instead of
 * hanging. A worker that fails before its exchange (a bad argument) still
 * joins with a run that fails at once (fail_collective), for the same reason.
 *
 * Ownership: a variable owns its name, the component names and the component
 * buffers; it borrows the strategy, which must outlive it. In replica context
 * a replica touches only its own component; everything else runs on the
 * strategy's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/device.h"
#include "runtime/narrow.h"
#include "runtime/runtime.h"
#include "runtime/track.h"

#define NAME_MAX_BYTES 1024

/* Cross-replica ON_READ reads move through the collectives in pieces of at
 * most this size, so that replicas other than the one writing the result
 * need only a piece of scratch each, not a whole copy. */
#define READ_PIECE_BYTES ((size_t)16 << 20)

struct dvar_variable {
	dvar_strategy *s;
	char *name;
	int dtype;
	dvar_shape shape;
	int sync; /* ON_WRITE or ON_READ */
	int agg;
	size_t esize;     /* bytes per element */
	size_t count;     /* elements */
	size_t nbytes;
	size_t rows;      /* shape.dims[0]; 0 for a scalar */
	size_t row_count; /* elements per row */
	int replicas;     /* R */
	int workers;      /* W */
	int worker;
	int num_replicas; /* N = R * W */
	char **names;     /* R component names */
	unsigned char **comp; /* R buffers of nbytes (at least one byte each) */
	dvar_track track; /* rows changed since each root's last checkpoint */
};

enum update_kind { UPDATE_ASSIGN, UPDATE_ADD, UPDATE_SUB };

static const char *const update_names[] = { "assign", "assign_add", "assign_sub" };
static const char *const scatter_names[] = { "scatter_update", "scatter_add", "scatter_sub",
	                                     "scatter_min", "scatter_max" };

/* Broadcasts and gathers only move bytes: bool travels as uint8, its
 * same-sized twin, which no collective refuses. */
static int transfer_dtype(int dtype)
{
	return dtype == DVAR_BOOL ? DVAR_UINT8 : dtype;
}

/* ---------------------------------------------------------------- failing together */

struct failure {
	int code;
	const char *message;
};

static int fail_replica(dvar_replica *ctx, void *arg)
{
	const struct failure *f = arg;

	if (dvar_replica_local_id(ctx) != 0)
		return DVAR_OK;
	return dvar_error_set(f->code, "%s", f->message);
}

/*
 * This worker failed a collective call before its exchange. Its peers are
 * (or will be) inside the matching run; join it with a run that fails, so
 * that theirs fails too, and keep this worker's own message.
 */
static int fail_collective(dvar_strategy *s, int code)
{
	char message[DVAR_ERROR_MESSAGE_MAX];
	struct failure f = { code, message };

	if (dvar_strategy_num_workers(s) <= 1)
		return code;
	snprintf(message, sizeof message, "%s", dvar_error_last()->message);
	(void)dvar_strategy_run(s, fail_replica, &f);
	return dvar_error_set(code, "%s", message);
}

/* ---------------------------------------------------------------- creation */

static int check_spec(const dvar_variable_spec *spec, int *sync, uint64_t *nbytes)
{
	const char *name = spec->name;
	dvar_shape shape;
	int rc;

	if (dvar_check_version("dvar_variable_spec", spec->version, DVAR_VARIABLE_SPEC_VERSION))
		return DVAR_EINVAL;
	if (!name || name[0] == '\0' || strnlen(name, NAME_MAX_BYTES + 1) > NAME_MAX_BYTES)
		return dvar_error_set(DVAR_EINVAL, "variable name must be 1 to %d bytes", NAME_MAX_BYTES);
	if (dvar_dtype_size(spec->dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': unknown dtype %d", name, spec->dtype);
	if ((rc = dvar_shape_init(&shape, spec->shape.rank, spec->shape.dims)) != DVAR_OK ||
	    (rc = dvar_shape_num_bytes(&shape, spec->dtype, nbytes)) != DVAR_OK)
		return dvar_error_prefix("variable '%s'", name);
	if ((uint64_t)(size_t)*nbytes != *nbytes)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': too large for this machine", name);

	/* TF's validate_synchronization_aggregation_trainable, in its order. */
	*sync = spec->synchronization;
	if (*sync == DVAR_SYNC_NONE)
		return dvar_error_set(DVAR_EINVAL,
		                      "`NONE` variable synchronization mode is not supported with "
		                      "tf.distribute strategy. Please change the `synchronization` for "
		                      "variable: %s",
		                      name);
	if (*sync != DVAR_SYNC_AUTO && *sync != DVAR_SYNC_ON_WRITE && *sync != DVAR_SYNC_ON_READ)
		return dvar_error_set(DVAR_EINVAL,
		                      "Invalid variable synchronization mode: %d for variable: %s", *sync,
		                      name);
	if (*sync == DVAR_SYNC_AUTO)
		*sync = DVAR_SYNC_ON_WRITE;
	if (spec->aggregation < DVAR_AGG_NONE || spec->aggregation > DVAR_AGG_ONLY_FIRST_REPLICA)
		return dvar_error_set(DVAR_EINVAL,
		                      "Invalid variable aggregation mode: %d for variable: %s",
		                      spec->aggregation, name);
	/* DistributedVariable.__init__ */
	if (spec->aggregation == DVAR_AGG_MEAN && !dvar_kernel_is_floating(spec->dtype))
		return dvar_error_set(DVAR_EINVAL,
		                      "variable '%s': creating distributed tf.Variable with "
		                      "aggregation=MEAN and a non-floating dtype is not supported, please "
		                      "use a different aggregation or dtype",
		                      name);
	return DVAR_OK;
}

static int alloc_variable(dvar_variable **out, dvar_strategy *s, const dvar_variable_spec *spec,
                          int sync, size_t nbytes)
{
	dvar_variable *v = calloc(1, sizeof *v);
	size_t name_len = strlen(spec->name);

	if (!v)
		return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", spec->name);
	*out = v;
	v->s = s;
	v->dtype = spec->dtype;
	dvar_shape_init(&v->shape, spec->shape.rank, spec->shape.dims);
	v->sync = sync;
	v->agg = spec->aggregation;
	v->esize = dvar_dtype_size(v->dtype);
	v->nbytes = nbytes;
	v->count = nbytes / v->esize;
	v->rows = v->shape.rank > 0 ? (size_t)v->shape.dims[0] : 0;
	v->row_count = 1;
	for (int d = 1; d < v->shape.rank; d++)
		v->row_count *= (size_t)v->shape.dims[d];
	v->replicas = dvar_strategy_local_replicas(s);
	v->workers = dvar_strategy_num_workers(s);
	v->worker = dvar_strategy_worker_id(s);
	v->num_replicas = dvar_strategy_num_replicas_in_sync(s);

	v->name = malloc(name_len + 1);
	v->names = calloc((size_t)v->replicas, sizeof *v->names);
	v->comp = calloc((size_t)v->replicas, sizeof *v->comp);
	if (!v->name || !v->names || !v->comp)
		return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", spec->name);
	if (dvar_track_init(&v->track, v->rows) != DVAR_OK)
		return dvar_error_prefix("variable '%s'", spec->name);
	memcpy(v->name, spec->name, name_len + 1);
	for (int i = 0; i < v->replicas; i++) {
		/* "w", "w/replica_1", ...: MirroredStrategy's names on each worker. */
		size_t cap = name_len + 32;

		v->names[i] = malloc(cap);
		/* Zeros are the default initial value; on the host, page-aligned
		 * so that a save writes it in place. */
		v->comp[i] = dvar_mem_alloc(s, i, nbytes, 1);
		if (!v->names[i] || !v->comp[i])
			return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", spec->name);
		if (i == 0)
			memcpy(v->names[i], spec->name, name_len + 1);
		else
			snprintf(v->names[i], cap, "%s/replica_%d", spec->name, i);
	}
	return DVAR_OK;
}

/* Fill the primary with the initial value; only worker 0's counts. */
static int initial_value(dvar_variable *v, const dvar_variable_spec *spec)
{
	int rc;

	void *host;

	if (spec->initial_value)
		return v->nbytes ? dvar_mem_copy(v->s, 0, v->comp[0], spec->initial_value, v->nbytes)
		                 : DVAR_OK;
	if (!spec->init || v->worker != 0)
		return DVAR_OK;
	/* The initializer writes host memory; a GPU component gets a copy. */
	host = dvar_mem_on_device(v->s) ? malloc(v->nbytes ? v->nbytes : 1) : v->comp[0];
	if (!host)
		return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", v->name);
	dvar_error_clear();
	rc = spec->init(spec->init_arg, 0, v->dtype, &v->shape, host);
	if (host != v->comp[0]) {
		int crc = rc == DVAR_OK ? dvar_mem_copy(v->s, 0, v->comp[0], host, v->nbytes) : DVAR_OK;

		free(host);
		if (crc != DVAR_OK)
			return crc;
	}
	if (rc == DVAR_OK)
		return DVAR_OK;
	if (rc > 0)
		rc = DVAR_ERROR;
	if (dvar_error_last()->message[0] == '\0')
		return dvar_error_set(rc, "variable '%s': the initializer failed (%s)", v->name,
		                      dvar_strerror(rc));
	return dvar_error_prefix("variable '%s': the initializer failed", v->name);
}

/* What every worker must agree on: synchronization, aggregation, dtype,
 * shape and (a checksum of) the name. */
#define SPEC_WORDS (5 + DVAR_MAX_RANK)

static void describe(const dvar_variable *v, int64_t *d)
{
	d[0] = v->sync;
	d[1] = v->agg;
	d[2] = v->dtype;
	d[3] = v->shape.rank;
	d[4] = (int64_t)dvar_crc32c(v->name, strlen(v->name));
	for (int i = 0; i < DVAR_MAX_RANK; i++)
		d[5 + i] = i < v->shape.rank ? v->shape.dims[i] : -1;
}

static int create_replica(dvar_replica *ctx, void *arg)
{
	dvar_variable *v = arg;
	int local = dvar_replica_local_id(ctx);
	int rc;

	if (v->workers > 1) {
		/* MAX of (d, -d) is (max, -min): equal halves mean every worker agrees. */
		int64_t d[2 * SPEC_WORDS];

		describe(v, d);
		for (int i = 0; i < SPEC_WORDS; i++)
			d[SPEC_WORDS + i] = -d[i];
		rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_INT64, d, d, 2 * SPEC_WORDS);
		if (rc != DVAR_OK)
			return rc;
		for (int i = 0; i < SPEC_WORDS; i++)
			if (d[i] != -d[SPEC_WORDS + i])
				return dvar_error_set(DVAR_EINVAL,
				                      "variable '%s': the workers create it with different "
				                      "specs (synchronization, aggregation, dtype, shape or "
				                      "name)",
				                      v->name);
	}
	if (v->count == 0)
		return DVAR_OK;
	/* The root, replica 0, is worker 0's primary: it holds the initial value. */
	return dvar_replica_broadcast(ctx, 0, transfer_dtype(v->dtype), v->comp[local], v->count);
}

int dvar_variable_spec_init(dvar_variable_spec *spec, unsigned int version)
{
	static const dvar_variable_spec init = DVAR_VARIABLE_SPEC_INIT;
	return dvar_options_init(spec, sizeof *spec, &init, "dvar_variable_spec", version,
	                         DVAR_VARIABLE_SPEC_VERSION);
}

int dvar_variable_create(dvar_variable **out, dvar_strategy *s, const dvar_variable_spec *spec)
{
	dvar_variable *v = NULL;
	uint64_t nbytes = 0;
	int sync = 0;
	int rc;

	if (out)
		*out = NULL;
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_variable_create: strategy is NULL");
	if (!out || !spec)
		rc = dvar_error_set(DVAR_EINVAL, "dvar_variable_create: %s is NULL", out ? "spec" : "out");
	else
		rc = check_spec(spec, &sync, &nbytes);
	if (rc == DVAR_OK)
		rc = alloc_variable(&v, s, spec, sync, (size_t)nbytes);
	if (rc == DVAR_OK)
		rc = initial_value(v, spec);
	if (rc != DVAR_OK) {
		dvar_variable_free(v);
		return fail_collective(s, rc);
	}
	rc = dvar_strategy_run(s, create_replica, v);
	if (rc != DVAR_OK) {
		dvar_error_prefix("creating variable '%s'", v->name);
		dvar_variable_free(v);
		return rc;
	}
	*out = v;
	return DVAR_OK;
}

void dvar_variable_free(dvar_variable *v)
{
	if (!v)
		return;
	/* A pending save may still be reading the components. */
	dvar_track_wait(&v->track);
	for (int i = 0; i < v->replicas; i++) {
		if (v->names)
			free(v->names[i]);
		if (v->comp)
			dvar_mem_free(v->s, i, v->comp[i]);
	}
	free(v->names);
	free(v->comp);
	free(v->name);
	dvar_track_fini(&v->track);
	free(v);
}

dvar_track *dvar_variable_track(dvar_variable *v)
{
	return &v->track;
}

/* ---------------------------------------------------------------- accessors */

const char *dvar_variable_name(const dvar_variable *v)
{
	return v ? v->name : NULL;
}

const char *dvar_variable_component_name(const dvar_variable *v, int local)
{
	if (!v || local < 0 || local >= v->replicas)
		return NULL;
	return v->names[local];
}

int dvar_variable_dtype(const dvar_variable *v)
{
	return v ? v->dtype : 0;
}

const dvar_shape *dvar_variable_shape(const dvar_variable *v)
{
	return v ? &v->shape : NULL;
}

int dvar_variable_synchronization(const dvar_variable *v)
{
	return v ? v->sync : 0;
}

int dvar_variable_aggregation(const dvar_variable *v)
{
	return v ? v->agg : 0;
}

int dvar_variable_trainable(const dvar_variable *v)
{
	return v && v->sync != DVAR_SYNC_ON_READ;
}

dvar_strategy *dvar_variable_strategy(const dvar_variable *v)
{
	return v ? v->s : NULL;
}

size_t dvar_variable_nbytes(const dvar_variable *v)
{
	return v ? v->nbytes : 0;
}

/* ---------------------------------------------------------------- checks */

/* what: "read", "assign", "scatter_add", ... */
static int check_replica(const dvar_variable *v, const dvar_replica *ctx, const char *what)
{
	if (dvar_replica_strategy(ctx) != v->s)
		return dvar_error_set(DVAR_EINVAL,
		                      "%s of variable '%s': the replica belongs to another strategy",
		                      what, v->name);
	return DVAR_OK;
}

static int check_dst(const dvar_variable *v, const void *dst, size_t dst_bytes)
{
	if (!dst && v->nbytes)
		return dvar_error_set(DVAR_EINVAL, "reading variable '%s': dst is NULL", v->name);
	if (dst_bytes < v->nbytes)
		return dvar_error_set(DVAR_ESHAPE,
		                      "reading variable '%s': dst holds %zu bytes, the value needs %zu",
		                      v->name, dst_bytes, v->nbytes);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- reads */

struct read_job {
	dvar_variable *v;
	dvar_reduce_op op;
	unsigned char *dst;
};

/*
 * Local replica 0 receives the result straight into dst; the others need a
 * destination too, so they receive each piece into scratch and drop it. On
 * GPUs the pieces travel in local replica 0's GPU memory: a host dst, or
 * another GPU's, gets each piece copied from scratch.
 */
static int read_replica(dvar_replica *ctx, void *arg)
{
	const struct read_job *job = arg;
	const dvar_variable *v = job->v;
	dvar_strategy *s = v->s;
	int local = dvar_replica_local_id(ctx);
	int dev = dvar_mem_on_device(s);
	int direct = local == 0 && dvar_mem_is_local(s, 0, job->dst);
	size_t piece = READ_PIECE_BYTES / v->esize;
	unsigned char *scratch = NULL;
	int rc = DVAR_OK;

	if (piece > v->count)
		piece = v->count;
	if (!direct) {
		scratch = dev ? dvar_mem_alloc(s, local, piece * v->esize, 0) : malloc(piece * v->esize);
		if (!scratch)
			return dvar_error_set(DVAR_ENOMEM, "reading variable '%s': out of memory", v->name);
	}
	for (size_t off = 0; off < v->count && rc == DVAR_OK; off += piece) {
		size_t n = v->count - off < piece ? v->count - off : piece;
		unsigned char *out = direct ? job->dst + off * v->esize : scratch;

		if (v->agg == DVAR_AGG_ONLY_FIRST_REPLICA) {
			if (dvar_replica_id(ctx) == 0)
				rc = dvar_mem_copy(s, local, out, v->comp[0] + off * v->esize, n * v->esize);
			if (rc == DVAR_OK)
				rc = dvar_replica_broadcast(ctx, 0, transfer_dtype(v->dtype), out, n);
		} else {
			rc = dvar_replica_all_reduce(ctx, job->op, v->dtype,
			                             v->comp[local] + off * v->esize, out, n);
		}
		if (rc == DVAR_OK && local == 0 && !direct)
			rc = dvar_mem_copy(s, local, job->dst + off * v->esize, scratch, n * v->esize);
	}
	if (dev)
		dvar_mem_free(s, local, scratch);
	else
		free(scratch);
	return rc;
}

/* OnReadPolicy._get_cross_replica: the aggregate over all N replicas. */
static int read_on_read(dvar_variable *v, void *dst, size_t dst_bytes)
{
	struct read_job job = { v, DVAR_REDUCE_SUM, dst };
	int rc;

	/* ReduceOp.from_variable_aggregation; the same on every worker. */
	if (v->agg == DVAR_AGG_NONE)
		return dvar_error_set(DVAR_EINVAL,
		                      "reading variable '%s': Could not convert from "
		                      "`tf.VariableAggregation` VariableAggregation.NONE "
		                      "to`tf.distribute.ReduceOp` type",
		                      v->name);
	if (v->agg != DVAR_AGG_ONLY_FIRST_REPLICA) {
		char what[DVAR_ERROR_MESSAGE_MAX];

		snprintf(what, sizeof what, "reading variable '%s' (aggregation %s)", v->name,
		         v->agg == DVAR_AGG_SUM ? "SUM" : "MEAN");
		if ((rc = dvar_kernel_check(v->dtype, DVAR_KOP_ADD, what)) != DVAR_OK)
			return rc;
	}
	if ((rc = check_dst(v, dst, dst_bytes)) != DVAR_OK)
		return fail_collective(v->s, rc);
	/* TF's testUnsaveable: SUM reads always mark, MEAN reads only under
	 * the multi-worker (collective) strategy. */
	if (v->agg == DVAR_AGG_SUM || (v->agg == DVAR_AGG_MEAN && v->workers > 1))
		dvar_strategy_mark_unsaveable(v->s, dvar_unsaveable_reason);
	if (v->count == 0)
		return DVAR_OK;
	if (v->agg == DVAR_AGG_ONLY_FIRST_REPLICA && v->workers == 1)
		return dvar_mem_copy(v->s, 0, dst, v->comp[0], v->nbytes);
	job.op = v->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN : DVAR_REDUCE_SUM;
	rc = dvar_strategy_run(v->s, read_replica, &job);
	if (rc != DVAR_OK)
		return dvar_error_prefix("reading variable '%s'", v->name);
	return DVAR_OK;
}

int dvar_variable_read(dvar_variable *v, dvar_replica *ctx, void *dst, size_t dst_bytes)
{
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_variable_read: variable is NULL");
	if (!ctx && v->sync == DVAR_SYNC_ON_READ)
		return read_on_read(v, dst, dst_bytes);
	if (ctx && (rc = check_replica(v, ctx, "read")) != DVAR_OK)
		return rc;
	if ((rc = check_dst(v, dst, dst_bytes)) != DVAR_OK)
		return rc;
	/* Replica context: this replica's own component; ON_WRITE across
	 * replicas: the primary. */
	if (v->nbytes) {
		int local = ctx ? dvar_replica_local_id(ctx) : 0;

		return dvar_mem_copy(v->s, local, dst, v->comp[local], v->nbytes);
	}
	return DVAR_OK;
}

int dvar_variable_read_local(dvar_variable *v, int local, void *dst, size_t dst_bytes)
{
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_variable_read_local: variable is NULL");
	if (local < 0 || local >= v->replicas)
		return dvar_error_set(DVAR_EINVAL,
		                      "reading variable '%s': local replica %d is out of range [0, %d)",
		                      v->name, local, v->replicas);
	if ((rc = check_dst(v, dst, dst_bytes)) != DVAR_OK)
		return rc;
	return v->nbytes ? dvar_mem_copy(v->s, local, dst, v->comp[local], v->nbytes) : DVAR_OK;
}

const void *dvar_variable_component(const dvar_variable *v, int local)
{
	return v->comp[local];
}

/* ---------------------------------------------------------------- the SUM split */

#define SPLIT_SIGNED(T) \
	do { \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			int64_t q, r; \
			memcpy(&x, src + i * sizeof x, sizeof x); \
			q = (int64_t)x / n; \
			r = (int64_t)x % n; \
			if (r < 0) { \
				q--; \
				r += n; \
			} \
			x = (T)(q + (id < r)); \
			memcpy(dst + i * sizeof x, &x, sizeof x); \
		} \
	} while (0)

#define SPLIT_UNSIGNED(T) \
	do { \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			uint64_t q, r; \
			memcpy(&x, src + i * sizeof x, sizeof x); \
			q = (uint64_t)x / (uint64_t)n; \
			r = (uint64_t)x % (uint64_t)n; \
			x = (T)(q + ((uint64_t)id < r)); \
			memcpy(dst + i * sizeof x, &x, sizeof x); \
		} \
	} while (0)

int dvar_variable_split_sum(int dtype, const void *total, void *part, size_t count, int replica_id,
                             int num_replicas)
{
	const unsigned char *src = total;
	unsigned char *dst = part;
	int64_t n = num_replicas;
	int64_t id = replica_id;

	if (num_replicas < 1 || replica_id < 0 || replica_id >= num_replicas)
		return dvar_error_set(DVAR_EINVAL, "split_sum: replica %d of %d is out of range",
		                      replica_id, num_replicas);
	if (count && (!total || !part))
		return dvar_error_set(DVAR_EINVAL, "split_sum: NULL buffer");
	if (dvar_kernel_is_floating(dtype)) {
		/* TF: cast(total / N, dtype), the division in the tensor's own
		 * type (float16 and bfloat16 rounded once from float32). */
		if (dst != src)
			memmove(dst, src, count * dvar_dtype_size(dtype));
		dvar_kernel_divide(dtype, dst, count, dvar_divisor_in(dtype, n));
		return DVAR_OK;
	}
	/* Integers: floor division, the remainder handed out one each to the
	 * first replicas, so that the parts add up to total exactly. */
	switch (dtype) {
	case DVAR_INT8: SPLIT_SIGNED(int8_t); break;
	case DVAR_INT16: SPLIT_SIGNED(int16_t); break;
	case DVAR_INT32: SPLIT_SIGNED(int32_t); break;
	case DVAR_INT64: SPLIT_SIGNED(int64_t); break;
	case DVAR_UINT8: SPLIT_UNSIGNED(uint8_t); break;
	case DVAR_UINT16: SPLIT_UNSIGNED(uint16_t); break;
	case DVAR_UINT32: SPLIT_UNSIGNED(uint32_t); break;
	case DVAR_UINT64: SPLIT_UNSIGNED(uint64_t); break;
	default:
		/* TF's truediv refuses bool the same way. */
		return dvar_error_set(DVAR_EINVAL, "a %s value cannot be divided over %d replicas",
		                      dvar_dtype_name(dtype) ? dvar_dtype_name(dtype) : "non-numeric",
		                      num_replicas);
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- dense updates */

/* Apply src (host or device memory) to local replica local's component. */
static int apply_dense(const dvar_variable *v, int local, const void *src, int kind)
{
	if (kind == UPDATE_ASSIGN)
		return dvar_mem_copy(v->s, local, v->comp[local], src, v->nbytes);
	return dvar_mem_apply(v->s, local, v->dtype, kind == UPDATE_ADD ? DVAR_KOP_ADD : DVAR_KOP_SUB,
	                      v->comp[local], src, v->count);
}

/*
 * OnWritePolicy in replica context with SUM, MEAN or ONLY_FIRST_REPLICA
 * (TF's _on_write_update_replica): aggregate, then apply the same bytes on
 * every replica. The aggregate goes through scratch so that a failed
 * collective leaves the component as it was.
 */
static int update_aggregated(dvar_variable *v, dvar_replica *ctx, const void *value, int kind)
{
	int local = dvar_replica_local_id(ctx);
	/* The aggregate lives where the value does: a collective's buffers are
	 * all host or all device memory. */
	int dev = dvar_mem_is_device(v->s, value);
	unsigned char *tmp = dev ? dvar_mem_alloc(v->s, local, v->nbytes, 0) : malloc(v->nbytes);
	int rc = DVAR_OK;

	if (!tmp)
		return dvar_error_set(DVAR_ENOMEM, "%s of variable '%s': out of memory",
		                      update_names[kind], v->name);
	if (v->agg == DVAR_AGG_ONLY_FIRST_REPLICA) {
		if (dvar_replica_id(ctx) == 0)
			rc = dvar_mem_copy(v->s, local, tmp, value, v->nbytes);
		if (rc == DVAR_OK)
			rc = dvar_replica_broadcast(ctx, 0, transfer_dtype(v->dtype), tmp, v->count);
	} else {
		rc = dvar_replica_all_reduce(ctx, v->agg == DVAR_AGG_SUM ? DVAR_REDUCE_SUM : DVAR_REDUCE_MEAN,
		                             v->dtype, value, tmp, v->count);
	}
	if (rc == DVAR_OK)
		rc = apply_dense(v, local, tmp, kind);
	if (rc != DVAR_OK)
		dvar_error_prefix("%s of variable '%s'", update_names[kind], v->name);
	if (dev)
		dvar_mem_free(v->s, local, tmp);
	else
		free(tmp);
	return rc;
}

/* OnReadPolicy.assign in cross-replica context (values_util.
 * on_read_assign_cross_replica): every component, SUM dividing the value
 * over the N replicas so that the sum stays what was assigned. */
static int assign_on_read_cross(dvar_variable *v, const void *value)
{
	int rc = DVAR_OK;

	if (v->agg != DVAR_AGG_SUM) {
		for (int l = 0; l < v->replicas && rc == DVAR_OK; l++)
			rc = apply_dense(v, l, value, UPDATE_ASSIGN);
		return rc;
	}
	/* Checked before the loop so that no component changes on failure. */
	if (v->dtype == DVAR_BOOL)
		return dvar_error_set(DVAR_EINVAL,
		                      "assign of variable '%s': a bool value cannot be divided over the "
		                      "replicas (aggregation SUM)",
		                      v->name);
	for (int l = 0; l < v->replicas; l++)
		if (dvar_mem_split_sum(v->s, l, v->dtype, value, v->comp[l], v->count,
		                       v->worker * v->replicas + l, v->num_replicas) != DVAR_OK)
			return dvar_error_prefix("assign of variable '%s'", v->name);
	return DVAR_OK;
}

/* Cross-replica assign: ON_READ splits SUM over the replicas
 * (on_read_assign_cross_replica); ON_WRITE sets every component. */
static int assign_cross(dvar_variable *v, const void *value)
{
	int rc = DVAR_OK;

	if (v->sync == DVAR_SYNC_ON_READ)
		return assign_on_read_cross(v, value);
	for (int l = 0; l < v->replicas && rc == DVAR_OK; l++)
		rc = apply_dense(v, l, value, UPDATE_ASSIGN);
	return rc;
}

int dvar_variable_restore(dvar_variable *v, const void *value)
{
	if (!v)
		return dvar_error_set(DVAR_EINVAL, "restore: variable is NULL");
	if (!value && v->nbytes)
		return dvar_error_set(DVAR_EINVAL, "restore of variable '%s': value is NULL", v->name);
	dvar_track_all(&v->track);
	return v->nbytes ? assign_cross(v, value) : DVAR_OK;
}

static int update_dense(dvar_variable *v, dvar_replica *ctx, const void *value, int kind)
{
	char what[DVAR_ERROR_MESSAGE_MAX];
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "%s: variable is NULL", update_names[kind]);
	snprintf(what, sizeof what, "%s of variable '%s'", update_names[kind], v->name);
	if (ctx && (rc = check_replica(v, ctx, update_names[kind])) != DVAR_OK)
		return rc;
	if (!value && v->nbytes)
		return dvar_error_set(DVAR_EINVAL, "%s: value is NULL", what);
	/* TF's testUnsaveable: every update marks, whatever the policy. */
	dvar_strategy_mark_unsaveable(v->s, dvar_unsaveable_reason);

	/* values_util.on_read_assign_{add,sub}_cross_replica */
	if (!ctx && v->sync == DVAR_SYNC_ON_READ && kind != UPDATE_ASSIGN && v->agg == DVAR_AGG_SUM)
		return dvar_error_set(DVAR_EINVAL,
		                      "variable '%s': SyncOnReadVariable does not support `%s` in "
		                      "cross-replica context when aggregation is set to "
		                      "`tf.VariableAggregation.SUM`.",
		                      v->name, update_names[kind]);
	if (kind != UPDATE_ASSIGN &&
	    (rc = dvar_kernel_check(v->dtype, kind == UPDATE_ADD ? DVAR_KOP_ADD : DVAR_KOP_SUB,
	                            what)) != DVAR_OK)
		return rc;
	if (v->nbytes == 0)
		return DVAR_OK;
	/* Marked before it is applied: a failure part-way leaves more marked, never less. */
	dvar_track_all(&v->track);
	if (!ctx) {
		if (kind == UPDATE_ASSIGN)
			return assign_cross(v, value);
		/* _update_cross_replica, and ON_READ assign_add/assign_sub without
		 * SUM: the value goes to every component. */
		rc = DVAR_OK;
		for (int l = 0; l < v->replicas && rc == DVAR_OK; l++)
			rc = apply_dense(v, l, value, kind);
		return rc;
	}
	if (v->sync == DVAR_SYNC_ON_READ || v->agg == DVAR_AGG_NONE)
		/* OnReadPolicy._update_replica, and OnWritePolicy._update_replica
		 * with NONE: this replica's own component only. */
		return apply_dense(v, dvar_replica_local_id(ctx), value, kind);
	if (v->agg != DVAR_AGG_ONLY_FIRST_REPLICA) {
		char agg_what[DVAR_ERROR_MESSAGE_MAX + 32];

		snprintf(agg_what, sizeof agg_what, "%s (aggregation %s)", what,
		         v->agg == DVAR_AGG_SUM ? "SUM" : "MEAN");
		if ((rc = dvar_kernel_check(v->dtype, DVAR_KOP_ADD, agg_what)) != DVAR_OK)
			return rc;
	}
	return update_aggregated(v, ctx, value, kind);
}

int dvar_variable_assign(dvar_variable *v, dvar_replica *ctx, const void *value)
{
	return update_dense(v, ctx, value, UPDATE_ASSIGN);
}

int dvar_variable_assign_add(dvar_variable *v, dvar_replica *ctx, const void *delta)
{
	return update_dense(v, ctx, delta, UPDATE_ADD);
}

int dvar_variable_assign_sub(dvar_variable *v, dvar_replica *ctx, const void *delta)
{
	return update_dense(v, ctx, delta, UPDATE_SUB);
}

/* ---------------------------------------------------------------- scatters */

static const dvar_kernel_op scatter_kops[] = { DVAR_KOP_ADD, DVAR_KOP_ADD, DVAR_KOP_SUB,
	                                       DVAR_KOP_MIN, DVAR_KOP_MAX };

/* Everything a scatter can fail on, checked before anything changes. */
static int check_scatter(const dvar_variable *v, dvar_scatter_op op, const int64_t *indices,
                         size_t n, const void *updates)
{
	const char *what = scatter_names[op];
	char kwhat[DVAR_ERROR_MESSAGE_MAX];
	int rc;

	if (v->shape.rank == 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "%s of variable '%s': a scalar has no rows to scatter into", what,
		                      v->name);
	snprintf(kwhat, sizeof kwhat, "%s of variable '%s'", what, v->name);
	if ((rc = dvar_variable_scatter_check(v->dtype, op, kwhat)) != DVAR_OK)
		return rc;
	if (n && (!indices || (!updates && v->row_count)))
		return dvar_error_set(DVAR_EINVAL, "%s: %s is NULL", kwhat,
		                      indices ? "updates" : "indices");
	for (size_t i = 0; i < n; i++)
		if (indices[i] < 0 || (uint64_t)indices[i] >= v->rows)
			return dvar_error_set(DVAR_EINVAL,
			                      "%s: index %lld is out of range [0, %zu) for variable '%s'",
			                      what, (long long)indices[i], v->rows, v->name);
	return DVAR_OK;
}

const char *dvar_variable_scatter_name(dvar_scatter_op op)
{
	if ((int)op < DVAR_SCATTER_UPDATE || (int)op > DVAR_SCATTER_MAX)
		return "?";
	return scatter_names[op];
}

int dvar_variable_scatter_check(int dtype, dvar_scatter_op op, const char *what)
{
	if ((int)op < DVAR_SCATTER_UPDATE || (int)op > DVAR_SCATTER_MAX)
		return dvar_error_set(DVAR_EINVAL, "%s: unknown operator %d", what, (int)op);
	if (op == DVAR_SCATTER_UPDATE)
		return DVAR_OK;
	return dvar_kernel_check(dtype, scatter_kops[op], what);
}

void dvar_variable_scatter_rows(int dtype, dvar_scatter_op op, void *dst, size_t row_elems,
                                 const int64_t *indices, size_t n, const void *updates)
{
	size_t row_bytes = row_elems * dvar_dtype_size(dtype);
	const unsigned char *src = updates;

	if (row_bytes == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned char *row = (unsigned char *)dst + (size_t)indices[i] * row_bytes;

		if (op == DVAR_SCATTER_UPDATE)
			memcpy(row, src + i * row_bytes, row_bytes);
		else
			dvar_kernel_apply(dtype, scatter_kops[op], row, src + i * row_bytes, row_elems);
	}
}

/* Apply n rows to local replica local's component, in order
 * (dvar_variable_scatter_rows), marking them changed. */
static int scatter_rows(dvar_variable *v, int local, dvar_scatter_op op,
                        const int64_t *indices, size_t n, const void *updates)
{
	dvar_track_rows(&v->track, indices, n);
	return dvar_mem_scatter_rows(v->s, local, v->dtype, op, v->comp[local], v->row_count,
	                             indices, n, updates);
}

/*
 * Every replica says whether its checks passed and how many rows it brings.
 * A failure anywhere fails the scatter on every replica before any
 * component changes. On success, counts[r] is replica r's row count.
 */
static int agree_scatter(dvar_variable *v, dvar_replica *ctx, dvar_scatter_op op, int local_rc,
                         size_t n, int64_t *counts, int64_t *all)
{
	int64_t mine[2] = { local_rc, (int64_t)n };
	dvar_shape shape = { .rank = 1, .dims = { 2 } };
	char message[DVAR_ERROR_MESSAGE_MAX];
	int rc;

	/* This replica's own failure is what it reports, whatever the exchange
	 * leaves in the error record. */
	if (local_rc != DVAR_OK)
		snprintf(message, sizeof message, "%s", dvar_error_last()->message);
	rc = dvar_replica_all_gather(ctx, DVAR_INT64, &shape, mine, 0, all,
	                             2 * (size_t)v->num_replicas * sizeof *all, NULL);
	if (local_rc != DVAR_OK)
		return dvar_error_set(local_rc, "%s", message);
	if (rc != DVAR_OK)
		return dvar_error_prefix("%s of variable '%s'", scatter_names[op], v->name);
	for (int r = 0; r < v->num_replicas; r++) {
		if (all[2 * r] != DVAR_OK)
			return dvar_error_set((int)all[2 * r],
			                      "%s of variable '%s' failed on replica %d (%s)",
			                      scatter_names[op], v->name, r, dvar_strerror((int)all[2 * r]));
		counts[r] = all[2 * r + 1];
	}
	return DVAR_OK;
}

/* Gather (SUM, MEAN) or take replica 0's (ONLY_FIRST_REPLICA) rows, then
 * apply them to this replica's component. */
static int scatter_aggregated(dvar_variable *v, dvar_replica *ctx, dvar_scatter_op op,
                              const int64_t *indices, size_t n, const void *updates,
                              const int64_t *counts)
{
	const char *what = scatter_names[op];
	int local = dvar_replica_local_id(ctx);
	int xdtype = transfer_dtype(v->dtype);
	size_t row_bytes = v->row_count * v->esize;
	size_t total = 0;
	int64_t *idx;
	unsigned char *upd;
	int rc;

	if (v->agg == DVAR_AGG_ONLY_FIRST_REPLICA)
		total = (size_t)counts[0];
	else
		for (int r = 0; r < v->num_replicas; r++)
			total += (size_t)counts[r];
	if (total == 0)
		return DVAR_OK;
	idx = malloc(total * sizeof *idx);
	upd = malloc(row_bytes ? total * row_bytes : 1);
	if (!idx || !upd) {
		free(idx);
		free(upd);
		return dvar_error_set(DVAR_ENOMEM, "%s of variable '%s': out of memory", what, v->name);
	}
	if (v->agg == DVAR_AGG_ONLY_FIRST_REPLICA) {
		if (dvar_replica_id(ctx) == 0) {
			memcpy(idx, indices, total * sizeof *idx);
			if (row_bytes)
				memcpy(upd, updates, total * row_bytes);
		}
		rc = dvar_replica_broadcast(ctx, 0, DVAR_INT64, idx, total);
		if (rc == DVAR_OK && row_bytes)
			rc = dvar_replica_broadcast(ctx, 0, xdtype, upd, total * v->row_count);
	} else {
		/* The replicas' rows concatenated in replica-id order: TF sums
		 * IndexedSlices by concatenating them. */
		static const int64_t none[1] = { 0 };
		dvar_shape ishape = { .rank = 1, .dims = { (int64_t)n } };
		dvar_shape ushape = v->shape;

		ushape.dims[0] = (int64_t)n;
		rc = dvar_replica_all_gather(ctx, DVAR_INT64, &ishape, n ? indices : none, 0, idx,
		                             total * sizeof *idx, NULL);
		if (rc == DVAR_OK && row_bytes)
			rc = dvar_replica_all_gather(ctx, xdtype, &ushape, n ? updates : (const void *)none,
			                             0, upd, total * row_bytes, NULL);
		if (rc == DVAR_OK && v->agg == DVAR_AGG_MEAN)
			dvar_kernel_divide(v->dtype, upd, total * v->row_count, v->num_replicas);
	}
	if (rc == DVAR_OK)
		rc = scatter_rows(v, local, op, idx, total, upd);
	if (rc != DVAR_OK)
		dvar_error_prefix("%s of variable '%s'", what, v->name);
	free(idx);
	free(upd);
	return rc;
}

int dvar_variable_scatter(dvar_variable *v, dvar_replica *ctx, dvar_scatter_op op,
                          const int64_t *indices, size_t n, const void *updates)
{
	int64_t *counts;
	void *host = NULL;
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_variable_scatter: variable is NULL");
	if ((int)op < DVAR_SCATTER_UPDATE || (int)op > DVAR_SCATTER_MAX)
		return dvar_error_set(DVAR_EINVAL, "scatter of variable '%s': unknown operator %d",
		                      v->name, (int)op);
	if (ctx && (rc = check_replica(v, ctx, scatter_names[op])) != DVAR_OK)
		return rc;
	dvar_strategy_mark_unsaveable(v->s, dvar_unsaveable_reason);
	if (v->sync == DVAR_SYNC_ON_READ) {
		if (ctx)
			return dvar_error_set(DVAR_ENOTSUPP,
			                      "variable '%s': Variables with `synchronization=ON_READ` "
			                      "doesn't support `%s`",
			                      v->name, scatter_names[op]);
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "variable '%s': ON_READ variables doesn't support `%s` in cross "
		                      "replica context",
		                      v->name, scatter_names[op]);
	}
	/* TF's MirroredVariable (values.py), in both contexts: a replaced,
	 * smallest or largest row has no SUM or MEAN across replicas. */
	if ((op == DVAR_SCATTER_UPDATE || op == DVAR_SCATTER_MIN || op == DVAR_SCATTER_MAX) &&
	    (v->agg == DVAR_AGG_SUM || v->agg == DVAR_AGG_MEAN))
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "variable '%s': %s is only supported for mirrored variable "
		                      "(variable created within certain `tf.distribute.Strategy` "
		                      "scope) with NONE or `ONLY_FIRST_REPLICA` aggregation, got: "
		                      "VariableAggregation.%s.",
		                      v->name, scatter_names[op],
		                      v->agg == DVAR_AGG_SUM ? "SUM" : "MEAN");
	rc = check_scatter(v, op, indices, n, updates);
	if (!ctx || v->agg == DVAR_AGG_NONE) {
		/* Cross-replica: every component; NONE in replica context: this
		 * replica's own. */
		if (rc != DVAR_OK)
			return rc;
		if (ctx)
			return scatter_rows(v, dvar_replica_local_id(ctx), op, indices, n, updates);
		for (int l = 0; l < v->replicas && rc == DVAR_OK; l++)
			rc = scatter_rows(v, l, op, indices, n, updates);
		return rc;
	}
	/* counts, then the agreement's 2N words. */
	if (!(counts = malloc(3 * (size_t)v->num_replicas * sizeof *counts)))
		return dvar_error_set(DVAR_ENOMEM, "%s of variable '%s': out of memory",
		                      scatter_names[op], v->name);
	/* The rows are gathered in host memory: bring device updates over. */
	if (rc == DVAR_OK && n && v->row_count && dvar_mem_is_device(v->s, updates)) {
		size_t bytes = n * v->row_count * v->esize;

		if (!(host = malloc(bytes)))
			rc = dvar_error_set(DVAR_ENOMEM, "%s of variable '%s': out of memory",
			                    scatter_names[op], v->name);
		else
			rc = dvar_mem_copy(v->s, dvar_replica_local_id(ctx), host, updates, bytes);
		updates = host;
	}
	rc = agree_scatter(v, ctx, op, rc, n, counts, counts + v->num_replicas);
	if (rc == DVAR_OK)
		rc = scatter_aggregated(v, ctx, op, indices, n, updates, counts);
	free(host);
	free(counts);
	return rc;
}
