/*
 * dvar/runtime.h - the training runtime: a strategy of R replicas per worker
 * and W workers, replica and cross-replica contexts, collectives, distributed
 * values and distributed variables, with TensorFlow's tf.distribute semantics
 * (docs/RUNTIME.md lists the rules and where dvar differs on purpose).
 *
 * Replicas are threads of one process that live as long as the strategy;
 * workers are OpenMPI processes (`mpirun -np W`). A replica's id in the sync
 * group is worker * R + local, and num_replicas_in_sync = R * W.
 *
 * Contexts. dvar_strategy_run calls a function once per local replica, each
 * on its own replica thread, with a dvar_replica handle: that is replica
 * context. Everything else (the thread that owns the strategy, outside run)
 * is cross-replica context. Functions that take a `dvar_replica *ctx` act in
 * replica context when ctx is non-NULL and in cross-replica context when it
 * is NULL.
 *
 * Collective calls. Calls marked "collective" must be made by every replica
 * (replica context) or by every worker (cross-replica context), in the same
 * order and with matching arguments (dtype, element count, op, root). A
 * mismatch is detected and reported as DVAR_ECOMM on every participant; a
 * failure anywhere (a bad argument on one replica, a replica function that
 * returns an error, an MPI error, a peer that timed out) makes the same call
 * fail everywhere instead of hanging.
 *
 * Threads. A strategy is used from one thread (the one that created it);
 * replica-context calls come from the replica threads run() starts.
 *
 * GPUs. On a strategy created with DVAR_DEVICE_CUDA each replica's data
 * (variable and value components) lives on its GPU, and every buffer a
 * call takes may be host or device memory: dvar asks CUDA which. The
 * buffers of one collective call must all be of one kind. docs/RUNTIME.md,
 * "Replicas on GPUs", has the rules.
 *
 * Ownership. Objects returned through `**out` belong to the caller and are
 * freed with their _free function (NULL is a no-op). Variables and values
 * hold a pointer to their strategy: free them before the strategy.
 */
#ifndef DVAR_RUNTIME_H
#define DVAR_RUNTIME_H

#include <limits.h>

#include "common.h"
#include "core.h"

DVAR_BEGIN_DECL

typedef struct dvar_strategy dvar_strategy;
typedef struct dvar_replica dvar_replica;
typedef struct dvar_values dvar_values;
typedef struct dvar_variable dvar_variable;

/* ------------------------------------------------------------------ strategy */

/** dvar_strategy_options.workers: use MPI when started by mpirun, else W = 1. */
#define DVAR_WORKERS_AUTO 0

typedef struct {
	unsigned int version; /**< DVAR_STRATEGY_OPTIONS_VERSION */
	int replicas;         /**< R, replica threads per worker (1..256); 0: one on the
	                           CPU, one per GPU with DVAR_DEVICE_CUDA */
	/** DVAR_WORKERS_AUTO, or 1 to stay single-worker even under mpirun.
	 *  Any other value must equal the MPI world size. */
	int workers;
	/** Large collectives move in pieces of this many bytes so that local
	 *  reduction, MPI transfer and copy-out overlap; 0 = 4 MiB. */
	size_t chunk_bytes;
	/** Milliseconds a worker waits for its peers at a collective before it
	 *  fails with DVAR_ECOMM; 0 = wait as long as it takes. A timeout leaves
	 *  the strategy broken: every later collective fails at once. With a
	 *  timeout, all-reduces across workers copy through the strategy's own
	 *  buffers (a request a timeout abandons may still use them), which
	 *  costs a copy in and out. */
	int timeout_ms;
	/** Where the replicas keep their data: DVAR_DEVICE_CPU (the default)
	 *  or DVAR_DEVICE_CUDA (docs/RUNTIME.md, "Replicas on GPUs"). */
	int device;
	/** CUDA: the GPUs of this worker's replicas, local replica i on
	 *  cuda_devices[i % num_cuda_devices] (several replicas may share one);
	 *  NULL: every visible GPU. replicas = 0 (the default): one per GPU. */
	const int *cuda_devices;
	int num_cuda_devices;
	/** DVAR_STRATEGY_* */
	unsigned int flags;
} dvar_strategy_options;

