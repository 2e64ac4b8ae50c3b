/*
 * tests/unit/restore/restore_tu.c - see restore_tu.h.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "restore_tu.h"

void tu_array_make(tu_array *a, const char *name, int dtype, int rank, const int64_t *dims,
                   uint64_t seed)
{
	snprintf(a->name, sizeof(a->name), "%s", name);
	a->dtype = dtype;
	assert_int_equal(dvar_shape_init(&a->shape, rank, dims), DVAR_OK);
	assert_int_equal(dvar_shape_num_bytes(&a->shape, dtype, &a->bytes), DVAR_OK);
	a->data = malloc(a->bytes + 1);
	assert_non_null(a->data);
	tu_fill_random(a->data, a->bytes, seed);
	if (dtype == DVAR_BOOL)
		for (uint64_t i = 0; i < a->bytes; i++)
			a->data[i] &= 1;
}

void tu_arrays_free(tu_array *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(a[i].data);
}

void tu_assert_ckpt_holds(const char *ckpt, const tu_array *want, size_t n)
{
	dvar_reader *r = NULL;
	dvar_var_info v;
	size_t i;

	assert_int_equal(dvar_reader_open(&r, ckpt, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), n);
	for (size_t k = 0; k < n; k++) {
		const tu_array *a = &want[k];
		if (dvar_reader_find(r, a->name, &i) != DVAR_OK)
			fail_msg("'%s' is not in %s", a->name, ckpt);
		assert_int_equal(dvar_reader_var(r, i, &v), DVAR_OK);
		assert_int_equal(v.dtype, a->dtype);
		assert_true(dvar_shape_equal(&v.shape, &a->shape));
		unsigned char *got = malloc(a->bytes + 1);
		assert_non_null(got);
		assert_int_equal(dvar_reader_read(r, i, NULL, got, a->bytes), DVAR_OK);
		assert_memory_equal(got, a->data, a->bytes);
		free(got);
	}
	dvar_reader_free(r);
}

