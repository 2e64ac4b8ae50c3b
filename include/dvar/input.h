/*
 * dvar/input.h - distributed input: datasets of fixed-size elements and the
 * iterator that hands every replica its per-replica batch each step, with
 * TensorFlow's tf.distribute input rules (experimental_distribute_dataset,
 * distribute_datasets_from_function, AutoShardPolicy, the legacy and V2
 * rebatch). docs/INPUT.md states the rules and where TF's docs and code
 * disagree.
 *
 * A dataset is a sequence of elements, each one row of a fixed shape and
 * dtype. Its "global element index" is the element's position in the
 * dataset (for files: the files concatenated in list order).
 *
 * Ownership. Objects returned through `**out` belong to the caller and are
 * freed with their _free function (NULL is a no-op). An array dataset
 * borrows its data: it must stay valid and unchanged while the dataset or an
 * iterator over it lives. An iterator made by dvar_distribute_dataset
 * borrows its dataset (free the iterator first); one made by
 * dvar_distribute_datasets_from_function owns the dataset the function
 * returned. Batches returned by next() are borrowed, valid until the next
 * call to next() or dvar_input_iterator_free.
 *
 * Collective calls (marked) are made by every worker, in cross-replica
 * context (the thread that owns the strategy, outside dvar_strategy_run),
 * in the same order and with the same options. With one worker nothing
 * touches MPI.
 */
#ifndef DVAR_INPUT_H
#define DVAR_INPUT_H

#include "common.h"
#include "core.h"
#include "runtime.h"

DVAR_BEGIN_DECL

typedef struct dvar_dataset dvar_dataset;
typedef struct dvar_input_iterator dvar_input_iterator;

/* ------------------------------------------------------------------ datasets */

/**
 * A dataset over an in-memory tensor: row i of the [rows, ...] tensor is
 * element i (TF's from_tensor_slices). data is borrowed (see Ownership).
 * @param shape rank >= 1; dims[0] is the number of elements (0 allowed)
 */
DVAR_EXTERN(int) dvar_dataset_from_array(dvar_dataset **out, int dtype, const dvar_shape *shape,
                                         const void *data);

/**
 * A dataset over files of fixed-size records (TF's FixedLengthRecordDataset
 * without header or footer): every record is one element of record_shape and
 * dtype, row-major, native byte order. The paths are copied; every file is
 * checked now: DVAR_ENOTFOUND / DVAR_EIO when it cannot be read, DVAR_EINVAL
 * naming the file when its size is not a multiple of the record size.
 * Records are read when the iterator needs them.
 * @param n_paths >= 1
 */
DVAR_EXTERN(int) dvar_dataset_from_files(dvar_dataset **out, const char *const *paths,
                                         size_t n_paths, int dtype,
                                         const dvar_shape *record_shape);

DVAR_EXTERN(void) dvar_dataset_free(dvar_dataset *ds);

/** The number of elements. */
DVAR_EXTERN(int) dvar_dataset_num_elements(const dvar_dataset *ds, int64_t *out);

/* ------------------------------------------------------------------ options */

/** tf.data.experimental.AutoShardPolicy, TF's numbers (HINT = 3 is not supported). */
typedef enum {
	DVAR_AUTO_SHARD_OFF = -1, /**< no sharding: every worker reads everything */
	DVAR_AUTO_SHARD_AUTO = 0, /**< FILE for a file dataset, else DATA (the default) */
	DVAR_AUTO_SHARD_FILE = 1, /**< worker w reads files w, w+W, ... */
	DVAR_AUTO_SHARD_DATA = 2  /**< every worker reads everything, keeps sub-batches k % W == w */
} dvar_auto_shard_policy;

/** How the data reaches the replicas. */
typedef enum {
	/**
	 * The default: each global batch of batch_size elements is split across
	 * the N = R*W replicas (TF 2 experimental_distribute_dataset; TF 1.12
	 * Estimator + DistributionStrategy, where one pass over the data is one
	 * pass for all replicas together).
	 */
	DVAR_INPUT_SPLIT = 0,
	/**
	 * Every replica of every worker iterates over the whole dataset in
	 * batches of batch_size (TF 2.0 Estimator: input_fn runs once per
	 * replica, so one epoch reads the data N times). No sharding: the
	 * policy must be OFF or AUTO (which means OFF here).
	 */
	DVAR_INPUT_REPLICATE = 1
} dvar_input_mode;

typedef struct {
	unsigned int version; /**< DVAR_INPUT_OPTIONS_VERSION */
	/** SPLIT: the global batch size (TF's dataset.batch(G) before
	 *  distribution). REPLICATE: every replica's batch size. >= 1. */
	int64_t batch_size;
	int drop_remainder;   /**< drop a last batch shorter than batch_size */
	int auto_shard_policy; /**< dvar_auto_shard_policy; default AUTO */
	int mode;             /**< dvar_input_mode; default SPLIT */
	/**
	 * Per-replica batches prepared ahead on a background thread (reading
	 * records, assembling rows) while the caller uses the current step:
	 * 0 = the default, R (one step ahead); n > 0: ceil(n / R) steps ahead;
	 * DVAR_INPUT_PREFETCH_OFF: none, next() prepares each step itself. The
	 * batches are the same either way; the thread never calls MPI.
	 */
	int64_t prefetch;
	/**
	 * The iterator's checkpoint name (dvar_save_options.iterators), 1..1024
	 * bytes, copied; NULL when it is not saved. Part of the creation
	 * agreement: every worker passes the same name.
	 */
	const char *name;
} dvar_input_options;

