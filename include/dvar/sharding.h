/*
 * dvar/sharding.h - splitting a large variable along axis 0: partitioners,
 * the "div" layout, indexing a sharded variable, and embedding lookup.
 * docs/SHARDING.md gives the rules; they are TensorFlow's
 * (FixedShardsPartitioner, MinSizePartitioner, MaxSizePartitioner,
 * ParameterServerStrategy's "div" rule, ShardedVariable.__getitem__,
 * embedding_lookup's "mod" and "div" strategies) unless it says otherwise.
 *
 * The partitioner, layout, subscript and id functions are arithmetic on shapes,
 * offsets and ids: they own no memory and talk to no one. Sharded variables
 * hold their shards on the workers of a strategy and move rows between
 * workers for reads and lookups.
 */
#ifndef DVAR_SHARDING_H
#define DVAR_SHARDING_H

#include "attrs.h"
#include "common.h"
#include "core.h"
#include "runtime.h"

DVAR_BEGIN_DECL

/*
 * What a checkpoint records of a sharded variable, besides its slices (one
 * per shard, in the index): the attribute "kind" (DVAR_STORE_ATTR_KIND) is
 * "sharded", and DVAR_SHARDING_ATTR_SHARDS and DVAR_SHARDING_ATTR_LAYOUT
 * (dvar/attrs.h). A one-shard variable is saved as a plain entry
 * without them.
 */

/* ------------------------------------------------------------ partitioners */

typedef enum {
	/** FixedShardsPartitioner(num_shards): min(num_shards, rows). */
	DVAR_PARTITIONER_FIXED = 1,
	/** MinSizePartitioner(min_shard_bytes, max_shards, bytes_per_string):
	 *  max(1, min(rows, max_shards, ceil(bytes / min_shard_bytes))). */
	DVAR_PARTITIONER_MIN_SIZE = 2,
	/** MaxSizePartitioner(max_shard_bytes, max_shards, bytes_per_string):
	 *  ceil(rows / max(1, floor(max_shard_bytes / bytes_per_row))), capped by
	 *  max_shards when it is set. */
	DVAR_PARTITIONER_MAX_SIZE = 3
} dvar_partitioner_kind;

typedef struct {
	int kind;                 /**< dvar_partitioner_kind */
	int64_t num_shards;       /**< FIXED */
	int64_t min_shard_bytes;  /**< MIN_SIZE; TF's default 256 KiB */
	int64_t max_shard_bytes;  /**< MAX_SIZE */
	/** MIN_SIZE: TF's default 1. MAX_SIZE: 0 = no limit (TF's None). */
	int64_t max_shards;
	int64_t bytes_per_string; /**< TF's default 16 (dvar has no string dtype; kept for parity) */
} dvar_partitioner;

/** TF's constructor defaults for each kind (the size fields still need setting).
 *  Positional, in field order, so that C++ compiles them too. */
#define DVAR_PARTITIONER_FIXED_INIT(n) { DVAR_PARTITIONER_FIXED, (n) }
#define DVAR_PARTITIONER_MIN_SIZE_INIT { DVAR_PARTITIONER_MIN_SIZE, 0, 256 << 10, 0, 1, 16 }
#define DVAR_PARTITIONER_MAX_SIZE_INIT(bytes) { DVAR_PARTITIONER_MAX_SIZE, 0, 0, (bytes), 0, 16 }

/**
 * Check a partitioner's arguments: DVAR_EINVAL with TensorFlow's
 * constructor messages ("Argument `min_shard_bytes` must be positive.
 * Received: 0", ...).
 */
DVAR_EXTERN(int) dvar_partitioner_check(const dvar_partitioner *p);

/**
 * The number of partitions p chooses for a variable (TF's partitioner call,
 * axis 0): *num = the first element of TF's result list (the others are 1),
 * TF's floating-point rounding included (docs/SHARDING.md). Rank-0 shapes
 * are never partitioned (*num = 1). FIXED gives 0 for 0 rows (as TF, whose
 * ParameterServerStrategy then refuses it); MIN_SIZE and MAX_SIZE give at
 * least 1, which may exceed the row count: dvar_div_layout caps it. dtype 7
 * (TF's DT_STRING, which dvar does not store) counts bytes_per_string bytes
 * an element, as TF does. DVAR_EINVAL for a bad partitioner, shape or dtype.
 */
DVAR_EXTERN(int) dvar_partitioner_apply(const dvar_partitioner *p, const dvar_shape *shape,
                                        int dtype, int64_t *num);

