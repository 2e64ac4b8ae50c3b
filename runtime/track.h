/*
 * runtime/track.h - private to libdvar: which rows of a variable changed
 * since the last committed checkpoint of each root it is saved to, for
 * delta checkpoints (docs/STORE.md, "Delta checkpoints"). Every update path
 * of dense and sharded variables marks what it changes (track.c); the store
 * asks for the changes at a save and records the save once committed.
 *
 * Epochs: every update marks its rows with the current epoch; a save takes
 * a snapshot (the epoch it ends, after which updates mark a later one), and
 * a root remembers the snapshot of its last committed checkpoint (or of the
 * restore from it). A row changed since then is a row whose mark is later,
 * or every row when the whole variable was updated later.
 *
 * Holds: every update marks before it writes, so a mark is where an update
 * can wait. An asynchronous save holds the trackers of the values it still
 * has to read (the replica check, store/stage.c); a mark waits until they
 * are released, and dvar_variable_free does too, each helping with that
 * work meanwhile rather than sleeping.
 *
 * Threads: marking is lock-free (replica threads mark concurrently) unless
 * held; the roots list is the strategy thread's (saves and restores run
 * there).
 * Ownership: a tracker owns its marks and roots; it lives in its variable.
 */
#ifndef DVAR_RUNTIME_TRACK_H
#define DVAR_RUNTIME_TRACK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dvar/common.h"

DVAR_BEGIN_DECL

/* A root's last committed checkpoint of this variable, and its snapshot. */
typedef struct {
	char *root; /* the root's real path */
	char *ckpt; /* the checkpoint's directory name in it */
	uint32_t epoch;
} dvar_track_base;

typedef struct dvar_track {
	uint64_t rows;          /* rows along axis 0; 1 for a scalar */
	atomic_uint epoch;      /* updates mark with this one */
	atomic_uint whole;      /* the last epoch in which every row was updated */
	_Atomic uint32_t *marks; /* per row: the last epoch it was updated in; NULL: none yet */
	dvar_track_base *bases;
	size_t num_bases;
	atomic_uint held;                 /* holds not yet released */
	struct dvar_track_helper *helper; /* the holder's; guarded by track.c's lock */
} dvar_track;

/*
 * What a waiter on a held tracker does instead of sleeping: help(arg, t)
 * does a piece of the work that ends holds (t's first), returning 0 when
 * no piece is left to take. The holder owns it and drains it before it goes.
 */
typedef struct dvar_track_helper {
	int (*help)(void *arg, const dvar_track *t);
	void *arg;
	unsigned active; /* waiters inside help; guarded by track.c's lock */
} dvar_track_helper;

/* A tracker of rows rows with nothing marked. DVAR_ENOMEM when the marks
 * cannot be had (they take 4 bytes a row). */
int dvar_track_init(dvar_track *t, uint64_t rows);
void dvar_track_fini(dvar_track *t);

/* Mark rows[0..n) (axis-0 indices, checked by the caller) changed. */
void dvar_track_rows(dvar_track *t, const int64_t *rows, size_t n);
/* Mark rows [first, first + n) changed. */
void dvar_track_range(dvar_track *t, uint64_t first, uint64_t n);
/* Mark every row changed. */
void dvar_track_all(dvar_track *t);

/* Hold t: marks (so updates) wait until as many releases, helping h (may
 * be NULL: one holder at a time has a helper). */
void dvar_track_hold(dvar_track *t, dvar_track_helper *h);
void dvar_track_release(dvar_track *t);
/* Wait until t is not held, helping its holder meanwhile. */
void dvar_track_wait(dvar_track *t);
/* Wait until no waiter is inside h->help; then h may go (once nothing it
 * helps is held any more, none enters it again). */
void dvar_track_helper_drain(dvar_track_helper *h);

/* A save's view: the epoch it ends; later updates mark a later one. */
uint32_t dvar_track_snapshot(dvar_track *t);

/* What changed in rows [lo, hi) between root's base ckpt and snapshot snap. */
typedef enum {
	DVAR_TRACK_UNKNOWN, /* root's last checkpoint of it is not ckpt: save it whole */
	DVAR_TRACK_ALL,     /* every row changed */
	DVAR_TRACK_ROWS     /* *n rows (maybe 0), listed in *rows when rows is given */
} dvar_track_kind;

/*
 * The rows of [lo, hi) changed since root's checkpoint ckpt, as of snapshot
 * snap: with rows non-NULL, *rows gets them in increasing order (malloc'ed,
 * NULL for none; the caller frees it). DVAR_ENOMEM only.
 */
int dvar_track_changes(const dvar_track *t, const char *root, const char *ckpt, uint32_t snap,
                       uint64_t lo, uint64_t hi, dvar_track_kind *kind, int64_t **rows,
                       uint64_t *n);

/* root's checkpoint ckpt now holds the variable as of snapshot snap. */
int dvar_track_based(dvar_track *t, const char *root, const char *ckpt, uint32_t snap);

DVAR_END_DECL

#endif
