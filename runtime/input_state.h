/*
 * runtime/input_state.h - private to libdvar: what the store (store/save.c,
 * store/restore.c) needs of an input iterator to put its position in a
 * checkpoint and take it back (docs/INPUT.md, "Iterators in checkpoints").
 * Not installed.
 *
 * A saved iterator is an int64 table [W, DVAR_INPUT__STATE_COLUMNS], one
 * row per worker of the save, in worker order; the columns are named by
 * DVAR_INPUT__STATE_NAMES (recorded as an attribute of the entry).
 */
#ifndef DVAR_INPUT_STATE_H
#define DVAR_INPUT_STATE_H

#include <stdint.h>

#include "dvar/input.h"

DVAR_BEGIN_DECL

#define DVAR_INPUT__STATE_VERSION 1
#define DVAR_INPUT__STATE_COLUMNS 18
#define DVAR_INPUT__STATE_NAMES                                                              \
	"version,worker,num_workers,replicas_per_worker,plan,mode,auto_shard_policy,batch_size," \
	"drop_remainder,dataset_elements,stream_elements,steps,finished,input_step,position,"   \
	"outputs,ended,rows"

/* This worker's row: the position the caller has consumed (not what the
 * prefetch thread prepared ahead). Not collective. */
void dvar_input_state_row(const dvar_input_iterator *it, int64_t *row);

/*
 * Whether the saved table (rows x DVAR_INPUT__STATE_COLUMNS) can apply to
 * it (apply = 0), or apply it (apply = 1, only after a check that passed:
 * then it cannot fail). Not collective: the caller agrees on the verdict.
 * name is the entry's, for the messages.
 */
int dvar_input_restore_state(dvar_input_iterator *it, const int64_t *table, int64_t rows,
                              const char *name, int apply);

DVAR_END_DECL

#endif
