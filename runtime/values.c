/*
 * runtime/values.c - distributed values (one tensor per local replica) and
 * the cross-replica strategy.reduce and strategy.gather over them.
 *
 * reduce and gather are built on the public API only: a replica function
 * run with dvar_strategy_run, in which each replica takes its component and
 * calls the replica-context collectives; local replica 0 writes the result
 * into the caller's buffer, the others into scratch.
 *
 * Every check whose outcome could differ between replicas or workers (a
 * component never set, its shape, the size of a worker's dst) is made
 * collectively: each replica first contributes a small descriptor (its
 * status, shape and arguments) to an all_gather, so that every replica of
 * every worker sees the same table and takes the same decision. A replica
 * that finds a problem reports it and the others return without moving
 * data; dvar_strategy_run then fails on every worker with that report.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/device.h"
#include "runtime/runtime.h"

typedef struct {
	int set;
	dvar_shape shape;
	void *data; /* NULL when empty */
	size_t bytes;
} component;

struct dvar_values {
	dvar_strategy *s;
	int dtype;
	int R;
	/* Every component holds the same tensor: on the host one shared
	 * buffer, on GPUs a copy per replica (dvar_mem_alloc). */
	int mirrored;
	atomic_int rank; /* -1 until a component is set */
	component *comp; /* R */
};

/* ---------------------------------------------------------------- values */

static int values_alloc(dvar_values **out, dvar_strategy *s, int dtype, const char *what)
{
	dvar_values *v;
	int R;

	if (!out)
		return dvar_error_set(DVAR_EINVAL, "%s: out is NULL", what);
	*out = NULL;
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "%s: strategy is NULL", what);
	if (dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "%s: unknown dtype %d", what, dtype);
	R = dvar_strategy_local_replicas(s);
	v = calloc(1, sizeof *v);
	if (!v || !(v->comp = calloc((size_t)R, sizeof *v->comp))) {
		free(v);
		return dvar_error_set(DVAR_ENOMEM, "%s: out of memory", what);
	}
	v->s = s;
	v->dtype = dtype;
	v->R = R;
	atomic_init(&v->rank, -1);
	*out = v;
	return DVAR_OK;
}

/* The bytes of a dense tensor of shape, checked. */
static int shape_bytes(const dvar_shape *shape, int dtype, size_t *out, const char *what)
{
	uint64_t bytes;
	dvar_shape check;
	int rc;

	if (!shape)
		return dvar_error_set(DVAR_EINVAL, "%s: shape is NULL", what);
	if ((rc = dvar_shape_init(&check, shape->rank, shape->dims)) != DVAR_OK ||
	    (rc = dvar_shape_num_bytes(shape, dtype, &bytes)) != DVAR_OK)
		return dvar_error_prefix("%s", what);
	if (bytes > SIZE_MAX)
		return dvar_error_set(DVAR_EINVAL, "%s: %llu bytes do not fit in memory", what,
		                      (unsigned long long)bytes);
	*out = (size_t)bytes;
	return DVAR_OK;
}

int dvar_values_new(dvar_values **out, dvar_strategy *s, int dtype)
{
	return values_alloc(out, s, dtype, "values_new");
}

int dvar_values_new_mirrored(dvar_values **out, dvar_strategy *s, int dtype,
                             const dvar_shape *shape, const void *data)
{
	dvar_values *v;
	size_t bytes = 0;
	void *copy = NULL;
	int rc;

	if (out)
		*out = NULL;
	if ((rc = values_alloc(&v, s, dtype, "values_new_mirrored")) != DVAR_OK)
		return rc;
	if ((rc = shape_bytes(shape, dtype, &bytes, "values_new_mirrored")) != DVAR_OK)
		goto fail;
	if (bytes > 0 && !data) {
		rc = dvar_error_set(DVAR_EINVAL, "values_new_mirrored: data is NULL");
		goto fail;
	}
	/* The components never change, so on the host they share one copy. */
	for (int i = 0; i < v->R; i++) {
		if (bytes > 0 && (i == 0 || dvar_mem_on_device(s))) {
			if (!(copy = dvar_mem_alloc(s, i, bytes, 0))) {
				rc = dvar_error_prefix("values_new_mirrored (%zu bytes)", bytes);
				goto fail;
			}
			v->comp[i].data = copy;
			if ((rc = dvar_mem_copy(s, i, copy, data, bytes)) != DVAR_OK)
				goto fail;
		}
		v->comp[i].set = 1;
		v->comp[i].shape = *shape;
		v->comp[i].data = copy;
		v->comp[i].bytes = bytes;
	}
	v->mirrored = 1;
	atomic_store(&v->rank, shape->rank);
	*out = v;
	return DVAR_OK;
fail:
	dvar_values_free(v);
	return rc;
}