/** dvar_strategy_options.device */
typedef enum {
	DVAR_DEVICE_CPU = 0, /**< replicas are threads working on host memory */
	DVAR_DEVICE_CUDA = 1 /**< each replica's data lives on its GPU */
} dvar_device;

/**
 * All-reduces over device buffers use ncclAllReduce: NCCL's own order of
 * additions and its arithmetic, the fastest, but neither bitwise
 * reproducible across NCCL's algorithm choices nor dvar's rules for NaN in
 * MIN/MAX and narrow floats. Without it dvar reduces in a fixed order with
 * its own kernels, moving the data with NCCL (docs/RUNTIME.md).
 */
#define DVAR_STRATEGY_NCCL_ALL_REDUCE (1u << 0)

#define DVAR_STRATEGY_OPTIONS_VERSION 1
#define DVAR_STRATEGY_OPTIONS_INIT { DVAR_STRATEGY_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_STRATEGY_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_strategy_options_init(dvar_strategy_options *opts, unsigned int version);

/**
 * The CUDA devices this process can use: DVAR_OK with *count >= 1;
 * DVAR_ENOTSUPP when dvar was built without CUDA; DVAR_EDEVICE with CUDA's
 * reason (no driver, no device) otherwise, *count = 0. What a program or
 * test checks before asking for DVAR_DEVICE_CUDA.
 */
DVAR_EXTERN(int) dvar_cuda_device_count(int *count);

/**
 * Create a strategy. Collective across workers: every MPI process calls it.
 * MPI is initialized when needed (and finalized at exit) unless the program
 * already did; a program that initializes MPI itself must ask for at least
 * MPI_THREAD_SERIALIZED, or FUNNELED and call dvar from the main thread.
 * Fails on every worker (DVAR_EINVAL) when workers disagree on R.
 * @param opts NULL for defaults (R = 1, workers AUTO)
 */
DVAR_EXTERN(int) dvar_strategy_create(dvar_strategy **out, const dvar_strategy_options *opts);

/** Stop the replica threads and release the strategy. NULL is a no-op. */
DVAR_EXTERN(void) dvar_strategy_free(dvar_strategy *s);

/** R * W, TensorFlow's num_replicas_in_sync. */
DVAR_EXTERN(int) dvar_strategy_num_replicas_in_sync(const dvar_strategy *s);
/** R, the replicas of this worker. */
DVAR_EXTERN(int) dvar_strategy_local_replicas(const dvar_strategy *s);
/** W. */
DVAR_EXTERN(int) dvar_strategy_num_workers(const dvar_strategy *s);
/** This worker's index, 0..W-1 (its MPI rank). */
DVAR_EXTERN(int) dvar_strategy_worker_id(const dvar_strategy *s);
/** 1 on worker 0 (TF's chief when the cluster has no "chief" job), else 0. */
DVAR_EXTERN(int) dvar_strategy_is_chief(const dvar_strategy *s);

/**
 * A replica function: called once per local replica, concurrently, on the
 * strategy's replica threads. Returns DVAR_OK or an error code (with a
 * message set through the dvar call that failed, or none).
 */
typedef int (*dvar_replica_fn)(dvar_replica *ctx, void *arg);

/**
 * Run fn on every local replica and wait for all of them. Collective across
 * workers. Returns DVAR_OK when every replica of every worker returned
 * DVAR_OK; otherwise, on every worker, the first failure's code with a
 * message naming the replica and worker ("replica 3 (worker 1, local 1):
 * ..."). Collectives that other replicas are blocked in when one fails return
 * DVAR_ECOMM, so a replica function that checks its calls ends promptly.
 * Not reentrant: fn must not call dvar_strategy_run.
 */
DVAR_EXTERN(int) dvar_strategy_run(dvar_strategy *s, dvar_replica_fn fn, void *arg);

/* ------------------------------------------------------------------ replica context */

