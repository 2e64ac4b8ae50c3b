/*
 * store/store.h - private to libdvar: what save.c and restore/restore.c share. The
 * cross-worker exchange they agree through (exchange.c) and the names of the
 * kinds a checkpoint records. Not installed.
 *
 * Both exchanges are collective across workers (every worker calls them, in
 * the same order) and go through dvar_strategy_run, so a failure anywhere
 * fails them everywhere instead of hanging.
 */
#ifndef DVAR_STORE_PRIVATE_H
#define DVAR_STORE_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "dvar/store.h"

DVAR_BEGIN_DECL

/*
 * Every worker contributes len bytes of mine; on success *all (malloc'ed,
 * the caller frees it) holds the W contributions in worker order, worker w's
 * at (*all)[offs[w] .. offs[w + 1]); offs has W + 1 entries (or is NULL when
 * the caller needs none). With one worker it is a copy.
 */
int dvar_store_all_gather(dvar_strategy *s, const void *mine, size_t len, unsigned char **all,
                           size_t *offs);

/*
 * Agree on a status: every worker passes its own code (its message is the
 * calling thread's last error when code != DVAR_OK) plus an optional
 * payload, and every worker gets back the same answer: DVAR_OK when every
 * code was, otherwise the code and message of the lowest-numbered failing
 * worker ("worker 2: ..." when W > 1). On success, payloads (may be NULL)
 * receives what dvar_store_all_gather would (the payloads of every
 * worker); on failure it is left NULL.
 */
int dvar_store_agree(dvar_strategy *s, int code, const void *payload, size_t len,
                      unsigned char **payloads, size_t *offs);

/*
 * Check plain tensor #i's name, dtype and shape (not its data: whether data
 * may be NULL depends on the caller) and give its shape and size in bytes.
 */
int dvar_store_check_tensor(const dvar_store_tensor *t, size_t i, dvar_shape *shape,
                             size_t *nbytes);

/*
 * After a restore from checkpoint directory dir into these variables (on
 * every worker, not collective): dir becomes the base of the next delta
 * saved into its root (DVAR_SAVE_DELTA), the variables as restored its
 * state. Sharded variables, whose shards a restore fills in place, are
 * marked changed for every other root here. Best effort: out of memory
 * only makes the next delta save a full one.
 */
void dvar_store_restored(dvar_strategy *s, const char *dir, dvar_variable *const *vars, size_t n,
                         dvar_sharded_variable *const *sharded, size_t ns);

/* The text of a variable's synchronization or aggregation, as recorded. */
const char *dvar_store_sync_name(int sync);
const char *dvar_store_agg_name(int agg);

DVAR_END_DECL

#endif