void dvar_values_free(dvar_values *v)
{
	if (!v)
		return;
	for (int i = 0; i < v->R; i++)
		if (i == 0 || !v->mirrored || dvar_mem_on_device(v->s))
			dvar_mem_free(v->s, i, v->comp[i].data);
	free(v->comp);
	free(v);
}

int dvar_values_set(dvar_values *v, int local, const dvar_shape *shape, const void *data)
{
	component *c;
	size_t bytes = 0;
	void *copy = NULL;
	int rank, rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "values_set: values is NULL");
	if (v->mirrored)
		return dvar_error_set(
		        DVAR_EINVAL,
		        "values_set: a mirrored value's components cannot be set one by one");
	if (local < 0 || local >= v->R)
		return dvar_error_set(DVAR_EINVAL,
		                      "values_set: local replica %d is out of range [0, %d)", local,
		                      v->R);
	if ((rc = shape_bytes(shape, v->dtype, &bytes, "values_set")) != DVAR_OK)
		return rc;
	if (bytes > 0 && !data)
		return dvar_error_set(DVAR_EINVAL, "values_set: data is NULL");
	/* The first component set fixes the rank; the others must follow it. */
	rank = -1;
	if (!atomic_compare_exchange_strong(&v->rank, &rank, shape->rank) && rank != shape->rank) {
		char text[128];
		dvar_shape_format(shape, text, sizeof text);
		return dvar_error_set(DVAR_ESHAPE,
		                      "values_set: component %d has shape %s of rank %d, but the "
		                      "value's components have rank %d",
		                      local, text, (int)shape->rank, rank);
	}
	c = &v->comp[local];
	/* A component of the same size is overwritten where it is: a value set
	 * every step costs a copy, not an allocation (fresh pages to fault in;
	 * on a GPU a cudaMalloc, and a cudaFree that waits for the device). A
	 * device copy refuses bad pointers before it moves a byte; only a
	 * broken device, which fails every later call too, stops one midway. */
	if (bytes > 0 && bytes == c->bytes && c->data) {
		if ((rc = dvar_mem_copy(v->s, local, c->data, data, bytes)) != DVAR_OK)
			return rc;
		c->shape = *shape;
		return DVAR_OK;
	}
	if (bytes > 0) {
		if (!(copy = dvar_mem_alloc(v->s, local, bytes, 0)))
			return dvar_error_prefix("values_set (%zu bytes)", bytes);
		if ((rc = dvar_mem_copy(v->s, local, copy, data, bytes)) != DVAR_OK) {
			dvar_mem_free(v->s, local, copy);
			return rc;
		}
	}
	dvar_mem_free(v->s, local, c->data);
	c->data = copy;
	c->bytes = bytes;
	c->shape = *shape;
	c->set = 1;
	return DVAR_OK;
}

int dvar_values_get(const dvar_values *v, int local, dvar_shape *shape, const void **data)
{
	if (!v)
		return dvar_error_set(DVAR_EINVAL, "values_get: values is NULL");
	if (local < 0 || local >= v->R)
		return dvar_error_set(DVAR_EINVAL,
		                      "values_get: local replica %d is out of range [0, %d)", local,
		                      v->R);
	if (!v->comp[local].set)
		return dvar_error_set(DVAR_EINVAL, "values_get: component %d was never set", local);
	if (shape)
		*shape = v->comp[local].shape;
	if (data)
		*data = v->comp[local].data;
	return DVAR_OK;
}