/** This replica's id in the sync group: worker * R + local. */
DVAR_EXTERN(int) dvar_replica_id(const dvar_replica *ctx);
/** This replica's index among the worker's replicas, 0..R-1. */
DVAR_EXTERN(int) dvar_replica_local_id(const dvar_replica *ctx);
/** num_replicas_in_sync. */
DVAR_EXTERN(int) dvar_replica_num_replicas(const dvar_replica *ctx);
/** The strategy the replica belongs to. */
DVAR_EXTERN(dvar_strategy *) dvar_replica_strategy(const dvar_replica *ctx);

/** The replica's CUDA device ordinal, or -1 on a CPU strategy. */
DVAR_EXTERN(int) dvar_replica_cuda_device(const dvar_replica *ctx);

/**
 * The replica's CUDA stream (a cudaStream_t), NULL on a CPU strategy. dvar
 * runs its work for the replica on this stream and synchronizes it before
 * reading the caller's buffers, so kernels the caller enqueues on it are
 * ordered before the dvar call that uses their results.
 */
DVAR_EXTERN(void *) dvar_replica_cuda_stream(const dvar_replica *ctx);

/** Reduction operators. MEAN divides the SUM by the number of values. */
typedef enum {
	DVAR_REDUCE_SUM = 0,
	DVAR_REDUCE_MEAN = 1,
	DVAR_REDUCE_MIN = 2,
	DVAR_REDUCE_MAX = 3
} dvar_reduce_op;

/**
 * Collective: reduce count elements of dtype across all replicas of all
 * workers; every replica receives the result in dst (src == dst allowed).
 * Every numeric dtype (not bool). Integer SUM wraps modulo 2^bits, integer
 * MEAN truncates toward zero, float16/bfloat16 round after every addition,
 * MIN/MAX propagate NaN. The result is the same bytes on every replica and,
 * for a given topology and input, in every run (the order of additions is
 * fixed).
 */
DVAR_EXTERN(int) dvar_replica_all_reduce(dvar_replica *ctx, dvar_reduce_op op, int dtype,
                                         const void *src, void *dst, size_t count);

/**
 * Collective: all-reduce n buffers of one dtype in one exchange (many small
 * gradients). src[i] and dst[i] hold counts[i] elements; every replica must
 * pass the same n and counts.
 */
DVAR_EXTERN(int) dvar_replica_all_reduce_n(dvar_replica *ctx, dvar_reduce_op op, int dtype,
                                           size_t n, const void *const *src, void *const *dst,
                                           const size_t *counts);

/**
 * Collective: every replica receives, in buf, the count elements that
 * replica root (a sync-group id) passes in its buf.
 */
DVAR_EXTERN(int) dvar_replica_broadcast(dvar_replica *ctx, int root, int dtype, void *buf,
                                        size_t count);

/**
 * Collective: concatenate every replica's tensor along axis, in replica-id
 * order; every replica receives the result. The tensors must agree in dtype,
 * rank and every dimension but axis (replicas may hold different numbers of
 * rows, as with a partial last batch).
 * @param shape      this replica's tensor's shape (rank >= 1; 0 <= axis < rank)
 * @param dst_bytes  the capacity of dst; DVAR_ESHAPE on every replica when it
 *                   is too small for the result (out_shape is set either way)
 * @param out_shape  the result's shape; may be NULL
 */
DVAR_EXTERN(int) dvar_replica_all_gather(dvar_replica *ctx, int dtype, const dvar_shape *shape,
                                         const void *src, int axis, void *dst, size_t dst_bytes,
                                         dvar_shape *out_shape);

/* ------------------------------------------------------------------ distributed values */

/**
 * A distributed value: one tensor ("component") per local replica, all of
 * one dtype and rank; components may differ in shape. A per-replica value
 * is filled replica by replica; a mirrored value holds the same tensor on
 * every replica and reads cross-replica through its primary (local 0).
 */
DVAR_EXTERN(int) dvar_values_new(dvar_values **out, dvar_strategy *s, int dtype);

/** A mirrored value: every local component is a copy of data (shape, dtype). */
DVAR_EXTERN(int) dvar_values_new_mirrored(dvar_values **out, dvar_strategy *s, int dtype,
                                          const dvar_shape *shape, const void *data);

