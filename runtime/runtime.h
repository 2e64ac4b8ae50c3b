/*
 * runtime/runtime.h - private interfaces shared by the parts of runtime/:
 * the elementwise kernels every collective and variable update uses, the
 * strategy hooks variables need, and the cross-worker steps (all-to-all,
 * agreement) that sharded variables make. Not installed.
 *
 * Parts: strategy.c (replica threads, run, failure propagation, function
 * scopes, the coordinator's own cross-worker steps), comm.c (the
 * cross-worker layer over MPI), collective.c (replica-context collectives),
 * kernels.c, values.c (distributed values, cross-replica reduce/gather),
 * variable.c (distributed variables).
 */
#ifndef DVAR_RUNTIME_PRIVATE_H
#define DVAR_RUNTIME_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "dvar/runtime.h"

DVAR_BEGIN_DECL

/* ---------------------------------------------------------------- kernels */

/** Elementwise operators of the kernels. */
typedef enum {
	DVAR_KOP_ADD = 0,
	DVAR_KOP_SUB = 1,
	DVAR_KOP_MIN = 2,
	DVAR_KOP_MAX = 3
} dvar_kernel_op;

/** The kernel a reduction applies: ADD for SUM and MEAN, MIN, MAX. */
dvar_kernel_op dvar_kernel_op_of(int reduce_op);

/** "SUM", "MEAN", "MIN", "MAX" (or "?") for messages. */
const char *dvar_reduce_op_name(int reduce_op);

/** 1 for float16, bfloat16, float32, float64 (TF's "floating"), else 0. */
int dvar_kernel_is_floating(int dtype);

/**
 * DVAR_OK when the kernels can apply op to dtype: every numeric dtype, not
 * bool. Otherwise DVAR_EINVAL with "<what>: <why>" set.
 */
int dvar_kernel_check(int dtype, dvar_kernel_op op, const char *what);

/**
 * dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined left to
 * right (so the result depends only on the order of srcs). dst may alias any
 * source. Integers wrap (two's complement, no UB); float16 and bfloat16 are
 * computed in float32 and rounded to nearest-even after every step; MIN and
 * MAX propagate NaN. n >= 1.
 */
void dvar_kernel_reduce(int dtype, dvar_kernel_op op, void *dst, const void *const *srcs, int n,
                        size_t count);

/** dst[i] = dst[i] op src[i] (src may equal dst). */
void dvar_kernel_apply(int dtype, dvar_kernel_op op, void *dst, const void *src, size_t count);

/**
 * buf[i] = buf[i] / divisor for a MEAN: floating dtypes divide (float16 and
 * bfloat16 through float32), integers truncate toward zero. divisor >= 1.
 */
void dvar_kernel_divide(int dtype, void *buf, size_t count, int64_t divisor);

/**
 * embedding_lookup's max_norm for one row of count elements, in place:
 * x * max_norm / max(norm, max_norm), norm the row's L2 norm, the
 * multiplication first (TF's clip_ops.clip_by_norm). float32 and float64
 * compute in their own precision as TF does; float16 and bfloat16 in
 * float32, each result rounded once. Other dtypes are left as they are.
 */
void dvar_kernel_clip_norm(int dtype, void *row, size_t count, double max_norm);

/**
 * Restore a saved value into v, in cross-replica context: what a
 * cross-replica assign does (ON_WRITE: every component; ON_READ SUM: the
 * exact split; other ON_READ: every component), without the unsaveable
 * mark, as TF's restore ops do not mark. Not collective.
 */
int dvar_variable_restore(dvar_variable *v, const void *value);

/** v's row change tracker (track.h, which C++ and CUDA sources cannot
 * include: C11 atomics), which the store reads and records saves in. */
typedef struct dvar_track dvar_track;
dvar_track *dvar_variable_track(dvar_variable *v);

/**
 * Local replica local's component of v: nbytes bytes, valid while v lives
 * and changed by every update. Readers must not race the replica threads
 * (the store reads it from the coordinator or from replica context).
 */
const void *dvar_variable_component(const dvar_variable *v, int local);

/**
 * The scatter kernels, shared with sharded variables (sharding/sharded.c):
 * what dvar_variable_scatter checks of op and dtype, and how it applies
 * rows. The name is TF's ("scatter_add", ...; "?" for an unknown op).
 */
const char *dvar_variable_scatter_name(dvar_scatter_op op);

/**
 * DVAR_OK when op can update dtype: scatter_update any dtype, the others
 * what dvar_kernel_check allows (every numeric dtype, not bool). Otherwise
 * DVAR_EINVAL with "<what>: <why>" set (an op outside the enum included).
 */