int dvar_values_dtype(const dvar_values *v)
{
	return v ? v->dtype : 0;
}

int dvar_values_is_mirrored(const dvar_values *v)
{
	return v ? v->mirrored : 0;
}

int dvar_values_from_function(dvar_values **out, dvar_strategy *s, int dtype, dvar_value_fn fn,
                              void *arg)
{
	dvar_values *v;
	int R, W, worker, rc;

	if (out)
		*out = NULL;
	if ((rc = values_alloc(&v, s, dtype, "values_from_function")) != DVAR_OK)
		return rc;
	if (!fn) {
		dvar_values_free(v);
		return dvar_error_set(DVAR_EINVAL, "values_from_function: fn is NULL");
	}
	R = v->R;
	W = dvar_strategy_num_workers(s);
	worker = dvar_strategy_worker_id(s);
	for (int local = 0; local < R; local++) {
		int id = worker * R + local;

		dvar_error_clear();
		rc = fn(v, local, id, R * W, arg);
		if (rc != DVAR_OK) {
			if (dvar_error_last()->code == DVAR_OK)
				dvar_error_set(rc, "%s", dvar_strerror(rc));
			dvar_error_prefix("values_from_function: replica %d (local %d)", id, local);
			dvar_values_free(v);
			return rc;
		}
		if (!v->comp[local].set) {
			dvar_values_free(v);
			return dvar_error_set(
			        DVAR_EINVAL,
			        "values_from_function: the function left the component of "
			        "replica %d (local %d) unset",
			        id, local);
		}
	}
	*out = v;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- collective plan */

/*
 * What each replica contributes before any data moves. int64 fields so that
 * the table travels as one all_gather of int64.
 */
enum {
	D_STATUS, /* 0, or the code of the replica's own failure */
	D_DTYPE,
	D_OP, /* reduce: the dvar_reduce_op; gather: -1 */
	D_AXIS,
	D_DST_BYTES, /* its worker's dst_bytes (capped at INT64_MAX) */
	D_MIRRORED, /* 1 when its value is mirrored */
	D_RANK,
	D_DIMS, /* DVAR_MAX_RANK of them */
	D_COUNT = D_DIMS + DVAR_MAX_RANK
};

typedef struct {
	const char *what; /* "reduce" or "gather" */
	int is_reduce;
	dvar_strategy *s;
	const dvar_values *v;
	int dtype; /* v's, or 0 when v is NULL */
	int op;    /* reduce: the dvar_reduce_op; gather: -1 */
	int axis;       /* counted from 0: a negative one is normalized by cross_run */
	int axis_given; /* as the caller passed it, for messages */
	void *dst;
	size_t dst_bytes;
	/* Written by local replica 0 only; read after the run. */
	int have_shape;
	dvar_shape out_shape;
} cross_call;

/* The replica's own checks; a failure is recorded as the thread's error. */
static int check_local(const cross_call *c, int local, const component **comp)
{
	const dvar_values *v = c->v;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "%s: values is NULL", c->what);
	if (v->s != c->s)
		return dvar_error_set(DVAR_EINVAL, "%s: the value belongs to another strategy",
		                      c->what);
	if (c->is_reduce) {
		int rc;

		if (c->op != DVAR_REDUCE_SUM && c->op != DVAR_REDUCE_MEAN &&
		    c->op != DVAR_REDUCE_MIN && c->op != DVAR_REDUCE_MAX)
			return dvar_error_set(DVAR_EINVAL, "%s: unknown reduce op %d", c->what,
			                      c->op);
		if ((rc = dvar_kernel_check(v->dtype, dvar_kernel_op_of(c->op), c->what)) != DVAR_OK)
			return rc;
	}
	if (!v->comp[local].set)
		return dvar_error_set(DVAR_EINVAL, "%s: component %d was never set", c->what,
		                      local);
	*comp = &v->comp[local];
	if (c->axis != DVAR_AXIS_NONE && (c->axis < 0 || c->axis >= (*comp)->shape.rank)) {
		char text[128];
		dvar_shape_format(&(*comp)->shape, text, sizeof text);
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: axis %d is out of range for component %d of shape %s",
		                      c->what, c->axis_given, local, text);
	}
	if (!c->is_reduce && c->axis == DVAR_AXIS_NONE)
		return dvar_error_set(DVAR_EINVAL, "%s: needs an axis", c->what);
	if (!c->dst && c->dst_bytes > 0)
		return dvar_error_set(DVAR_EINVAL, "%s: dst is NULL", c->what);
	return DVAR_OK;
}