/**
 * A value produced by fn for each local replica, in cross-replica context
 * (TF's experimental_distribute_values_from_function). fn fills the
 * component of local replica `local` with dvar_values_set.
 */
typedef int (*dvar_value_fn)(dvar_values *v, int local, int replica_id, int num_replicas,
                             void *arg);
DVAR_EXTERN(int) dvar_values_from_function(dvar_values **out, dvar_strategy *s, int dtype,
                                           dvar_value_fn fn, void *arg);

DVAR_EXTERN(void) dvar_values_free(dvar_values *v);

/**
 * Set (copy in) the component of local replica `local`. Safe to call from
 * several replica threads at once for different locals. Fails on a mirrored
 * value (its components are set together).
 */
DVAR_EXTERN(int) dvar_values_set(dvar_values *v, int local, const dvar_shape *shape,
                                 const void *data);

/**
 * TF's experimental_local_results: the component of local replica `local`
 * (device memory on a CUDA strategy).
 * *data stays valid until the component is set again or v is freed.
 * DVAR_EINVAL when that component was never set.
 */
DVAR_EXTERN(int) dvar_values_get(const dvar_values *v, int local, dvar_shape *shape,
                                 const void **data);

DVAR_EXTERN(int) dvar_values_dtype(const dvar_values *v);
DVAR_EXTERN(int) dvar_values_is_mirrored(const dvar_values *v);

/**
 * dvar_strategy_reduce's axis for "across replicas only" (TF's axis=None).
 * Outside every axis's range: -1 is the last axis, as in TF.
 */
#define DVAR_AXIS_NONE INT_MIN

/**
 * Collective (cross-replica): TF's strategy.reduce. With axis DVAR_AXIS_NONE
 * the components (all of one shape) are reduced elementwise across all
 * replicas of all workers. With axis k they are also reduced along dimension
 * k (which may differ in length between replicas): the result drops that
 * dimension, and MEAN divides by the total number of rows along k over all
 * replicas (the right denominator for a partial last batch). A negative
 * axis counts from the end (-1 is the last), as in TF. Integer MEAN
 * truncates toward zero in the value's dtype (TF returns float64 from true
 * division; docs/RUNTIME.md has the recipe for that result). A mirrored
 * value: MEAN (axis NONE) is the value itself, exactly, as in TF; SUM is
 * N*x, where TF's MirroredStrategy stops at an assertion; MIN and MAX are x.
 * Every worker receives the result.
 * @param out_shape the result's shape (may be NULL); DVAR_ESHAPE when
 *                  dst_bytes is too small
 */
DVAR_EXTERN(int) dvar_strategy_reduce(dvar_strategy *s, dvar_reduce_op op, const dvar_values *v,
                                      int axis, void *dst, size_t dst_bytes, dvar_shape *out_shape);

/**
 * Collective (cross-replica): TF's strategy.gather, the components of every
 * replica of every worker concatenated along axis in replica-id order (a
 * negative axis counts from the end).
 */
DVAR_EXTERN(int) dvar_strategy_gather(dvar_strategy *s, const dvar_values *v, int axis, void *dst,
                                      size_t dst_bytes, dvar_shape *out_shape);

/* ------------------------------------------------------------------ distributed variables */

/** tf.VariableSynchronization (same numbers). */
typedef enum {
	DVAR_SYNC_AUTO = 0,     /**< becomes ON_WRITE */
	DVAR_SYNC_NONE = 1,     /**< not supported under a strategy (TF's error) */
	DVAR_SYNC_ON_WRITE = 2, /**< mirrored: every replica holds the same value */
	DVAR_SYNC_ON_READ = 3   /**< sync-on-read: replicas differ, reads aggregate */
} dvar_synchronization;

/** tf.VariableAggregation (same numbers). */
typedef enum {
	DVAR_AGG_NONE = 0,
	DVAR_AGG_SUM = 1,
	DVAR_AGG_MEAN = 2, /**< floating dtypes only (TF's creation error otherwise) */
	DVAR_AGG_ONLY_FIRST_REPLICA = 3
} dvar_aggregation;

