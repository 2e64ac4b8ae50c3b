/*
 * runtime/engine.h - the engine's private structures, shared by strategy.c
 * (replica threads, run, failure bookkeeping, the coordinator loop),
 * comm.c (the cross-worker layer over MPI) and collective.c (the
 * replica-context collectives). Nothing else includes it.
 *
 * Threads. Each worker has R replica threads, alive as long as the strategy,
 * and one coordinator: the thread that calls dvar_strategy_run. Only the
 * coordinator calls MPI. Everything shared between the threads of a strategy
 * is guarded by strategy->lock, except the buffers a collective hands out
 * (each replica writes only its own segment of them, the coordinator only
 * the chunks the replicas have handed over).
 */
#ifndef DVAR_RUNTIME_ENGINE_H
#define DVAR_RUNTIME_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "runtime/runtime.h"

#define DVAR_MAX_REPLICAS 256

/* ---------------------------------------------------------------- comm.c */

typedef struct dvar_comm dvar_comm;

/**
 * Decide whether the strategy spans workers (workers: the option) and set up
 * MPI when it does. *out stays NULL for a single worker (MPI untouched);
 * otherwise it is a private duplicate of MPI_COMM_WORLD, and *worker and
 * *nworkers are this process's rank and the world size.
 */
int dvar_comm_open(dvar_comm **out, int workers, int timeout_ms, int *worker, int *nworkers);

/** Release c. A broken comm (a request may still be pending) is abandoned, not freed. */
void dvar_comm_close(dvar_comm *c);

/** 1 after a timeout or an MPI error: the workers may have lost step. */
int dvar_comm_broken(const dvar_comm *c);

/**
 * Keep p (a buffer an abandoned request may still write into) allocated
 * until the process exits.
 */
void dvar_comm_abandon(void *p);

/**
 * Every worker contributes bytes at mine; all receives them in rank order.
 * what names the wait in a timeout message.
 */
int dvar_comm_allgather(dvar_comm *c, const void *mine, void *all, size_t bytes, const char *what);

/** Worker root's bytes at buf reach every worker's buf (bytes <= INT_MAX). */
int dvar_comm_bcast(dvar_comm *c, void *buf, size_t bytes, int root, const char *what);

/**
 * Ring all-reduce of count elements in buf across the workers (reduce-
 * scatter, then all-gather); tmp holds at least count / W + 1 elements.
 * The order of the additions depends only on W, so every worker ends with
 * the same bytes, and the same inputs give the same bytes in every run.
 */
int dvar_comm_ring_allreduce(dvar_comm *c, int dtype, dvar_kernel_op op, void *buf, void *tmp,
                             size_t count, const char *what);

/**
 * The data of an all-to-all, once every worker has agreed to it
 * (dvar_strategy_all_to_all runs the control round): the sizes go with
 * MPI_Ialltoall (send_bytes in, recv_bytes out: W entries each), every
 * worker allocates what it receives and says in an allgather whether it
 * could (status: W + 1 entries, scratch; DVAR_ENOMEM on every worker, the
 * comm intact, when one could not), then the bytes move with Isend/Irecv in
 * messages of at most 1 GiB. On success *recv is malloc'ed (at least one
 * byte) and holds what worker w sent at the offset of the sum of
 * recv_bytes[0..w). stage: copy send into a buffer of the comm's first, so
 * that a request a timeout abandons never reads the caller's memory.
 * send_bytes, recv_bytes and status must be on the heap: after a timeout
 * (the comm is broken) the caller abandons them.
 */
int dvar_comm_alltoallv(dvar_comm *c, const void *send, const uint64_t *send_bytes,
                        uint64_t *recv_bytes, uint64_t *status, int stage, void **recv,
                        const char *what);

/** Tests: the most bytes one all-to-all message carries (0 = 1 GiB, the default). */
void dvar_comm__set_message_max(uint64_t bytes);

/* ---------------------------------------------------------------- collectives */

enum {
	DVAR_COLL_ALL_REDUCE = 1,
	DVAR_COLL_BROADCAST = 2,
	DVAR_COLL_ALL_GATHER = 3,
	/* Not a replica collective: a cross-worker step the coordinator makes in
	 * cross-replica context (dvar_strategy_all_to_all, dvar_strategy_agree).
	 * Its record is an OP so that a worker inside a run sees a mismatch. */
	DVAR_COLL_ALL_TO_ALL = 4
};