static void desc_shape(const int64_t *d, dvar_shape *out)
{
	memset(out, 0, sizeof *out);
	out->rank = (int32_t)d[D_RANK];
	for (int i = 0; i < out->rank && i < DVAR_MAX_RANK; i++)
		out->dims[i] = d[D_DIMS + i];
}

/* A replica's name for messages, as dvar_strategy_run writes it. */
static void replica_name(char *buf, size_t cap, int id, int R)
{
	snprintf(buf, cap, "replica %d (worker %d, local %d)", id, id / R, id % R);
}

/*
 * The decision every replica takes from the table of descriptors (N rows).
 * Returns DVAR_OK to go on, with the result's shape; or an error code with
 * *report set when this replica is the one to report it (the message is
 * then the thread's error), clear when another replica reports it.
 * *known says whether *result was worked out (it is even when dst is too
 * small).
 */
static int decide(const cross_call *c, const int64_t *table, int N, int R, int id,
                  dvar_shape *result, int64_t *total_rows, int *mirrored, int *report,
                  int *known)
{
	const int64_t *d0 = table;
	int worker = id / R, local = id % R;
	char a[128], b[128], who[64];
	dvar_shape s0, si;
	uint64_t need;
	int rc;

	*report = 0;
	*known = 0;
	/* A replica's own failure: it reports; the others stand by. */
	for (int i = 0; i < N; i++) {
		if (table[(size_t)i * D_COUNT + D_STATUS] != 0) {
			*report = table[(size_t)id * D_COUNT + D_STATUS] != 0;
			return (int)table[(size_t)i * D_COUNT + D_STATUS];
		}
	}
	/* From here on every replica knows the same facts; local replica 0 of
	 * each worker reports them, so that each worker's run has the message. */
	*report = local == 0;
	*mirrored = 1;
	for (int i = 0; i < N; i++)
		if (!table[(size_t)i * D_COUNT + D_MIRRORED])
			*mirrored = 0;
	for (int i = 1; i < N; i++) {
		const int64_t *di = table + (size_t)i * D_COUNT;
		if (di[D_DTYPE] != d0[D_DTYPE] || di[D_OP] != d0[D_OP] ||
		    di[D_AXIS] != d0[D_AXIS]) {
			replica_name(who, sizeof who, i, R);
			return dvar_error_set(
			        DVAR_EINVAL,
			        "%s: %s called with dtype %s, op %s, axis %d, but replica 0 "
			        "with dtype %s, op %s, axis %d",
			        c->what, who, dvar_dtype_name((int)di[D_DTYPE]),
			        dvar_reduce_op_name((int)di[D_OP]), (int)di[D_AXIS],
			        dvar_dtype_name((int)d0[D_DTYPE]), dvar_reduce_op_name((int)d0[D_OP]),
			        (int)d0[D_AXIS]);
		}
	}
	/* Shapes: equal, or equal but for the axis (with the same rank). */
	desc_shape(d0, &s0);
	*total_rows = 0;
	for (int i = 0; i < N; i++) {
		const int64_t *di = table + (size_t)i * D_COUNT;
		int same = di[D_RANK] == d0[D_RANK];

		desc_shape(di, &si);
		for (int k = 0; same && k < si.rank; k++)
			if (k != c->axis && si.dims[k] != s0.dims[k])
				same = 0;
		if (same && c->axis == DVAR_AXIS_NONE)
			same = dvar_shape_equal(&si, &s0);
		if (!same) {
			dvar_shape_format(&si, a, sizeof a);
			dvar_shape_format(&s0, b, sizeof b);
			replica_name(who, sizeof who, i, R);
			if (c->axis == DVAR_AXIS_NONE)
				return dvar_error_set(
				        DVAR_ESHAPE,
				        "%s: components must have one shape across replicas "
				        "with axis NONE: %s has %s, replica 0 has %s",
				        c->what, who, a, b);
			return dvar_error_set(
			        DVAR_ESHAPE,
			        "%s: components must agree in every dimension but axis %d: "
			        "%s has %s, replica 0 has %s",
			        c->what, c->axis, who, a, b);
		}
		if (c->axis != DVAR_AXIS_NONE)
			*total_rows += si.dims[c->axis];
	}
	/* The result's shape. */
	*result = s0;
	if (c->is_reduce && c->axis != DVAR_AXIS_NONE) {
		for (int k = c->axis; k + 1 < result->rank; k++)
			result->dims[k] = result->dims[k + 1];
		result->dims[--result->rank] = 0;
	} else if (!c->is_reduce) {
		result->dims[c->axis] = *total_rows;
	}
	if ((rc = dvar_shape_num_bytes(result, c->dtype, &need)) != DVAR_OK)
		return dvar_error_prefix("%s: the result", c->what);
	*known = 1;
	if (c->is_reduce && c->axis != DVAR_AXIS_NONE && *total_rows == 0 &&
	    c->op != DVAR_REDUCE_SUM)
		return dvar_error_set(
		        DVAR_EINVAL,
		        "%s: %s along axis %d over zero rows in all replicas has no value", c->what,
		        dvar_reduce_op_name(c->op), c->axis);
	/* Each worker's dst: the first too small one reports (from its local 0). */
	for (int w = 0; w * R < N; w++) {
		uint64_t have = (uint64_t)table[(size_t)w * R * D_COUNT + D_DST_BYTES];
		if (have < need) {
			*report = w == worker && local == 0;
			dvar_shape_format(result, a, sizeof a);
			return dvar_error_set(
			        DVAR_ESHAPE,
			        "%s: dst_bytes %llu on worker %d is too small for the result "
			        "%s %s (%llu bytes)",
			        c->what, (unsigned long long)have, w, dvar_dtype_name(c->dtype), a,
			        (unsigned long long)need);
		}
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- reduce */

/* Fill count elements with the op's identity: what a replica with no rows
 * contributes (0 for SUM, the largest value for MIN, the smallest for MAX). */
static void fill_identity(int dtype, int op, void *buf, size_t count)
{
	size_t size = dvar_dtype_size(dtype);
	unsigned char e[8];
	int is_min = op == DVAR_REDUCE_MIN;

	memset(e, 0, sizeof e);
	if (op == DVAR_REDUCE_MIN || op == DVAR_REDUCE_MAX) {
		switch (dtype) {
		case DVAR_UINT8:
		case DVAR_UINT16:
		case DVAR_UINT32:
		case DVAR_UINT64: memset(e, is_min ? 0xff : 0x00, size); break;
		case DVAR_INT8:
		case DVAR_INT16:
		case DVAR_INT32:
		case DVAR_INT64:
			/* little-endian: the top byte carries the sign */
			memset(e, is_min ? 0xff : 0x00, size);
			e[size - 1] = is_min ? 0x7f : 0x80;
			break;
		case DVAR_FLOAT16: {
			uint16_t h = is_min ? 0x7c00 : 0xfc00;
			memcpy(e, &h, 2);
			break;
		}
		case DVAR_BFLOAT16: {
			uint16_t h = is_min ? 0x7f80 : 0xff80;
			memcpy(e, &h, 2);
			break;
		}
		case DVAR_FLOAT32: {
			float f = is_min ? __builtin_inff() : -__builtin_inff();
			memcpy(e, &f, 4);
			break;
		}
		case DVAR_FLOAT64: {
			double f = is_min ? __builtin_inf() : -__builtin_inf();
			memcpy(e, &f, 8);
			break;
		}
		}
	}
	for (size_t i = 0; i < count; i++)
		memcpy((unsigned char *)buf + i * size, e, size);
}

/* Rows combined per kernel call: the accumulator plus this many rows. */
#define ROWS_PER_PASS 31

/*
 * Reduce a component of shape [outer, rows, inner] (row-major around axis)
 * along rows into out ([outer, inner]), left to right. On a GPU both are
 * local's device memory.
 */
static int reduce_along_axis(dvar_strategy *s, int local, int dtype, int op, const void *src,
                             const dvar_shape *shape, int axis, void *out)
{
	dvar_kernel_op kop = dvar_kernel_op_of(op);
	size_t size = dvar_dtype_size(dtype);
	size_t outer = 1, inner = 1, rows = (size_t)shape->dims[axis];
	const void *srcs[ROWS_PER_PASS + 1];
	int rc = DVAR_OK;

	for (int k = 0; k < axis; k++)
		outer *= (size_t)shape->dims[k];
	for (int k = axis + 1; k < shape->rank; k++)
		inner *= (size_t)shape->dims[k];
	if (inner == 0 || outer == 0)
		return DVAR_OK;
	if (rows == 0) {
		void *host = dvar_mem_on_device(s) ? malloc(outer * inner * size) : out;

		if (!host)
			return dvar_error_set(DVAR_ENOMEM, "reduce: out of memory");
		fill_identity(dtype, op, host, outer * inner);
		if (host != out) {
			rc = dvar_mem_copy(s, local, out, host, outer * inner * size);
			free(host);
		}
		return rc;
	}
	for (size_t o = 0; o < outer; o++) {
		const unsigned char *base = (const unsigned char *)src + o * rows * inner * size;
		unsigned char *acc = (unsigned char *)out + o * inner * size;
		size_t j = 0;
		int n = 0;

		/* The first pass reads rows only; later ones start from acc. */
		while (j < rows && rc == DVAR_OK) {
			if (j > 0)
				srcs[n++] = acc;
			while (n < ROWS_PER_PASS + 1 && j < rows)
				srcs[n++] = base + j++ * inner * size;
			rc = dvar_mem_reduce(s, local, dtype, kop, acc, srcs, n, inner);
			n = 0;
		}
	}
	return rc;
}

static int save_error(int rc, char *buf)
{
	snprintf(buf, DVAR_ERROR_MESSAGE_MAX, "%s", dvar_error_last()->message);
	return rc;
}

/*
 * Contribute this replica's descriptor and gather everyone's. On return
 * with DVAR_OK, *table holds N rows (free it).
 */
static int exchange_descriptors(dvar_replica *ctx, const cross_call *c, int status,
                                const component *comp, int64_t **table)
{
	int N = dvar_replica_num_replicas(ctx);
	int64_t mine[D_COUNT];
	dvar_shape dshape = { .rank = 1, .dims = { D_COUNT } };
	size_t bytes = (size_t)N * D_COUNT * sizeof(int64_t);
	int rc;

	memset(mine, 0, sizeof mine);
	mine[D_STATUS] = status;
	mine[D_DTYPE] = c->dtype;
	mine[D_OP] = c->op;
	mine[D_AXIS] = c->axis;
	mine[D_DST_BYTES] = c->dst_bytes > (size_t)INT64_MAX ? INT64_MAX : (int64_t)c->dst_bytes;
	mine[D_MIRRORED] = c->v && c->v->mirrored;
	if (comp) {
		mine[D_RANK] = comp->shape.rank;
		for (int k = 0; k < comp->shape.rank; k++)
			mine[D_DIMS + k] = comp->shape.dims[k];
	}
	if (!(*table = malloc(bytes)))
		return dvar_error_set(DVAR_ENOMEM, "%s: out of memory", c->what);
	rc = dvar_replica_all_gather(ctx, DVAR_INT64, &dshape, mine, 0, *table, bytes, NULL);
	if (rc != DVAR_OK) {
		free(*table);
		*table = NULL;
	}
	return rc;
}

/*
 * The common start of reduce and gather: local checks, the exchange, the
 * decision. DVAR_OK: go on with *comp, *result, *total_rows, and *mirrored
 * (every replica's value is mirrored). Otherwise the
 * replica function returns the value in *ret (an error when this replica
 * reports it, DVAR_OK when another does).
 */
static int plan(dvar_replica *ctx, cross_call *c, const component **comp, dvar_shape *result,
                int64_t *total_rows, int *mirrored, int *ret)
{
	int local = dvar_replica_local_id(ctx), id = dvar_replica_id(ctx);
	int R = dvar_strategy_local_replicas(c->s), N = dvar_replica_num_replicas(ctx);
	char saved[DVAR_ERROR_MESSAGE_MAX];
	int64_t *table;
	int status, rc, report, known;

	*comp = NULL;
	status = check_local(c, local, comp);
	if (status != DVAR_OK)
		save_error(status, saved);
	if ((rc = exchange_descriptors(ctx, c, status, status == DVAR_OK ? *comp : NULL, &table)) !=
	    DVAR_OK) {
		/* The collective's own failure says more than ours, unless ours came first. */
		*ret = status != DVAR_OK ? dvar_error_restore(status, saved) : rc;
		return rc;
	}
	rc = decide(c, table, N, R, id, result, total_rows, mirrored, &report, &known);
	free(table);
	/* out_shape is reported even when dst is too small. */
	if (local == 0 && known) {
		c->out_shape = *result;
		c->have_shape = 1;
	}
	if (rc != DVAR_OK) {
		if (report && status != DVAR_OK)
			*ret = dvar_error_restore(status, saved);
		else
			*ret = report ? rc : DVAR_OK;
		return rc;
	}
	*ret = DVAR_OK;
	return DVAR_OK;
}

static int reduce_replica(dvar_replica *ctx, void *arg)
{
	cross_call *c = arg;
	int local = dvar_replica_local_id(ctx), N = dvar_replica_num_replicas(ctx);
	const component *comp;
	dvar_shape result;
	int64_t total_rows = 0;
	uint64_t count;
	size_t bytes;
	void *scratch = NULL, *out;
	const void *in;
	dvar_reduce_op op;
	int rc, ret, direct, mirrored;

	memset(&result, 0, sizeof result);
	if (plan(ctx, c, &comp, &result, &total_rows, &mirrored, &ret) != DVAR_OK)
		return ret;
	dvar_shape_num_elements(&result, &count);
	if (count == 0)
		return DVAR_OK; /* every replica knows: nothing to move */
	bytes = (size_t)count * dvar_dtype_size(c->dtype);
	/* TF's _reduce_to returns a mirrored value's MEAN as the value itself:
	 * exact, where N copies summed and divided may differ in the last bit. */
	if (mirrored && c->op == DVAR_REDUCE_MEAN && c->axis == DVAR_AXIS_NONE)
		return local == 0 ? dvar_mem_copy(c->s, local, c->dst, comp->data, bytes) : DVAR_OK;
	/* Local 0 receives straight into the caller's buffer when it is memory
	 * of the components' kind and place (a collective's buffers are of one
	 * kind, and on GPUs its kernels use them where they are). */
	direct = local == 0 && dvar_mem_is_local(c->s, 0, c->dst);
	if ((!direct || c->axis != DVAR_AXIS_NONE) &&
	    !(scratch = dvar_mem_alloc(c->s, local, bytes, 0)))
		return dvar_error_prefix("%s (%zu bytes)", c->what, bytes);
	out = direct ? c->dst : scratch;
	in = comp->data;
	rc = DVAR_OK;
	if (c->axis != DVAR_AXIS_NONE) {
		rc = reduce_along_axis(c->s, local, c->dtype, c->op, comp->data, &comp->shape, c->axis,
		                       scratch);
		in = scratch;
	}
	/* MEAN: a SUM here, divided below by the right denominator. */
	op = c->op == DVAR_REDUCE_MEAN ? DVAR_REDUCE_SUM : (dvar_reduce_op)c->op;
	if (rc == DVAR_OK)
		rc = dvar_replica_all_reduce(ctx, op, c->dtype, in, out, (size_t)count);
	if (rc == DVAR_OK && local == 0 && c->op == DVAR_REDUCE_MEAN)
		rc = dvar_mem_divide(c->s, local, c->dtype, out, (size_t)count,
		                     c->axis == DVAR_AXIS_NONE ? N : total_rows);
	if (rc == DVAR_OK && local == 0 && out != c->dst)
		rc = dvar_mem_copy(c->s, local, c->dst, out, bytes);
	dvar_mem_free(c->s, local, scratch);
	return rc;
}

static int cross_run(cross_call *c, dvar_replica_fn fn, dvar_shape *out_shape)
{
	int rank = c->v ? atomic_load(&c->v->rank) : -1;
	int rc;

	if (!c->s)
		return dvar_error_set(DVAR_EINVAL, "%s: strategy is NULL", c->what);
	/* TF's negative axis counts from the end; one still below -rank is
	 * reported as given. */
	c->axis_given = c->axis;
	if (c->axis != DVAR_AXIS_NONE && c->axis < 0 && rank > 0 && c->axis >= -rank)
		c->axis += rank;
	rc = dvar_strategy_run(c->s, fn, c);
	if (out_shape && c->have_shape)
		*out_shape = c->out_shape;
	return rc;
}

int dvar_strategy_reduce(dvar_strategy *s, dvar_reduce_op op, const dvar_values *v, int axis,
                         void *dst, size_t dst_bytes, dvar_shape *out_shape)
{
	cross_call c = { .what = "reduce",
		         .is_reduce = 1,
		         .s = s,
		         .v = v,
		         .dtype = v ? v->dtype : 0,
		         .op = (int)op,
		         .axis = axis,
		         .dst = dst,
		         .dst_bytes = dst_bytes };

	return cross_run(&c, reduce_replica, out_shape);
}

/* ---------------------------------------------------------------- gather */

static int gather_replica(dvar_replica *ctx, void *arg)
{
	cross_call *c = arg;
	int local = dvar_replica_local_id(ctx);
	const component *comp;
	dvar_shape result;
	int64_t total_rows = 0;
	uint64_t bytes;
	void *scratch = NULL;
	int rc, ret, direct, mirrored;

	memset(&result, 0, sizeof result);
	if (plan(ctx, c, &comp, &result, &total_rows, &mirrored, &ret) != DVAR_OK)
		return ret;
	dvar_shape_num_bytes(&result, c->dtype, &bytes);
	if (bytes == 0)
		return DVAR_OK;
	/* Local 0 gathers into the caller's buffer when it is memory of the
	 * components' kind and place. */
	direct = local == 0 && dvar_mem_is_local(c->s, 0, c->dst);
	if (!direct && !(scratch = dvar_mem_alloc(c->s, local, (size_t)bytes, 0)))
		return dvar_error_prefix("%s (%llu bytes)", c->what, (unsigned long long)bytes);
	rc = dvar_replica_all_gather(ctx, c->dtype, &comp->shape, comp->data, c->axis,
	                             direct ? c->dst : scratch, local == 0 ? c->dst_bytes : (size_t)bytes,
	                             NULL);
	if (rc == DVAR_OK && local == 0 && !direct)
		rc = dvar_mem_copy(c->s, local, c->dst, scratch, (size_t)bytes);
	dvar_mem_free(c->s, local, scratch);
	return rc;
}

int dvar_strategy_gather(dvar_strategy *s, const dvar_values *v, int axis, void *dst,
                         size_t dst_bytes, dvar_shape *out_shape)
{
	cross_call c = { .what = "gather",
		         .s = s,
		         .v = v,
		         .dtype = v ? v->dtype : 0,
		         .op = -1,
		         .axis = axis,
		         .dst = dst,
		         .dst_bytes = dst_bytes };

	return cross_run(&c, gather_replica, out_shape);
}
