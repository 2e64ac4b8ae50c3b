/*
 * store/save.h - private to store/: the save job that save.c runs (the
 * protocol: agreement rounds, the part's write, the commit) and stage.c
 * stages (the copies into the staging arena, the aggregates, the replica
 * check). Not installed.
 */
#ifndef DVAR_STORE_SAVE_H
#define DVAR_STORE_SAVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "format/format.h"
#include "runtime/input_state.h"
#include "runtime/track.h"
#include "store/store.h"

enum { KIND_MIRRORED, KIND_SYNC_ON_READ, KIND_PLAIN, KIND_SHARDED, KIND_ITERATOR };

/* The save's token is its chief's temporary-name tag (<host>-<pid>-<random>,
 * format.h): when the chief dies, the next writer into the root removes the
 * staging directory. */
#define TOKEN_BYTES DVAR_TMP_TAG_MAX

/* One thing to save: a distributed variable, a plain tensor, or one shard
 * of a sharded variable (the shards of one variable share its name). */
typedef struct {
	char *name; /* owned copy: an asynchronous save outlives the caller's strings */
	int dtype;
	dvar_shape shape;
	size_t nbytes;
	int kind;
	int sync, agg;
	dvar_variable *v;     /* a distributed variable's; after begin(), only by the
	                         replica check of an asynchronous save (held) */
	const void *src;      /* a plain tensor's or this worker's shard's elements, or
	                         NULL; not used after begin() */
	int64_t shard, nshards; /* KIND_SHARDED: which shard of how many */
	dvar_slice slice;       /* KIND_SHARDED: its rows in the full shape */
	int writer;           /* the worker that writes it */
	int checked;          /* its replicas are compared */
	size_t chunk0;        /* its first checksum in the job's arrays */
	int mismatch;         /* its replicas differ and it is saved anyway */
	const void *data;     /* what the writer adds, once staged */
	unsigned char *owned; /* a staged copy or aggregate in the job's arena, or NULL */
	dvar_input_iterator *iter; /* KIND_ITERATOR: its table, gathered from every worker */
	int64_t *table;
	/* DVAR_SAVE_DELTA (docs/STORE.md, "Delta checkpoints"). */
	dvar_track *track;    /* its variable's change tracker; NULL: saved whole */
	uint32_t snap;        /* the tracker's snapshot for this save */
	int delta;            /* DVAR_DELTA_WHOLE, _SAME or _ROWS: agreed (delta.c) */
	int64_t *rows;        /* _ROWS, on its writer: its changed rows (full-variable ids) */
	uint64_t nrows;
	size_t row_bytes;     /* bytes of one row of the value */
	int packed;           /* data holds just the rows (staged so), not the whole value */
	/* An asynchronous save's replica check on host memory (stage.c): v's
	 * tracker, held until every piece of v is checked; its pieces taken by
	 * the check's thread and by updates waiting for v; pieces not done. */
	dvar_track *hold;
	atomic_size_t claimed, left;
} item;

/* Keep a message across later calls that overwrite the error record. */
typedef struct {
	int code;
	char message[DVAR_ERROR_MESSAGE_MAX];
} saved_error;

typedef struct {
	dvar_strategy *s;
	char *root;
	int64_t step;
	int W, R, worker;
	unsigned int flags;
	int async;
	size_t n;
	item *items;
	char token[TOKEN_BYTES + 1];
	dvar_write_options wopts;
	dvar_writer *w;

	/* DVAR_SAVE_DELTA: the root as the trackers know it, and the checkpoint
	 * this save is a delta over (NULL: a full one). */
	char *root_key;
	char *base;
	uint64_t bytes;       /* this worker's data file, once written */
	double t0;            /* when the call began */

	/* Staging: page-aligned, kept between saves (store_state). */
	unsigned char *arena;
	size_t arena_cap;

	/* The replica check, per piece of the checked values (CHECK_CHUNK,
	 * stage.c): the primary's checksums (on GPUs every replica's, R ×
	 * nchunks, replica-major), and the lowest local replica that differs
	 * from the primary (0: none). */
	size_t nchunks;
	uint32_t *sums;
	int *differs;
	int phase;               /* what a staging run does (PHASE_*) */
	int late_verdict;        /* asynchronous: judged by finish(), see stage.c */
	saved_error stage_error; /* a local failure the staging run reports */
	pthread_t checker;       /* an asynchronous save's replica check, on host memory */
	int checking;            /* checker runs, to be joined */
	dvar_track_helper helper; /* how updates waiting for a held value help the check */
	atomic_size_t check_from; /* the first item that may have pieces to take */
	atomic_size_t unchecked;  /* held items not yet released */

	/* The part's write, inline or in the background. */
	pthread_t thread;
	int threaded;
	atomic_int written;
	saved_error local;
	void *blob;
	size_t blob_len;
} save_job;

/*
 * What a staging run does. PHASE_VALUES, before anything is written: the
 * aggregates and, for an asynchronous save, the copies (with
 * DVAR_SAVE_ALLOW_REPLICA_MISMATCH, fused with the replica check, whose
 * verdict the entries need; on GPUs, the other replicas' checksums).
 * PHASE_CHECK, while the part is being written: the replica check alone,
 * which then costs CPU time the disk would leave idle; for a synchronous
 * save a staging run, for an asynchronous one on host memory a thread of
 * its own after the call returned (dvar_store_check_start).
 */
enum { PHASE_VALUES, PHASE_CHECK };

/*
 * After the plan: number the checksum chunks of the values whose replicas
 * are compared (the same numbering on every worker) and carve this worker's
 * staging buffers out of j->arena (the last save's, reused when it is large
 * enough). Local: its failure goes into the next staging run.
 */
int dvar_store_stage_alloc(save_job *j);

/* A staging run in phase, collective, when the agreed list gives it
 * anything to do (the same decision on every worker). A local failure
 * recorded in j->stage_error travels into the run, which then fails
 * everywhere. */
int dvar_store_stage(save_job *j, int phase);

/* After the PHASE_VALUES run: where the writer reads each of its items from. */
void dvar_store_point_at_data(save_job *j);

/* The checksums an asynchronous save takes of its own share from the staged
 * copies, in the background (no MPI: called while the part is written). */
void dvar_store_checksum_deferred(save_job *j);

/*
 * An asynchronous save on host memory, as its part starts being written:
 * hold the trackers of the values its replica check compares (track.h: an
 * update of one waits until it has been read, helping meanwhile) and check
 * them in a thread of its own, releasing each once read. Nothing otherwise.
 */
void dvar_store_check_start(save_job *j);
/* Wait for that check (every value released, no helper left); nothing if
 * none runs. */
void dvar_store_check_join(save_job *j);

/* The replica verdict, collective, the same on every worker; rc is this
 * worker's status so far. */
int dvar_store_agree_on_replicas(save_job *j, int rc);

/* Give back a staging arena (NULL is fine). */
void dvar_store_arena_free(dvar_strategy *s, unsigned char *p);

/* ---------------------------------------------------------------- delta.c */

/*
 * Collective, after the plan, for a delta: every writer finds what changed
 * in its items since the base, the workers agree, and every item gets the
 * same decision everywhere: unchanged, changed rows, or whole (untracked,
 * every row changed, or rows that would take more bytes than the value).
 */
int dvar_store_decide_delta(save_job *j);

/* The rows of it (a _ROWS item written here) gathered from its whole value at src. */
void dvar_store_gather_rows(const item *it, const unsigned char *src, unsigned char *dst);

/* A root's name for the trackers: its real path when it exists (malloc'ed). */
char *dvar_store_root_key(const char *root);

#endif