/**
 * Parse the CLI's text: "fixed:N", "min-size:BYTES[:MAX_SHARDS]",
 * "max-size:BYTES[:MAX_SHARDS]" (BYTES may end in K, M or G, powers of
 * 1024); the fields not written take TF's defaults (the _INIT macros).
 * DVAR_EINVAL naming the text when it does not parse or check; *out is
 * then untouched.
 */
DVAR_EXTERN(int) dvar_partitioner_parse(dvar_partitioner *out, const char *text);

/**
 * Write the text dvar_partitioner_parse reads back ("min-size:262144:1";
 * bytes_per_string is not written). Like snprintf: returns the full length,
 * writes at most cap - 1 bytes and a NUL when cap > 0.
 */
DVAR_EXTERN(size_t) dvar_partitioner_format(const dvar_partitioner *p, char *buf, size_t cap);

/* ------------------------------------------------------------ the div layout */

/**
 * ParameterServerStrategy's rule: n = min(num_partitions, rows) shards, the
 * first rows % n of them one row longer (10 rows over 4: 3, 3, 2, 2).
 * offsets receives n + 1 entries (offsets[0] = 0, offsets[n] = rows); it
 * must hold max(1, min(num_partitions, rows)) + 1, or be NULL to learn n
 * only. rows = 0 gives one empty shard (n = 1, offsets 0, 0).
 * DVAR_EINVAL when num_partitions < 1 or rows < 0.
 */
DVAR_EXTERN(int) dvar_div_layout(int64_t rows, int64_t num_partitions, int64_t *offsets,
                                 int64_t *n);

/**
 * Whether offsets[0..n] is the div layout of offsets[n] rows over n shards:
 * 1 or 0. Lookups and row updates by "div" need it (TF's "does not conform
 * to div sharding"). Only layouts dvar_div_layout makes qualify: more
 * shards than rows (empty shards) is 0, although TF's size check passes
 * them, because its div formula then divides by zero.
 */
DVAR_EXTERN(int) dvar_div_layout_is(const int64_t *offsets, int64_t n);

/* ---------------------------------------------------------- subscripts */
/* "Subscript" is NumPy-style indexing (x[2:7, 0]); "index" is the
 * checkpoint's index table (dvar/format.h). */

typedef enum {
	DVAR_SUBSCRIPT_INT = 1,      /**< x[i]: drops the dimension; negative counts from the end */
	DVAR_SUBSCRIPT_SLICE = 2,    /**< x[start:stop:step], each part optional */
	DVAR_SUBSCRIPT_ELLIPSIS = 3, /**< x[...]: as many full dimensions as needed */
	DVAR_SUBSCRIPT_NEWAXIS = 4   /**< x[newaxis]: a new dimension of length 1 */
} dvar_subscript_kind;

/** One item of a subscript (Python's x[a, b:c, ...]). */
typedef struct {
	int kind;             /**< dvar_subscript_kind */
	int64_t index;        /**< INT */
	int64_t start, stop, step;
	int has_start, has_stop, has_step; /**< SLICE: 0 = omitted (Python's None) */
} dvar_subscript;

/**
 * Parse a NumPy-style subscript ("2:7:2, 0", "...,0", "newaxis", "::-1",
 * "-3:") into items[0..*n) (cap items at most): items separated by ',' (one
 * trailing ',' allowed), spaces ignored between tokens, integers in 64
 * bits, "..." at most once, "newaxis" or "None" for a new axis. Fields an
 * item does not use are 0. DVAR_EINVAL naming the text and the position
 * (counted from 1) when it does not parse; items may then be partly
 * written, *n is not.
 */
DVAR_EXTERN(int) dvar_subscript_parse(const char *text, dvar_subscript *items, int cap, int *n);

/**
 * ShardedVariable._decompose_slice_spec for an axis-0 SLICE over shards with
 * the given offsets (n + 1 entries, offsets[n] = rows): per shard, the local
 * slice to apply (with has_stop = 0 where TF gives None), or present[i] = 0
 * where TF gives None for the whole shard (local[i] is then the empty slice
 * 0:0). Normalizes negative bounds without clamping, as TF does (reference
 * §2.7: sv[-10:2:3] selects row 1 where NumPy selects row 0). Exact integer
 * arithmetic: equal to TF's for starts within 2^53 of the rows, where TF's
 * double ceiling is exact. DVAR_EINVAL "slice step cannot be zero", or for
 * offsets that do not start at 0 or decrease.
 */
DVAR_EXTERN(int) dvar_sharded_decompose_slice(const int64_t *offsets, int64_t n,
                                              const dvar_subscript *spec, dvar_subscript *local,
                                              int *present);

/**
 * Rows an axis-0 SLICE selects over rows rows, in TF's order and with TF's
 * normalization (the concatenation of dvar_sharded_decompose_slice's parts):
 * rows_out receives at most cap row numbers, *count the number selected.
 */