/** dvar_input_options.prefetch: no background thread. */
#define DVAR_INPUT_PREFETCH_OFF (-1)

#define DVAR_INPUT_OPTIONS_VERSION 1
#define DVAR_INPUT_OPTIONS_INIT { DVAR_INPUT_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_INPUT_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_input_options_init(dvar_input_options *opts, unsigned int version);

/* ------------------------------------------------------------------ input context */

/** tf.distribute.InputContext, as distribute_datasets_from_function passes it. */
typedef struct {
	int num_input_pipelines;  /**< W */
	int input_pipeline_id;    /**< this worker, 0..W-1 */
	int num_replicas_in_sync; /**< N = R*W */
} dvar_input_context;

/**
 * TF's InputContext.get_per_replica_batch_size: global / N. When N does not
 * divide global: DVAR_EINVAL with TF's text, trailing space included:
 * "The `global_batch_size` 13 is not divisible by `num_replicas_in_sync` 6 ".
 */
DVAR_EXTERN(int) dvar_input_context_per_replica_batch_size(const dvar_input_context *ctx,
                                                           int64_t global_batch_size,
                                                           int64_t *out);

/* ------------------------------------------------------------------ iterators */

/**
 * Collective: a distributed iterator over dataset (TF's
 * strategy.experimental_distribute_dataset(dataset.batch(G)) and iter()).
 * opts NULL is not allowed (batch_size has no default). Errors (bad options,
 * FILE sharding with fewer files than workers, with TF's text) are the same
 * on every worker; a failure on one worker fails the call on all of them.
 */
DVAR_EXTERN(int) dvar_distribute_dataset(dvar_input_iterator **out, dvar_strategy *s,
                                         dvar_dataset *dataset, const dvar_input_options *opts);

/**
 * An input function (distribute_datasets_from_function): called once per
 * worker, on the calling thread, with the worker's input context; returns a
 * new dataset in *out, which the iterator then owns. The function shards
 * the data itself if it wants to: dvar does no sharding or splitting.
 */
typedef int (*dvar_dataset_fn)(dvar_dataset **out, const dvar_input_context *ctx, void *arg);

/**
 * Collective: TF's distribute_datasets_from_function. opts->batch_size is
 * the global batch size G; each worker's dataset is batched by
 * G / N (dvar_input_context_per_replica_batch_size, TF's error when N does
 * not divide G) and its batches go to the local replicas in turn (local 0,
 * 1, ..., R-1, then local 0 again). drop_remainder applies per worker;
 * auto_shard_policy is ignored (TF does not shard here); mode must be SPLIT.
 * Global element indices are positions in the worker's own dataset.
 */
DVAR_EXTERN(int) dvar_distribute_datasets_from_function(dvar_input_iterator **out,
                                                        dvar_strategy *s, dvar_dataset_fn fn,
                                                        void *arg, const dvar_input_options *opts);

/** One local replica's batch of one step. All fields are borrowed (see Ownership). */
typedef struct {
	const void *data;       /**< rows * element bytes, row-major; NULL when rows == 0 */
	int64_t rows;           /**< 0 for an empty per-replica batch */
	const int64_t *indices; /**< the global element index of each row; NULL when rows == 0 */
	dvar_shape shape;       /**< [rows, element dims...] */
} dvar_replica_batch;

/**
 * Collective: the next step (TF's get_next_as_optional with
 * enable_get_next_as_optional). Fills batches[0..R-1], one per local
 * replica, and sets *has_value = 1; a replica whose input has ended, or
 * whose split is empty, gets rows == 0. Workers agree whether any replica
 * anywhere has a value; when none has, *has_value = 0 and iteration is over
 * (every later call says the same). A replica "has a value" when its
 * pipeline produced an element, which can be an empty split (TF's rule).
 * @param batches R entries (dvar_strategy_local_replicas)
 */
DVAR_EXTERN(int) dvar_input_iterator_next(dvar_input_iterator *it, dvar_replica_batch *batches,
                                          int *has_value);

/**
 * Start the iteration again from the first step, as a new iterator over the
 * same dataset and options would (a new epoch), keeping the iterator, so
 * that whatever holds it (a dvar_manager, its delta history) goes on. A
 * failed step is forgotten. Not collective, but every worker must reset at
 * the same step: their steps are collectives.
 */
DVAR_EXTERN(int) dvar_input_iterator_reset(dvar_input_iterator *it);

/** The element dtype and shape (without the batch dimension). */
DVAR_EXTERN(int) dvar_input_iterator_element(const dvar_input_iterator *it, int *dtype,
                                             dvar_shape *element_shape);

/** The name given in the options (NULL when none). */
DVAR_EXTERN(const char *) dvar_input_iterator_name(const dvar_input_iterator *it);

/**
 * Stops the prefetch thread (joined), then releases everything. Not
 * collective.
 */
DVAR_EXTERN(void) dvar_input_iterator_free(dvar_input_iterator *it);

/**
 * TF's batch_sizes_for_worker (the RebatchDatasetV2 sizes): the W*R
 * per-replica batch sizes worker `worker` cycles through, into out[0..W*R).
 * DVAR_EINVAL for global < 0, W or R < 1, worker outside [0, W).
 */
DVAR_EXTERN(int) dvar_input_batch_sizes_for_worker(int64_t global_batch_size, int num_workers,
                                                   int replicas_per_worker, int worker,
                                                   int64_t *out);

DVAR_END_DECL

#endif
