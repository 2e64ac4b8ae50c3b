/*
 * dvar/store.h - saving distributed variables from every worker into one
 * checkpoint, and restoring a checkpoint into variables of any topology
 * (docs/STORE.md gives the rules, the save plan and the commit protocol).
 *
 * Both calls are collective across workers: every worker of the strategy
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

#include "common.h"
#include "core.h"
#include "format.h"
#include "runtime.h"

DVAR_BEGIN_DECL

/* Attributes dvar_save records on every saved variable (dvar_reader_var_attr). */
#define DVAR_STORE_ATTR_KIND "kind"                       /**< "mirrored", "sync_on_read", "plain" */
#define DVAR_STORE_ATTR_SYNCHRONIZATION "synchronization" /**< "ON_WRITE", "ON_READ" */
#define DVAR_STORE_ATTR_AGGREGATION "aggregation" /**< "NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA" */

/**
 * A plain (non-distributed) named tensor saved next to the variables, such
 * as a step counter. Saving reads data on the chief (worker 0) only; other
 * workers may pass NULL data. Restoring writes the saved value into data on
 * every worker.
 */
typedef struct {
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
} dvar_save_options;

#define DVAR_SAVE_OPTIONS_VERSION 1
#define DVAR_SAVE_OPTIONS_INIT { .version = DVAR_SAVE_OPTIONS_VERSION }

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

typedef struct {
	unsigned int version;            /**< DVAR_RESTORE_OPTIONS_VERSION */
	const dvar_read_options *read;   /**< NULL for the defaults */
	const dvar_store_tensor *tensors; /**< plain tensors to fill; may be NULL */
	size_t num_tensors;
} dvar_restore_options;

#define DVAR_RESTORE_OPTIONS_VERSION 1
#define DVAR_RESTORE_OPTIONS_INIT { .version = DVAR_RESTORE_OPTIONS_VERSION }

/**
 * Collective: restore vars[0..n) (and opts->tensors) from a checkpoint, by
 * name. path is a checkpoint directory, or a root (its latest checkpoint, as
 * the chief resolves it, so every worker reads the same one).
 *
 * What each variable receives depends on its own kind, not on what was
 * saved: ON_WRITE: the value on every replica; ON_READ SUM: the value split
 * over the N replicas so that the cross-replica read gives it back (floats:
 * value / N as TensorFlow; integers: exactly, where TensorFlow truncates);
 * ON_READ MEAN, ONLY_FIRST_REPLICA and NONE: the value on every replica.
 *
 * Before any variable changes, every worker checks that the checkpoint holds
 * every name (DVAR_ENOTFOUND) with the variable's dtype and shape
 * (DVAR_ESHAPE); a failure on any worker fails the call on all of them with
 * nothing changed. A read failure after that (a corrupt chunk) leaves the
 * variables restored before it changed.
 *
 * Restoring marks nothing: an open function scope stays saveable (TF's
 * restore ops assign the components directly).
 * @param opts NULL for defaults
 */
DVAR_EXTERN(int) dvar_restore(dvar_strategy *s, const char *path, dvar_variable *const *vars,
                              size_t n, const dvar_restore_options *opts);

DVAR_END_DECL

#endif