int dvar_variable_scatter_check(int dtype, dvar_scatter_op op, const char *what);

/**
 * Apply n rows of row_elems elements each (updates, packed) to the rows
 * indices[0..n) of dst (numbered from dst, in range: not checked), in
 * order: with duplicate indices the later row wins (UPDATE) or both count
 * (ADD, SUB, MIN, MAX). The kernels' arithmetic (integers wrap, float16 and
 * bfloat16 round once per element, MIN and MAX propagate NaN).
 */
void dvar_variable_scatter_rows(int dtype, dvar_scatter_op op, void *dst, size_t row_elems,
                                 const int64_t *indices, size_t n, const void *updates);

/* ---------------------------------------------------------------- strategy hooks */

/**
 * Record reason (TF's mark_as_unsaveable) on the open function scope, if
 * any; a no-op outside a scope. Thread-safe: replica threads call it.
 */
void dvar_strategy_mark_unsaveable(dvar_strategy *s, const char *reason);

/**
 * One slot where the store keeps state that outlives a call (its pending
 * asynchronous save). fini(p) runs first thing in dvar_strategy_free, with
 * the replica threads still alive. Coordinator thread only.
 */
void *dvar_strategy_store_slot(const dvar_strategy *s);
void dvar_strategy_set_store_slot(dvar_strategy *s, void *p, void (*fini)(void *));

/* ---------------------------------------------------------------- cross-worker steps */

/**
 * Collective across workers, in cross-replica context (the thread that owns
 * the strategy, outside dvar_strategy_run; DVAR_EINVAL inside a run): every
 * worker sends send_bytes[w] bytes to worker w (the parts packed in worker
 * order at send) and receives recv_bytes[w] bytes from worker w, packed in
 * worker order in *recv (malloc'ed, at least one byte; the caller frees it).
 * The part a worker sends itself is copied without MPI; with W = 1 nothing
 * touches MPI at all.
 *
 * Protections, as for every cross-worker step of the engine: a control
 * round comes first, in which each worker says which step it is at (the
 * kind and a hash of what) and whether it failed before it. So
 *  - workers at different steps (another what, an agreement against an
 *    all-to-all, or a worker inside dvar_strategy_run) fail with
 *    DVAR_ECOMM naming both, instead of hanging (the run on the other side
 *    fails too);
 *  - otherwise local_rc != DVAR_OK (a failure this worker had before the
 *    step, its message in the error record) fails the step on every worker,
 *    nothing moved: the lowest failing worker's code and message, as
 *    "worker W: message" (with W = 1: local_rc and the message unchanged);
 *  - a worker that cannot allocate what it receives fails the step on
 *    every worker (DVAR_ENOMEM) before any data moves;
 *  - timeout_ms bounds every wait; a timeout or an MPI error breaks the
 *    strategy (DVAR_ECOMM now and for every later call).
 * Counts above INT_MAX travel as several messages. what names the step in
 * messages and must be the same text on every worker.
 * @param send        send_bytes summed; may be NULL when that sum is 0
 * @param send_bytes  W entries
 * @param recv_bytes  W entries, set on success
 */
int dvar_strategy_all_to_all(dvar_strategy *s, int local_rc, const void *send,
                              const uint64_t *send_bytes, void **recv, uint64_t *recv_bytes,
                              const char *what);

/**
 * A cross-worker step that moves nothing: every worker learns whether every
 * other one succeeded (local_rc), with the protections and the result of
 * dvar_strategy_all_to_all. Collective across workers, cross-replica context.
 */
int dvar_strategy_agree(dvar_strategy *s, int local_rc, const char *what);

/** The message TF's values_util.mark_as_unsaveable records, verbatim. */
extern const char dvar_unsaveable_reason[];

/* ---------------------------------------------------------------- variables */

/**
 * The share of total (count elements of dtype) that replica replica_id of
 * num_replicas receives when a SUM value is spread over the replicas (an
 * ON_READ SUM cross-replica assign, or restore). Floating dtypes: total / N
 * as TF computes it, in the dtype itself (float16 and bfloat16 rounded once
 * from float32). Integers: split exactly, floor division with the remainder
 * r given one each to replicas 0..r-1, so the shares add up to total (TF
 * truncates instead). part may equal total. DVAR_EINVAL for bool, an
 * unknown dtype, or a replica_id outside [0, num_replicas).
 */
int dvar_variable_split_sum(int dtype, const void *total, void *part, size_t count, int replica_id,
                             int num_replicas);

DVAR_END_DECL

#endif