/**
 * An initializer: fill dst (shape, dtype, row-major) with the initial value.
 * Called once, on worker 0 with replica_id 0; every replica of every worker
 * starts from its result (TF: replicas copy replica 0's initial value).
 */
typedef int (*dvar_init_fn)(void *arg, int replica_id, int dtype, const dvar_shape *shape,
                            void *dst);

typedef struct {
	unsigned int version;       /**< DVAR_VARIABLE_SPEC_VERSION */
	const char *name;           /**< 1..1024 bytes, no NUL; the checkpoint name */
	int dtype;                  /**< a numeric or bool dvar_dtype */
	dvar_shape shape;
	const void *initial_value;  /**< a dense buffer, or NULL to use init */
	dvar_init_fn init;          /**< used when initial_value is NULL; both NULL = zeros */
	void *init_arg;
	int synchronization;        /**< dvar_synchronization; default AUTO */
	int aggregation;            /**< dvar_aggregation; default NONE */
} dvar_variable_spec;

#define DVAR_VARIABLE_SPEC_VERSION 1
#define DVAR_VARIABLE_SPEC_INIT { DVAR_VARIABLE_SPEC_VERSION }

/**
 * Set *spec to DVAR_VARIABLE_SPEC_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_variable_spec_init(dvar_variable_spec *spec, unsigned int version);

/**
 * Create a distributed variable: one component per local replica, named
 * `name` (local 0, the primary) and `name/replica_<i>` (local i), as TF
 * names them. Collective (cross-replica): every worker creates it with the
 * same spec; worker 0's initial value is broadcast. Errors use TF's texts
 * (MEAN with a non-floating dtype; synchronization NONE; invalid modes).
 */
DVAR_EXTERN(int) dvar_variable_create(dvar_variable **out, dvar_strategy *s,
                                      const dvar_variable_spec *spec);
DVAR_EXTERN(void) dvar_variable_free(dvar_variable *v);

DVAR_EXTERN(const char *) dvar_variable_name(const dvar_variable *v);
/** The name of local replica local's component: "w" or "w/replica_1". */
DVAR_EXTERN(const char *) dvar_variable_component_name(const dvar_variable *v, int local);
DVAR_EXTERN(int) dvar_variable_dtype(const dvar_variable *v);
DVAR_EXTERN(const dvar_shape *) dvar_variable_shape(const dvar_variable *v);
/** ON_WRITE or ON_READ (AUTO has become ON_WRITE). */
DVAR_EXTERN(int) dvar_variable_synchronization(const dvar_variable *v);
DVAR_EXTERN(int) dvar_variable_aggregation(const dvar_variable *v);
/** 1 unless ON_READ (TF: sync-on-read variables default to trainable=False). */
DVAR_EXTERN(int) dvar_variable_trainable(const dvar_variable *v);
DVAR_EXTERN(dvar_strategy *) dvar_variable_strategy(const dvar_variable *v);
/** Bytes of one full value (shape x dtype). */
DVAR_EXTERN(size_t) dvar_variable_nbytes(const dvar_variable *v);

/**
 * Read the variable into dst (dst_bytes >= dvar_variable_nbytes, else
 * DVAR_ESHAPE).
 * Replica context: this replica's component. Cross-replica: ON_WRITE reads
 * the primary; ON_READ reads the aggregate over all replicas of all workers
 * (SUM, MEAN: collective; ONLY_FIRST_REPLICA: replica 0's value, broadcast
 * from worker 0, also collective; NONE: TF's "Could not convert" error).
 */
DVAR_EXTERN(int) dvar_variable_read(dvar_variable *v, dvar_replica *ctx, void *dst,
                                    size_t dst_bytes);

/**
 * Read one local component in cross-replica context, without aggregation
 * (TF's var.values[local]); not collective.
 */
DVAR_EXTERN(int) dvar_variable_read_local(dvar_variable *v, int local, void *dst,
                                          size_t dst_bytes);