DVAR_EXTERN(int) dvar_sharded_slice_rows(int64_t rows, const dvar_subscript *spec, int64_t *rows_out,
                                         int64_t cap, int64_t *count);

/* ------------------------------------------------------------ embedding lookup */

typedef enum {
	DVAR_PARTITION_MOD = 1, /**< shard = id % n, row = id / n */
	DVAR_PARTITION_DIV = 2  /**< TF's div formula over contiguous shards */
} dvar_partition_strategy;

/**
 * Where each id lives: TF's embedding_lookup formulas over n shards holding
 * rows rows in total. shard[k] and row[k] for ids[k]. DVAR_EINVAL naming the
 * first id that is negative or >= rows, and its position (nothing written);
 * "Unrecognized partition strategy" for an unknown strategy; for "div",
 * when n > max(1, rows) (TF would divide by rows / n = 0).
 */
DVAR_EXTERN(int) dvar_embedding_locate(int strategy, int64_t rows, int64_t n, const int64_t *ids,
                                       size_t count, int64_t *shard, int64_t *row);

/* ------------------------------------------------------------ sharded variables */

/**
 * A variable split along axis 0 into shards "name/part_i" laid out by the
 * div rule, shard i held (one copy, like a parameter server's) by worker
 * i mod W. Unlike dvar_variable it has no replicas: every call is made from
 * the thread that owns the strategy (cross-replica context), and the calls
 * that move rows between workers are collective across workers.
 */
typedef struct dvar_sharded_variable dvar_sharded_variable;

/**
 * A partition-aware initializer: fill dst (partition_shape, row-major) with
 * the rows starting at partition_offset (an offset per dimension; only
 * axis 0 is non-zero). Called on the shard's owner, once per shard.
 */
typedef int (*dvar_shard_init_fn)(void *arg, int dtype, const dvar_shape *partition_shape,
                                  const int64_t *partition_offset, void *dst);

typedef struct {
	unsigned int version;       /**< DVAR_SHARDED_VARIABLE_SPEC_VERSION */
	const char *name;           /**< 1..1000 bytes; shards are name/part_i */
	int dtype;                  /**< a numeric or bool dvar_dtype */
	dvar_shape shape;
	/** How many shards (dvar_partitioner_apply, then dvar_div_layout).
	 *  Required: NULL is DVAR_EINVAL. */
	const dvar_partitioner *partitioner;
	/** The full value (shape x dtype), read on each shard's owner; or NULL
	 *  to use init. TF requires an initial value; here both NULL = zeros. */
	const void *initial_value;
	dvar_shard_init_fn init;
	void *init_arg;
} dvar_sharded_variable_spec;

#define DVAR_SHARDED_VARIABLE_SPEC_VERSION 1
#define DVAR_SHARDED_VARIABLE_SPEC_INIT { DVAR_SHARDED_VARIABLE_SPEC_VERSION }

/**
 * Set *spec to DVAR_SHARDED_VARIABLE_SPEC_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_sharded_variable_spec_init(dvar_sharded_variable_spec *spec,
                                                 unsigned int version);

/** One shard, as dvar_sharded_variable_shard describes it (borrowed strings). */
typedef struct {
	const char *name;   /**< "name/part_i" */
	int64_t offset;     /**< its first row in the full variable */
	dvar_shape shape;   /**< rows x the full shape's other dimensions */
	int owner;          /**< the worker holding it: i mod W */
	void *data;         /**< its elements on the owner; NULL on other workers */
} dvar_shard_info;

/**
 * Collective across workers: create a sharded variable. Every worker passes
 * the same spec (checked: DVAR_EINVAL on every worker naming the first
 * difference). Rank-0 shapes and partitioners that give one partition make
 * a one-shard variable on worker 0 (TF makes a plain variable; it is saved
 * as one, without slices).
 */
DVAR_EXTERN(int) dvar_sharded_variable_create(dvar_sharded_variable **out, dvar_strategy *s,
                                              const dvar_sharded_variable_spec *spec);

/** Release this worker's shards. NULL is a no-op. Not collective. */
DVAR_EXTERN(void) dvar_sharded_variable_free(dvar_sharded_variable *v);

