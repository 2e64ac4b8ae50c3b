/*
 * dvar/store.h - saving distributed variables from every worker into one
 * checkpoint, and the checkpoint manager (save every K steps, keep N);
 * restoring one into variables of any topology is dvar_restore, in
 * dvar/restore.h (docs/STORE.md gives the rules, the save plan and the
 * commit protocol).
 *
 * dvar_save and dvar_restore are collective across workers: every worker of the strategy
 * calls them, in the same order, with the same variables (same names,
 * dtypes, shapes, synchronizations and aggregations, in the same order).
 * Every worker returns the same status; when it is an error, the message
 * names the worker where it happened ("worker 1: ..."). Neither call may be
 * made from a replica function.
 *
 * What a checkpoint holds is the logical value of each variable, never the
 * topology: a mirrored (ON_WRITE) variable saves its primary; a sync-on-read
 * (ON_READ) variable saves its aggregate over all replicas of all workers
 * (SUM, MEAN, or replica 0's value for ONLY_FIRST_REPLICA). Each value is
 * written once in total, by one worker. Restore gives every replica what
 * makes the variable read back the saved value, whatever R and W.
 *
 * Ownership: every argument is borrowed for the call.
 */
#ifndef DVAR_STORE_H
#define DVAR_STORE_H

#include "attrs.h"
#include "common.h"
#include "core.h"
#include "format.h"
#include "input.h"
#include "restore.h"
#include "runtime.h"
#include "sharding.h"

DVAR_BEGIN_DECL

/* The attributes dvar_save records on every saved variable: dvar/attrs.h. */

/**
 * A plain (non-distributed) named tensor saved next to the variables, such
 * as a step counter. Saving reads data on the chief (worker 0) only; other
 * workers may pass NULL data. Restoring writes the saved value into data on
 * every worker.
 */
typedef struct dvar_store_tensor {
	const char *name; /**< the checkpoint name: 1..1024 bytes */
	int dtype;        /**< a dvar_dtype */
	dvar_shape shape;
	void *data;       /**< dense, row-major, shape x dtype bytes */
} dvar_store_tensor;

typedef struct {
	unsigned int version;            /**< DVAR_SAVE_OPTIONS_VERSION */
	/** How the data files are written (compression, chunk size, threads,
	 *  DVAR_WRITE_NO_FSYNC, keep_last); NULL for the defaults. keep_last
	 *  and progress are the chief's. */
	const dvar_write_options *write;
	const dvar_store_tensor *tensors; /**< plain tensors to save too; may be NULL */
	size_t num_tensors;
	unsigned int flags;              /**< DVAR_SAVE_* */
	/** Sharded variables to save too: each shard, by the worker holding it,
	 *  as a slice of the full variable (kind "sharded", DVAR_SHARDING_ATTR_*);
	 *  a one-shard variable as a plain entry. May be NULL. */
	dvar_sharded_variable *const *sharded;
	size_t num_sharded;
	/** Input iterators whose position to save too, each under its name
	 *  (dvar_input_options.name): an int64 table of one row per worker,
	 *  gathered from every worker and written by the chief (kind
	 *  "iterator"). The position is what the caller has consumed, not
	 *  what was prefetched. May be NULL. */
	dvar_input_iterator *const *iterators;
	size_t num_iterators;
} dvar_save_options;

/**
 * Mirrored replicas that differ are saved anyway: the primary's value, with
 * the attribute "replica_check" = "mismatch" on the entry. Without this
 * flag a mismatch fails the save, naming the variable, the replica and the
 * first differing byte range.
 */
#define DVAR_SAVE_ALLOW_REPLICA_MISMATCH (1u << 0)
/** Do not compare mirrored replicas at all (the check costs one read of
 *  every replica; see docs/STORE.md). */
#define DVAR_SAVE_SKIP_REPLICA_CHECK (1u << 1)
/**
 * TensorFlow's documented pattern: every worker writes a complete checkpoint
 * of its own into its own root (the roots must differ), and commits it
 * itself. Values are the same as in a shared save (the aggregates are still
 * collective), except ONLY_FIRST_REPLICA and plain tensors, which each
 * worker takes from its own local replica 0 and its own buffer.
 */