/**
 * Updates with a dense value of the variable's shape and dtype.
 *
 * ON_WRITE, replica context (collective across replicas): the replicas'
 * values are aggregated (SUM: summed over all replicas of all workers; MEAN:
 * averaged; ONLY_FIRST_REPLICA: replica 0's value) and the same result is
 * applied on every replica. With aggregation NONE, as in TF, each replica
 * applies its own value to its own component only (components may then
 * differ; the primary is what is saved).
 * ON_WRITE, cross-replica: the value is applied to every component.
 * ON_READ, replica context: applied to this replica's component only.
 * ON_READ, cross-replica: assign sets every component, SUM dividing the value
 * over the N replicas (floats: value / N as TF computes it; integers: split
 * exactly, so the sum still equals value, where TF truncates); assign_add and
 * assign_sub with SUM fail with TF's error, and otherwise apply to every
 * component.
 */
DVAR_EXTERN(int) dvar_variable_assign(dvar_variable *v, dvar_replica *ctx, const void *value);
DVAR_EXTERN(int) dvar_variable_assign_add(dvar_variable *v, dvar_replica *ctx, const void *delta);
DVAR_EXTERN(int) dvar_variable_assign_sub(dvar_variable *v, dvar_replica *ctx, const void *delta);

/** Row scatter operators (TF's scatter_update, scatter_add, ...). */
typedef enum {
	DVAR_SCATTER_UPDATE = 0,
	DVAR_SCATTER_ADD = 1,
	DVAR_SCATTER_SUB = 2,
	DVAR_SCATTER_MIN = 3,
	DVAR_SCATTER_MAX = 4
} dvar_scatter_op;

/**
 * Apply op to the rows indices[0..n) (along axis 0, rank >= 1) with updates
 * holding n rows of the variable's row shape. Indices outside [0, rows) fail
 * with DVAR_EINVAL naming the index and the variable; nothing is changed (in
 * a replica-context aggregated scatter, a bad index on any replica fails the
 * call on every replica).
 * ON_WRITE, replica context (collective): SUM gathers every replica's
 * (indices, updates) and applies them all, in replica-id order, on every
 * replica; MEAN does the same with the updates divided by N;
 * ONLY_FIRST_REPLICA applies replica 0's; NONE applies each replica's own
 * locally. ON_WRITE, cross-replica: applied to every component.
 * scatter_update, scatter_min and scatter_max of a SUM or MEAN variable are
 * DVAR_ENOTSUPP in both contexts, with TF's text ("... is only supported for
 * mirrored variable ... with NONE or `ONLY_FIRST_REPLICA` aggregation"): a
 * replaced or extreme row has no sum or mean. ON_READ: TF's "doesn't
 * support `scatter_*`" errors (DVAR_ENOTSUPP).
 */
DVAR_EXTERN(int) dvar_variable_scatter(dvar_variable *v, dvar_replica *ctx, dvar_scatter_op op,
                                       const int64_t *indices, size_t n, const void *updates);

/* ------------------------------------------------------------------ saveability */

/**
 * TF marks a traced function unsaveable when it updates or reads distributed
 * variables in certain ways (values_util.mark_as_unsaveable). dvar records
 * the same marks while a function scope is open: every assign, assign_add,
 * assign_sub and scatter of a distributed variable (TF's testUnsaveable:
 * all of them, for every synchronization and aggregation), and cross-replica
 * reads of ON_READ variables with SUM, or with MEAN over several workers.
 * Begin a scope, run the step, and dvar_strategy_check_saveable says whether
 * what the scope did can be saved; the store refuses to save while it cannot.
 * Scopes do not nest. Outside a scope nothing is marked (TF's plain
 * tf.train.Checkpoint saves are not affected by the marks either).
 */
DVAR_EXTERN(int) dvar_strategy_function_begin(dvar_strategy *s, const char *name);
DVAR_EXTERN(int) dvar_strategy_function_end(dvar_strategy *s);

/**
 * DVAR_OK when no function scope is open or the open one is saveable;
 * otherwise DVAR_EINVAL with TF's message: "Unable to save function <name>
 * for the following reason(s):\n" followed by the recorded reasons.
 */
DVAR_EXTERN(int) dvar_strategy_check_saveable(const dvar_strategy *s);

DVAR_END_DECL

#endif
