/*
 * tests/unit/restore/restore_tu.h - what the restore/ tests share: arrays of
 * deterministic bytes they write in some form and expect back, and checks of
 * what a checkpoint or a directory holds afterwards.
 */
#ifndef DVAR_RESTORE_TU_H
#define DVAR_RESTORE_TU_H

#include "testutil.h"
#include "dvar/dvar.h"

/* An array a test writes into some file or checkpoint and expects back. */
typedef struct {
	char name[96];
	int dtype;
	dvar_shape shape;
	unsigned char *data; /* malloc'ed: tu_arrays_free */
	uint64_t bytes;
} tu_array;

/* a: name, dtype, shape (rank, dims), pseudo-random bytes from seed (bool 0 or 1). */
void tu_array_make(tu_array *a, const char *name, int dtype, int rank, const int64_t *dims,
                   uint64_t seed);
void tu_arrays_free(tu_array *a, size_t n);

/* The checkpoint at ckpt holds exactly the n arrays of want (by name, dtype,
 * shape and bytes), however their slices lie. */
void tu_assert_ckpt_holds(const char *ckpt, const tu_array *want, size_t n);


#endif