#define DVAR_SAVE_EVERY_WORKER (1u << 2)
/**
 * A delta checkpoint (docs/STORE.md, "Delta checkpoints"): save only what
 * changed since the root's checkpoint that this strategy last committed or
 * restored, its base (docs/FORMAT.md, "Deltas"). Every variable is saved
 * unchanged, as its changed rows, or whole: a sync-on-read variable, a plain
 * tensor or an iterator always whole, and so is a variable whose changed
 * rows with their ids would take as many bytes as the variable. Without a
 * base (the first save into a root, or its base is gone) the checkpoint is
 * a full one. Either way it becomes the base of the next delta into the
 * root. The variables must outlive a pending dvar_save_async (their change
 * records are updated when it is committed). Not with
 * DVAR_SAVE_EVERY_WORKER.
 */
#define DVAR_SAVE_DELTA (1u << 3)
/** With DVAR_SAVE_DELTA: write a full checkpoint, the start of a new chain. */
#define DVAR_SAVE_NEW_CHAIN (1u << 4)

#define DVAR_SAVE_OPTIONS_VERSION 1
#define DVAR_SAVE_OPTIONS_INIT { DVAR_SAVE_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_SAVE_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_save_options_init(dvar_save_options *opts, unsigned int version);

/**
 * Collective: save vars[0..n) (and opts->tensors) as root/ckpt-<step> and
 * make it the root's latest checkpoint. Every worker passes the same root
 * (a shared file system), step and list.
 *
 * Refused on every worker, with nothing written, when: a worker's open
 * function scope is unsaveable (dvar_strategy_check_saveable's message); the
 * workers' lists differ; an ON_READ variable has aggregation NONE
 * (TensorFlow's "Could not convert from `tf.VariableAggregation` ..."
 * error); names repeat; the checkpoint exists already.
 *
 * Every value gets one writer worker (a plan balanced by bytes); each worker
 * writes its own data file and the chief commits the checkpoint once every
 * worker has finished its file. On any failure anywhere nothing is
 * committed, the previous latest checkpoint stays, and every worker returns
 * the error. Saving reads variables without marking an open function scope
 * (TensorFlow's save context).
 * @param opts NULL for defaults
 */
DVAR_EXTERN(int) dvar_save(dvar_strategy *s, const char *root, int64_t step,
                           dvar_variable *const *vars, size_t n, const dvar_save_options *opts);

/**
 * Collective: dvar_save, but return as soon as this worker's share of the
 * state is copied to host staging buffers (page-aligned, kept for the next
 * save); compression, writing, the replica check and its verdict go on in
 * background threads while the caller changes the variables. On host
 * memory the replica check reads the variables after the return: an update
 * of a mirrored variable, and dvar_variable_free, wait until the check has
 * read that variable (one pass over the worker's replicas, in list order),
 * so that it judges the values at the call. On GPUs the other replicas are
 * checksummed before the return. Errors found before the return
 * (arguments, lists, an unsaveable scope) are returned at once, the same on
 * every worker, and nothing is written; a replica mismatch is returned by
 * the call that finishes the save (with DVAR_SAVE_ALLOW_REPLICA_MISMATCH
 * the replicas are judged before the return, since the mark goes into the
 * entries).
 *
 * Only one save is pending per strategy: dvar_save and dvar_save_async first
 * finish the pending one (dvar_save_wait); when that failed, they return its
 * error ("the asynchronous save of step N failed: ...") and start nothing.
 * The checkpoint is committed by the collective dvar_save_wait or
 * dvar_save_poll, never by the background thread alone: committing needs
 * every worker's part. dvar_strategy_free discards a save still pending.
 */
DVAR_EXTERN(int) dvar_save_async(dvar_strategy *s, const char *root, int64_t step,
                                 dvar_variable *const *vars, size_t n,
                                 const dvar_save_options *opts);

/**
 * Collective: wait until every worker has written its part of the pending
 * asynchronous save, commit it, and return its final status (the same on
 * every worker). DVAR_OK when no save is pending.
 */
DVAR_EXTERN(int) dvar_save_wait(dvar_strategy *s);

/**
 * Collective and non-blocking: when every worker has finished writing its
 * part of the pending save, commit it as dvar_save_wait does and set *done
 * to 1 (and return that save's status); otherwise set *done to 0 and return
 * DVAR_OK at once. *done is 1 when no save is pending. Cheap enough (one
 * small all-gather) to call every training step.
 */
DVAR_EXTERN(int) dvar_save_poll(dvar_strategy *s, int *done);