DVAR_EXTERN(const char *) dvar_sharded_variable_name(const dvar_sharded_variable *v);
DVAR_EXTERN(int) dvar_sharded_variable_dtype(const dvar_sharded_variable *v);
DVAR_EXTERN(const dvar_shape *) dvar_sharded_variable_shape(const dvar_sharded_variable *v);
DVAR_EXTERN(dvar_strategy *) dvar_sharded_variable_strategy(const dvar_sharded_variable *v);
DVAR_EXTERN(int64_t) dvar_sharded_variable_num_shards(const dvar_sharded_variable *v);
/** Offsets of the shards along axis 0: num_shards + 1 entries (borrowed). */
DVAR_EXTERN(const int64_t *) dvar_sharded_variable_offsets(const dvar_sharded_variable *v);
DVAR_EXTERN(int) dvar_sharded_variable_shard(const dvar_sharded_variable *v, int64_t i,
                                             dvar_shard_info *out);

/**
 * Collective: every worker gets v[items[0], ..., items[n-1]] (TF's
 * ShardedVariable.__getitem__ semantics and error texts: "slice step cannot
 * be zero", "ShardedVariable: slice index 100 of dimension 0 out of
 * bounds.", ...), assembled from the owners. out_shape receives the
 * result's shape; dst_bytes must be at least its size (DVAR_ESHAPE naming
 * both otherwise; call with dst NULL to learn the shape). Workers may pass
 * different items. A one-shard variable is indexed as the plain variable
 * TF makes in its place: axis 0 clamps as NumPy does (v[-13:-7:2] on 10
 * rows is rows 0 and 2, where ShardedVariable's rule gives row 1).
 */
DVAR_EXTERN(int) dvar_sharded_variable_read(dvar_sharded_variable *v, const dvar_subscript *items,
                                            int n, void *dst, size_t dst_bytes,
                                            dvar_shape *out_shape);

/**
 * Collective: v = value (the full shape, the same on every worker); each
 * owner keeps its rows (TF's assign: array_ops.slice per shard).
 * assign_add and assign_sub add or subtract likewise.
 */
DVAR_EXTERN(int) dvar_sharded_variable_assign(dvar_sharded_variable *v, const void *value);
DVAR_EXTERN(int) dvar_sharded_variable_assign_add(dvar_sharded_variable *v, const void *delta);
DVAR_EXTERN(int) dvar_sharded_variable_assign_sub(dvar_sharded_variable *v, const void *delta);

/**
 * Collective: sparse row updates (TF's ShardedVariable.scatter_update,
 * scatter_add, ...; what a training loop applies embedding gradients
 * with). Each worker passes its own indices[0..count) (count may differ
 * between workers, 0 included) and rows: count rows of the full shape
 * without axis 0, packed. Every update goes to the owner of its row (one
 * all-to-all). Order: each owner applies the updates in worker order, then
 * in each worker's index order, so duplicate indices are applied in that
 * order (the last scatter_update wins; adds and the others all count) and
 * the result, the same on every run, equals applying every worker's
 * (indices, rows), concatenated in worker order, to an unsharded variable
 * (dvar_variable_scatter). Ops and dtypes as dvar_variable_scatter:
 * scatter_update any dtype, the others not bool (DVAR_EINVAL). Every check
 * runs before any row moves, and a failure on one worker fails the call on
 * every worker with nothing changed: a layout that is not "div" is
 * DVAR_ENOTSUPP with TF's "scatter_xxx ops are not supported in
 * ShardedVariable that does not conform to \"div\" sharding"; an index
 * outside [0, rows) is DVAR_EINVAL naming the index and its position, and
 * the worker when there are several ("worker 1: ..."); rows_bytes must equal count x the row bytes (DVAR_ESHAPE naming
 * both). Scalars have no rows (DVAR_EINVAL).
 */
DVAR_EXTERN(int) dvar_sharded_variable_scatter(dvar_sharded_variable *v, dvar_scatter_op op,
                                               const int64_t *indices, size_t count,
                                               const void *rows, size_t rows_bytes);

/**
 * Collective: each worker looks up its own ids[0..count) (count may differ
 * between workers, 0 included); dst receives count rows (the full shape
 * without axis 0, each), in the order of the ids. Ids go to the workers that
 * own their rows and the rows come back (one all-to-all each way).
 * strategy must match the variable's div layout: DVAR_PARTITION_DIV, or
 * DVAR_PARTITION_MOD only with one shard; otherwise DVAR_EINVAL explaining
 * why (TensorFlow's v1 lookup would read wrong rows). max_norm > 0 clips
 * each row to that L2 norm (TF's max_norm; floating dtypes only); a
 * negative or NaN max_norm is DVAR_EINVAL (TF returns rows of zeros). An id
 * outside [0, rows) fails on every worker, naming the worker and the id.
 */
DVAR_EXTERN(int) dvar_embedding_lookup(dvar_sharded_variable *v, int strategy,
                                       const int64_t *ids, size_t count, double max_norm,
                                       void *dst, size_t dst_bytes);

DVAR_END_DECL

#endif