/* dvar_coll_sig.where: where a collective's buffers are, and so how it moves them. */
enum {
	DVAR_WHERE_HOST = 0,   /* host memory: threads and MPI */
	DVAR_WHERE_DEVICE = 1, /* device memory (a CUDA strategy): kernels and NCCL */
	/* device memory copied through page-locked host staging, then as host
	 * memory (dvar_cuda_via_host): the args' pointers are the staging's */
	DVAR_WHERE_STAGED = 2
};

/* What every participant of a collective must agree on. Plain integers:
 * it travels between workers as bytes. */
typedef struct {
	int32_t kind;
	int32_t op;     /* all_reduce: dvar_reduce_op */
	int32_t dtype;
	int32_t root;   /* broadcast */
	int32_t axis;   /* all_gather */
	int32_t rank;   /* all_gather */
	int32_t where;  /* the buffers: DVAR_WHERE_* */
	int32_t zero;   /* 0: no padding bytes, since workers compare signatures with memcmp */
	uint64_t seq;   /* the k-th collective of the run, from 1 */
	uint64_t count; /* all_reduce: elements over all buffers; broadcast: elements */
	uint64_t nbufs; /* all_reduce: buffers */
	uint64_t counts_hash;          /* all_reduce: the buffers' element counts */
	int64_t dims[DVAR_MAX_RANK];   /* all_gather: the shape, dims[axis] = 0 */
} dvar_coll_sig;

/* One replica's part in the collective it is in. */
typedef struct {
	dvar_coll_sig sig;
	int bad; /* the arguments were refused: bad_code / bad_message of the replica */
	/* all_reduce */
	size_t n;
	const void *const *src;
	void *const *dst;
	const size_t *counts;
	const uint64_t *offsets; /* n + 1 prefix sums of counts */
	/* broadcast */
	void *buf;
	/* all_gather */
	const void *gsrc;
	void *gdst;
	size_t dst_bytes;
	int64_t rows; /* this replica's length along axis */
	dvar_shape *out_shape;
} dvar_coll_args;

/* The control record every worker contributes to a control round. */
enum { DVAR_CTL_OP = 1, DVAR_CTL_END = 2, DVAR_CTL_FAIL = 3 };

typedef struct {
	int32_t kind;        /* DVAR_CTL_* */
	int32_t code;        /* FAIL: the run's code; OP: a refused argument's code, or 0 */
	int32_t replica;     /* FAIL, refused OP: the global id of the replica concerned */
	int32_t dst_min_replica; /* all_gather: whose destination is smallest */
	dvar_coll_sig sig;   /* OP */
	uint64_t rows;       /* all_gather: this worker's rows along axis */
	uint64_t dst_min;    /* all_gather: the smallest dst_bytes of its replicas */
	char message[DVAR_ERROR_MESSAGE_MAX];
} dvar_ctl_record;

/* ---------------------------------------------------------------- strategy */

struct dvar_replica {
	dvar_strategy *s;
	int local;
	int id;
	pthread_t thread;
	uint64_t seq;          /* collectives called in this run */
	dvar_coll_args *args;  /* the collective it is in */
	int echo;              /* a collective failed because another replica or worker did */
	int returned;          /* fn has returned in this run */
	/* A collective failure that fails the run even when fn ignores it. */
	int forced_code;
	int forced_original;
	char forced_message[DVAR_ERROR_MESSAGE_MAX];
	/* Refused arguments of the current collective. */
	int bad_code;
	char bad_message[DVAR_ERROR_MESSAGE_MAX];
	/* How this replica's run ended. */
	int fail_code;
	int fail_original;
	char fail_message[DVAR_ERROR_MESSAGE_MAX];
};

struct dvar_strategy {
	int R, W, worker, N;
	size_t chunk_bytes;
	int timeout_ms;
	dvar_comm *comm; /* NULL when W == 1 */
	dvar_replica *replicas;
	int nthreads;