/** What the last committed save of a strategy wrote (dvar_save_last). */
typedef struct {
	int64_t step;
	int is_delta;          /**< 1: a delta over base */
	char base[256];        /**< its base's directory name ("ckpt-100"); "" for a full one */
	uint64_t bytes;        /**< bytes of its data files, every worker's */
	size_t vars_whole;     /**< variables (and tensors, iterators) it saved whole */
	size_t vars_unchanged; /**< variables it left as the base has them */
	size_t vars_patched;   /**< variables it saved changed rows of */
	uint64_t rows_patched; /**< rows of those */
	double seconds;        /**< from the call to the commit */
} dvar_save_info;

/**
 * The last save of s that was committed (dvar_save, or an asynchronous one
 * once dvar_save_wait or dvar_save_poll committed it): the same on every
 * worker. Not collective. DVAR_ENOTFOUND before the first.
 */
DVAR_EXTERN(int) dvar_save_last(dvar_strategy *s, dvar_save_info *out);

/* dvar_restore and its options: dvar/restore.h. */

/* ------------------------------------------------------------ checkpoint manager */

/**
 * A checkpoint manager: the training loop's view of one root. It saves a
 * fixed list of variables every K steps, keeps the last N checkpoints, and
 * restores the latest one or a given step. Every call is collective.
 */
typedef struct dvar_manager dvar_manager;

typedef struct {
	unsigned int version;    /**< DVAR_MANAGER_OPTIONS_VERSION */
	int64_t save_every;      /**< K: dvar_manager_step saves when step % K == 0; 0 means 1 */
	int keep_last;           /**< N: checkpoints kept under the root; 0 = all */
	int async;               /**< 1: save with dvar_save_async; dvar_manager_step polls */
	/** Passed to every save (its write->keep_last is replaced by keep_last);
	 *  NULL for the defaults. Copied by dvar_manager_open; the tensors and
	 *  their data are borrowed until dvar_manager_free. */
	const dvar_save_options *save;
	/** Passed to every restore; NULL for the defaults. Copied likewise. */
	const dvar_restore_options *restore;
	/** Version 2. 1: every save is a delta over the one before
	 *  (DVAR_SAVE_DELTA), except those that start a new chain: the first,
	 *  every full_every-th, and the first after the chain's deltas add up
	 *  to more than max_chain_ratio times the bytes of its full checkpoint.
	 *  Retention keeps what a kept delta needs. */
	int delta;
	int full_every;         /**< 0: no periodic full one; 1: every save full */
	double max_chain_ratio; /**< 0 means 1.0 */
} dvar_manager_options;

#define DVAR_MANAGER_OPTIONS_VERSION 2
#define DVAR_MANAGER_OPTIONS_INIT { DVAR_MANAGER_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_MANAGER_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_manager_options_init(dvar_manager_options *opts, unsigned int version);

/** dvar_manager_restore's step: the root's latest checkpoint. */
#define DVAR_MANAGER_LATEST (-1)

/**
 * Collective: a manager for root (created when missing) saving vars[0..n).
 * The array is copied; the variables are borrowed and must outlive it.
 * @param opts NULL for defaults (save every step, keep all, synchronous)
 */
DVAR_EXTERN(int) dvar_manager_open(dvar_manager **out, dvar_strategy *s,
                                   const char *root, dvar_variable *const *vars, size_t n,
                                   const dvar_manager_options *opts);

/**
 * Collective: call once per training step. Saves when step % K == 0
 * (*saved = 1, may be NULL) unless step was saved already; otherwise, with
 * async, commits a pending save whose parts are all written. Returns the
 * status of what it did, including a pending save's failure.
 */
DVAR_EXTERN(int) dvar_manager_step(dvar_manager *m, int64_t step, int *saved);

/** Collective: save step now, whatever K (a final save, say). */
DVAR_EXTERN(int) dvar_manager_save(dvar_manager *m, int64_t step);

/**
 * Collective: finish any pending save, then restore step (or
 * DVAR_MANAGER_LATEST) into the variables; *restored (may be NULL) gets the
 * step restored. DVAR_ENOTFOUND, with nothing changed, when the root holds
 * no checkpoint (a fresh start) or not that step.
 */
DVAR_EXTERN(int) dvar_manager_restore(dvar_manager *m, int64_t step,
                                      int64_t *restored);

/** Collective: finish the pending save (dvar_save_wait) and return its status. */
DVAR_EXTERN(int) dvar_manager_wait(dvar_manager *m);

/**
 * Release the manager. Call dvar_manager_wait first: a save still pending is
 * left to the strategy (dvar_save_wait), not committed here. NULL is a no-op.
 */
DVAR_EXTERN(void) dvar_manager_free(dvar_manager *m);

DVAR_END_DECL

#endif