	pthread_mutex_t lock;
	pthread_cond_t work_cv;  /* replica threads wait for a run */
	pthread_cond_t coll_cv;  /* replicas wait inside collectives */
	pthread_cond_t coord_cv; /* the coordinator waits for its replicas */
	uint64_t generation;     /* bumped to start a run */
	int stop;
	dvar_replica_fn fn;
	void *arg;
	int in_run;
	int nrunning; /* replicas still inside fn */

	/* The run failed: every later collective in it fails at once. */
	int abort;
	char abort_message[DVAR_ERROR_MESSAGE_MAX];
	/* A timeout or MPI error: every later collective and run fails. */
	int broken;
	char broken_message[DVAR_ERROR_MESSAGE_MAX];

	/* The current collective. */
	dvar_coll_args *args[DVAR_MAX_REPLICAS];
	uint64_t coll_gen;   /* bumped when the collective is decided */
	int coll_arrived;
	int coll_first;      /* the local replica that arrived first */
	int coll_ready;      /* W > 1: every local replica is in; the coordinator's turn */
	int coll_code;       /* the decision: DVAR_OK = go */
	int coll_echo;       /* the failure comes from another participant */
	int coll_forced;     /* the failure fails the run */
	int gather_valid;    /* gather_shape describes the current all_gather */
	char coll_message[DVAR_ERROR_MESSAGE_MAX];
	/* The data phase with the coordinator (W > 1). */
	/* Counted per chunk parity, k % 2: the slot chunk k may use. */
	uint64_t dp_reduced[2]; /* local pieces ready for the coordinator */
	uint64_t dp_copied[2];  /* pieces copied out */
	uint64_t dp_done;    /* pieces the coordinator finished */
	int dp_code;
	char dp_message[DVAR_ERROR_MESSAGE_MAX];
	/* The plan of an all_gather: the result's shape, and where each local
	 * replica's and each worker's rows start along axis. */
	dvar_shape gather_shape;
	int64_t gather_local_off[DVAR_MAX_REPLICAS];
	int64_t *gather_worker_off;  /* W + 1 */
	/* A barrier that ends every collective. */
	int bar_count;
	uint64_t bar_gen;

	/* W > 1: control records and scratch, reused by every collective. */
	dvar_ctl_record *ctl_mine;
	dvar_ctl_record *ctl_all; /* W */
	void *slot[2];            /* chunk_bytes each */
	void *ring_tmp;           /* chunk_bytes */

	/* The open function scope (dvar_strategy_function_begin). */
	pthread_mutex_t scope_lock;
	int scope_open;
	char *scope_name;
	char **reasons;
	size_t nreasons;

	/* The CUDA side (a dvar_cuda, runtime/cuda/cuda.h) of a strategy whose
	 * replicas keep their data on GPUs; NULL on a CPU strategy. */
	void *cuda;
	unsigned int flags; /* DVAR_STRATEGY_* */

	/* The store's pending asynchronous save, released by fini at free. */
	void *store_slot;
	void (*store_fini)(void *);
};

/* ---------------------------------------------------------------- strategy.c */

/** Under lock: a timeout or MPI error broke the strategy (message: what failed). */
void dvar_engine_break_locked(dvar_strategy *s, const char *message);

/** snprintf for messages, where truncating a long message is fine. */
void dvar_engine_format(char *buf, size_t cap, const char *fmt, ...) DVAR_PRINTF(3, 4);

/** Set and return the error every call on a broken strategy fails with. */
int dvar_engine_broken_error(const dvar_strategy *s);

/* ---------------------------------------------------------------- collective.c */

/** Describe a signature for messages: "all_reduce #3 (SUM, float32, 1000 elements)". */
void dvar_coll_describe(const dvar_coll_sig *sig, char *buf, size_t cap);

/** Under lock, W > 1, coll_ready: fill the OP record from the local replicas. */
void dvar_coll_make_record(dvar_strategy *s, dvar_ctl_record *rec);

/**
 * The coordinator's part of an agreed collective (every record is an OP with
 * the same signature): decide it, let the replicas go and move the data.
 */
void dvar_coll_serve(dvar_strategy *s, const dvar_ctl_record *recs);

/** Under lock: end the current collective with a failure for every waiting replica. */
void dvar_coll_fail_locked(dvar_strategy *s, int code, const char *message, int echo, int abort);

#endif
